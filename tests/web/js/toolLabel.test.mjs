// Unit tests of the tool-row labels.
import assert from "node:assert/strict";
import test from "node:test";

import { isAgentTool, toolLabel } from "../../../gateway/static/toolLabel.js";

test("file tools are labelled with the file's basename", () => {
  assert.equal(toolLabel("Read", { file_path: "/src/app/foo.tsx" }), "Read: foo.tsx");
  assert.equal(toolLabel("Edit", { file_path: "/srv/app.py", old_string: "a" }), "Edit: app.py");
  assert.equal(toolLabel("Write", { file_path: "C:\\work\\notes.md" }), "Write: notes.md");
  assert.equal(toolLabel("MultiEdit", { file_path: "x/y/z.rs", edits: [] }), "MultiEdit: z.rs");
  assert.equal(toolLabel("NotebookEdit", { notebook_path: "/n/a.ipynb" }), "NotebookEdit: a.ipynb");
});

test("Bash shows the command's first line, shortened", () => {
  assert.equal(toolLabel("Bash", { command: "npm test" }), "Bash: npm test");
  assert.equal(toolLabel("Bash", { command: "\n  cd x &&   make\nsecond" }), "Bash: cd x && make");
  const long = toolLabel("Bash", { command: "x".repeat(300) });
  assert.ok(long.length <= "Bash: ".length + 72);
  assert.ok(long.endsWith("…"));
  assert.equal(toolLabel("Bash", { description: "Run tests" }), "Bash: Run tests");
});

test("search, web, agent and todo tools get a useful detail", () => {
  assert.equal(toolLabel("Grep", { pattern: "TODO", path: "." }), "Grep: TODO");
  assert.equal(toolLabel("Glob", { pattern: "**/*.py" }), "Glob: **/*.py");
  assert.equal(toolLabel("WebFetch", { url: "https://example.com/a?b" }), "WebFetch: example.com");
  assert.equal(toolLabel("WebSearch", { query: "redis streams" }), "WebSearch: redis streams");
  assert.equal(toolLabel("Task", { description: "Explore repo", subagent_type: "x" }), "Task: Explore repo");
  assert.equal(toolLabel("TodoWrite", { todos: [{}, {}, {}] }), "TodoWrite: 3 items");
  assert.equal(toolLabel("TodoWrite", { todos: [{}] }), "TodoWrite: 1 item");
  assert.ok(isAgentTool("Task") && isAgentTool("Agent") && !isAgentTool("Bash"));
});

test("unknown tools and odd inputs fall back to the literal name, never throw", () => {
  assert.equal(toolLabel("mcp__db__query", { sql: "select 1" }), "mcp__db__query");
  assert.equal(toolLabel("Read", null), "Read");
  assert.equal(toolLabel("Read", { file_path: 42 }), "Read");
  assert.equal(toolLabel("Bash", { command: "   " }), "Bash");
  assert.equal(toolLabel(undefined, undefined), "Tool");
  assert.equal(toolLabel("WebFetch", { url: "not a url" }), "WebFetch: not a url");
});
