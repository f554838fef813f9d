// Unit tests of the pure presentation helpers (labels, edit deltas, diff rows, titles).
import assert from "node:assert/strict";
import test from "node:test";

import {
  basename,
  diffRows,
  errorText,
  findTypedToolResult,
  formatAgo,
  formatBytes,
  formatEditDelta,
  formatElapsed,
  isAgentTool,
  sessionTitle,
  shorten,
  toolLabel,
} from "../../gateway/static/toolDisplay.js";

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

test("formatEditDelta counts lines with singular and plural", () => {
  assert.equal(formatEditDelta({ added: 12, removed: 3 }), "Added 12 lines, removed 3 lines");
  assert.equal(formatEditDelta({ added: 1, removed: 1 }), "Added 1 line, removed 1 line");
  assert.equal(formatEditDelta({ added: 4, removed: 0 }), "Added 4 lines");
  assert.equal(formatEditDelta({ added: 0, removed: 2 }), "Removed 2 lines");
  assert.equal(formatEditDelta({ added: 0, removed: 0 }), "No lines changed");
  assert.equal(formatEditDelta(undefined), "No lines changed");
});

test("diffRows classifies lines and numbers old and new sides across hunks", () => {
  const rows = diffRows({
    added: 2,
    removed: 1,
    hunks: [
      { oldStart: 10, lines: [" keep", "-old", "+new", "+extra"] },
      { oldStart: 20, lines: [" tail", "-gone"] },
    ],
  });
  assert.deepEqual(
    rows.map((r) => [r.kind, r.text, r.oldNo, r.newNo]),
    [
      ["hunk", "@@ line 10", null, null],
      ["ctx", "keep", 10, 10],
      ["del", "old", 11, null],
      ["add", "new", null, 11],
      ["add", "extra", null, 12],
      ["hunk", "@@ line 20", null, null],
      ["ctx", "tail", 20, 21],
      ["del", "gone", 21, null],
    ],
  );
});

test("diffRows numbers a created file from line 1", () => {
  const rows = diffRows({ added: 2, removed: 0, hunks: [{ oldStart: 0, lines: ["+a", "+b"] }] });
  assert.deepEqual(
    rows.map((r) => [r.kind, r.text, r.oldNo, r.newNo]),
    [["hunk", "@@ new file", null, null], ["add", "a", null, 1], ["add", "b", null, 2]],
  );
});

test("diffRows tolerates missing hunks and unprefixed lines", () => {
  assert.deepEqual(diffRows(undefined), []);
  assert.deepEqual(diffRows({ hunks: "nope" }), []);
  const rows = diffRows({ hunks: [{ lines: ["plain", 7] }] });
  assert.deepEqual(rows.map((r) => [r.kind, r.text]), [["hunk", "@@ line 1"], ["ctx", "plain"], ["ctx", "7"]]);
});

test("findTypedToolResult matches by toolUseId equality only", () => {
  const blocks = [
    { kind: "text", text: "x" },
    { kind: "tool_result", toolUseId: "a", isError: false },
    { kind: "tool_result", toolUseId: "b", isError: true },
  ];
  assert.equal(findTypedToolResult(blocks, "b").isError, true);
  assert.equal(findTypedToolResult(blocks, "c"), undefined);
  assert.equal(findTypedToolResult(null, "a"), undefined);
});

test("sessionTitle prefers title, then first prompt, then cwd basename, then the id prefix", () => {
  assert.equal(sessionTitle({ id: "abcdef123456", cwd: "/p/app", title: "Fix login" }), "Fix login");
  assert.equal(sessionTitle({ id: "abcdef123456", cwd: "/p/app", firstPrompt: "do it" }), "do it");
  assert.equal(sessionTitle({ id: "abcdef123456", title: "T", firstPrompt: "do it" }), "T");
  assert.equal(sessionTitle({ id: "abcdef123456", cwd: "/p/app/", title: "  " }), "app");
  assert.equal(sessionTitle({ id: "abcdef123456", cwd: "" }), "abcdef12");
  assert.equal(basename("/"), "");
});

test("sizes, elapsed times and ages read naturally", () => {
  assert.equal(formatBytes(512), "512 B");
  assert.equal(formatBytes(2048), "2.0 KB");
  assert.equal(formatBytes(5 * 1024 * 1024), "5.0 MB");
  assert.equal(formatBytes(undefined), "unknown size");
  assert.equal(formatElapsed(7_400), "7s");
  assert.equal(formatElapsed(125_000), "2m 05s");
  assert.equal(formatElapsed(3_780_000), "1h 03m");
  assert.equal(formatElapsed(-5), "0s");
  const now = 1_700_000_000_000;
  assert.equal(formatAgo(now - 10_000, now), "just now");
  assert.equal(formatAgo(now - 5 * 60_000, now), "5 min ago");
  assert.equal(formatAgo(now - 3 * 3600_000, now), "3 h ago");
  assert.equal(formatAgo(now - 3 * 86400_000, now), "3 d ago");
  assert.equal(formatAgo(0, now), "");
  assert.equal(shorten("a\nb"), "a");
});

test("error codes are explained in plain words; unknown codes still read well", () => {
  for (const code of ["not_implemented", "prompts_disabled", "host_offline", "busy", "forbidden"]) {
    assert.doesNotMatch(errorText(code), /Something went wrong|_/, code);
  }
  assert.match(errorText("prompts_disabled"), /turned off/);
  assert.equal(errorText("weird_new_code", "detail"), "Something went wrong (weird_new_code): detail");
});
