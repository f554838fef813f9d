// Presentation helpers computed from typed data only (name + input + edit counts).
// Pure functions, no DOM: unit-tested with `node --test tests/web_js/`.
// None of this knows Claude Code's JSONL format; it reads ContentBlock fields.

const MAX_LABEL = 72;

/** Last path segment of a file path (either slash style); "" for nothing. */
export function basename(path) {
  if (typeof path !== "string") return "";
  const trimmed = path.replace(/[\\/]+$/, "");
  const idx = Math.max(trimmed.lastIndexOf("/"), trimmed.lastIndexOf("\\"));
  return idx >= 0 ? trimmed.slice(idx + 1) : trimmed;
}

/** One line, at most `max` characters, with an ellipsis when cut. */
export function shorten(text, max = MAX_LABEL) {
  const line = String(text).split("\n").find((l) => l.trim() !== "") ?? "";
  const flat = line.trim().replace(/\s+/g, " ");
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

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

function lines(n) {
  return `${n} ${n === 1 ? "line" : "lines"}`;
}

/** "Added 12 lines, removed 3 lines" from edit.added / edit.removed. */
export function formatEditDelta(edit) {
  const added = Number.isFinite(edit?.added) ? edit.added : 0;
  const removed = Number.isFinite(edit?.removed) ? edit.removed : 0;
  if (added && removed) return `Added ${lines(added)}, removed ${lines(removed)}`;
  if (added) return `Added ${lines(added)}`;
  if (removed) return `Removed ${lines(removed)}`;
  return "No lines changed";
}

/**
 * Rows for a coloured diff of edit.hunks: a "hunk" header per hunk, then one row per
 * line with its kind ("add" | "del" | "ctx"), text without the prefix, and old/new numbers.
 */
export function diffRows(edit) {
  const rows = [];
  const hunks = Array.isArray(edit?.hunks) ? edit.hunks : [];
  let shift = 0; // new-file line offset accumulated by earlier hunks
  for (const hunk of hunks) {
    const start = Number.isFinite(hunk?.oldStart) ? hunk.oldStart : 1;
    // oldStart 0: the old side is empty (a created file); the new side starts at line 1.
    let oldNo = Math.max(start, 1);
    let newNo = Math.max(start, 1) + shift;
    const header = start === 0 ? "@@ new file" : `@@ line ${start}`;
    rows.push({ kind: "hunk", text: header, oldNo: null, newNo: null });
    for (const raw of Array.isArray(hunk?.lines) ? hunk.lines : []) {
      const line = String(raw);
      const sign = line.charAt(0);
      const text = sign === "+" || sign === "-" || sign === " " ? line.slice(1) : line;
      if (sign === "+") {
        rows.push({ kind: "add", text, oldNo: null, newNo: newNo++ });
        shift += 1;
      } else if (sign === "-") {
        rows.push({ kind: "del", text, oldNo: oldNo++, newNo: null });
        shift -= 1;
      } else {
        rows.push({ kind: "ctx", text, oldNo: oldNo++, newNo: newNo++ });
      }
    }
  }
  return rows;
}

/** Find the tool_result block answering `toolUseId` in a list of blocks (id equality only). */
export function findTypedToolResult(blocks, toolUseId) {
  if (!Array.isArray(blocks)) return undefined;
  return blocks.find((b) => b && b.kind === "tool_result" && b.toolUseId === toolUseId);
}

/** Session title: its real title -> its first prompt (relaybus's additive field) -> cwd
 * basename -> first 8 chars of the id. */
export function sessionTitle(info) {
  const title = typeof info?.title === "string" ? info.title.trim() : "";
  if (title) return title;
  const first = typeof info?.firstPrompt === "string" ? info.firstPrompt.trim() : "";
  if (first) return first;
  const base = basename(info?.cwd ?? "");
  if (base) return base;
  return String(info?.id ?? "").slice(0, 8) || "session";
}

/** "1.2 KB" style sizes for image placeholders. */
export function formatBytes(n) {
  if (!Number.isFinite(n) || n < 0) return "unknown size";
  if (n < 1024) return `${n} B`;
  const units = ["KB", "MB", "GB"];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[i]}`;
}

/** Elapsed time for the working indicator: "7s", "2m 05s", "1h 03m". */
export function formatElapsed(ms) {
  const total = Math.max(0, Math.floor((Number.isFinite(ms) ? ms : 0) / 1000));
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  if (h) return `${h}h ${String(m).padStart(2, "0")}m`;
  if (m) return `${m}m ${String(s).padStart(2, "0")}s`;
  return `${s}s`;
}

/** "just now", "5 min ago", "3 h ago", "2 d ago" relative to `now` (both epoch ms). */
export function formatAgo(ts, now) {
  if (!Number.isFinite(ts) || ts <= 0) return "";
  const sec = Math.max(0, Math.round((now - ts) / 1000));
  if (sec < 45) return "just now";
  const min = Math.round(sec / 60);
  if (min < 60) return `${min} min ago`;
  const h = Math.round(min / 60);
  if (h < 48) return `${h} h ago`;
  return `${Math.round(h / 24)} d ago`;
}

const ERROR_WORDS = {
  not_implemented: "This server can't do that yet.",
  prompts_disabled: "That machine doesn't take prompts or Stop from relaybus (turned off there).",
  host_offline: "That machine is offline right now.",
  busy: "Claude is busy with another turn; try again when it's done.",
  forbidden: "Your token isn't allowed to do that.",
  unauthorized: "That token was not accepted.",
  unknown_session: "That session no longer exists.",
  timeout: "The machine didn't answer in time.",
  interrupt_unavailable: "Stopping isn't supported for this session.",
  no_active_turn: "There was nothing to stop.",
  bridge_error: "The machine couldn't carry that out.",
  rate_limited: "Too many requests; slow down a little.",
  expired: "That request has expired.",
  unavailable: "The server's storage is unavailable; try again in a moment.",
  cwd_not_allowed: "That machine doesn't allow prompts in this folder.",
  cwd_not_found: "The session's folder no longer exists on that machine.",
  unknown_outcome: "The machine lost track of that request; check the session before retrying.",
  host_required: "Say which machine should run it.",
  invalid_message: "That message can't be sent (empty or too long).",
  invalid_field: "The request was malformed.",
  ambiguous: "Several requests are waiting; answer one of them.",
  already_resolved: "Someone already answered that request.",
  no_pending_request: "There is no request waiting for an answer.",
};

/** Every code with plain words (for tests and docs). */
export const KNOWN_ERROR_CODES = Object.freeze(Object.keys(ERROR_WORDS));

/** A plain-words explanation of an error code (OPEN union: unknown codes still read well). */
export function errorText(code, message) {
  if (typeof code === "string" && ERROR_WORDS[code]) return ERROR_WORDS[code];
  const detail = typeof message === "string" && message ? `: ${message}` : "";
  return `Something went wrong (${code || "error"})${detail}`;
}

// ---- permission cards: what exactly is being approved ---------------------------------

// Patterns Claude Code's own permission prompt treats with suspicion, plus tricks that hide
// part of a command from a one-line label. Each: [regex, warning shown on the card].
const COMMAND_FLAGS = [
  [/\n/, "Runs more than one line"],
  [/[;&|]\s*\S/, "Chains several commands (; && || |)"],
  [/\$\(|`/, "Runs a command substitution ($(…) or `…`)"],
  [/\b(curl|wget)\b[^|\n]*\|\s*(ba|z|da)?sh\b/, "Pipes a download into a shell"],
  [/\brm\s+(-[a-zA-Z]*[rf][a-zA-Z]*\s+)+/, "Deletes files recursively or forcibly (rm -r/-f)"],
  [/\bsudo\b|\bsu\s+-/, "Runs as another user (sudo/su)"],
  [/\beval\b|\bexec\b|\bsource\b|(^|\s)\.\s+\S/, "Evaluates generated code (eval/exec/source)"],
  [/\bbase64\b[^\n|]*(-d|--decode)/, "Decodes hidden content (base64 -d)"],
  [/\bgit\s+push\b[^\n]*(--force|-f\b)/, "Force-pushes (git push --force)"],
  [/\b(chmod|chown)\b[^\n]*(777|-R)/, "Changes permissions broadly (chmod/chown)"],
  [/\b(dd|mkfs|shred)\b/, "Writes raw disks or destroys data (dd/mkfs/shred)"],
  [/(^|[\s>])(~|\$HOME)?\/?\.(ssh|aws|gnupg|netrc|config\/gh)\b/, "Touches credentials (~/.ssh, ~/.aws, …)"],
  [/>\s*\/(etc|usr|bin|boot|dev)\//, "Writes to a system directory"],
];

