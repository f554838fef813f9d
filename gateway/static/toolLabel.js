// Pure tool-row labels from a tool's name and typed input ("Read: foo.tsx", "Bash: npm test").
// None of this knows Claude Code's JSONL format; it reads ContentBlock fields.

import { basename, shorten } from "./text.js";

function str(input, key) {
  const v = input && typeof input === "object" ? input[key] : undefined;
  return typeof v === "string" && v.trim() !== "" ? v : "";
}

function hostOf(url) {
  try {
    return new URL(url).host || url;
  } catch {
    return url;
  }
}

/** Pick the detail shown after "Name: " for known tool names (OPEN union: unknown -> ""). */
function detailFor(name, input) {
  switch (name) {
    case "Read":
    case "Write":
    case "Edit":
    case "MultiEdit":
      return basename(str(input, "file_path"));
    case "NotebookEdit":
      return basename(str(input, "notebook_path"));
    case "Bash":
      return shorten(str(input, "command") || str(input, "description"));
    case "Grep":
    case "Glob":
      return shorten(str(input, "pattern"));
    case "WebFetch":
      return hostOf(str(input, "url"));
    case "WebSearch":
    case "ToolSearch":
      return shorten(str(input, "query"));
    case "Task":
    case "Agent":
      return shorten(str(input, "description") || str(input, "subagent_type"));
    case "TodoWrite": {
      const todos = input && Array.isArray(input.todos) ? input.todos.length : 0;
      return todos ? `${todos} ${todos === 1 ? "item" : "items"}` : "";
    }
    default:
      return "";
  }
}

/** Tool row label, e.g. "Read: foo.tsx", "Bash: npm test"; unknown tools show the literal name. */
export function toolLabel(name, input) {
  const literal = typeof name === "string" && name !== "" ? name : "Tool";
  const detail = detailFor(literal, input);
  return detail ? `${literal}: ${detail}` : literal;
}

/** True for tools whose sub-agent events are grouped under the tool row. */
export function isAgentTool(name) {
  return name === "Task" || name === "Agent";
}