// C0/C1 controls (except newline and tab), zero-width and bidirectional-override characters:
// they can make a command display differently from what runs.
const HIDDEN_CHARS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/g;

/** `text` with hidden/control characters shown as ⟨U+XXXX⟩. */
export function revealHidden(text) {
  return String(text).replace(
    HIDDEN_CHARS,
    (c) => `⟨U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}⟩`,
  );
}

/**
 * What a permission card must show about a shell command so that nothing it approves is
 * hidden: `{command, full, warnings}` for Bash (null otherwise). `full`: the label cut or
 * dropped something (several lines, too long, hidden characters, warnings), so the whole
 * command is shown in a scrollable block.
 */
export function commandPreview(name, input) {
  if (name !== "Bash" && name !== "PowerShell") return null;
  const raw = input && typeof input === "object" ? input.command : undefined;
  if (typeof raw !== "string" || raw === "") return null;
  const warnings = COMMAND_FLAGS.filter(([re]) => re.test(raw)).map(([, why]) => why);
  HIDDEN_CHARS.lastIndex = 0;
  if (HIDDEN_CHARS.test(raw)) warnings.unshift("Contains invisible or control characters");
  HIDDEN_CHARS.lastIndex = 0;
  const cut = shorten(raw) !== raw.trim().replace(/\s+/g, " ") || raw.trim().includes("\n");
  return { command: revealHidden(raw), full: cut || warnings.length > 0, warnings };
}
