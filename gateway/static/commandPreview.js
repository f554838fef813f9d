// What a permission card must show about a shell command so nothing it approves is hidden.
// The rules are shared with the push notifications (commandRules.js, gateway/push/policy.py).

import RULES from "./commandRules.js";
import { shorten } from "./text.js";

// Patterns Claude Code's own permission prompt treats with suspicion, plus tricks that hide
// part of a command from a one-line label. Each: [regex, warning shown on the card].
const COMMAND_FLAGS = RULES.flags.map(([source, why]) => [new RegExp(source), why]);
// C0/C1 controls (except newline and tab), zero-width and bidirectional-override characters:
// they can make a command display differently from what runs.
const HIDDEN_CHARS = new RegExp(RULES.hidden[0], "g");
const [WRITES_WARNING, WRITES] = [RULES.writes[0], RULES.writes[1].map((s) => new RegExp(s, "g"))];
const HARMLESS = new Set(RULES.harmlessTargets);

/** `text` with hidden/control characters shown as ⟨U+XXXX⟩. */
export function revealHidden(text) {
  return String(text).replace(
    HIDDEN_CHARS,
    (c) => `⟨U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}⟩`,
  );
}

function segments(path) {
  const out = [];
  for (const seg of path.split("/")) {
    if (seg === "" || seg === ".") continue;
    if (seg === "..") {
      if (!out.length) return null; // climbs above where it started
      out.pop();
    } else out.push(seg);
  }
  return out;
}

/**
 * Does writing `target` leave the project `cwd`? Home (`~`), variables and climbing out are
 * outside; without a known (absolute) cwd every absolute path is. Same rule as policy.py.
 */
export function outsideProject(target, cwd) {
  const path = target.replace(/^['"]+|['"]+$/g, "");
  if (path === "" || HARMLESS.has(path)) return false;
  if (path.startsWith("~") || path.startsWith("$")) return true;
  const base = typeof cwd === "string" && cwd.startsWith("/") ? segments(cwd) : null;
  if (path.startsWith("/") && !base) return true;
  const full = segments(path.startsWith("/") ? path : `${base ? base.join("/") : ""}/${path}`);
  if (!full) return true;
  return base ? base.some((seg, i) => full[i] !== seg) : false;
}

/** The card's warnings for shell command `raw` run in `cwd` (if known), in a fixed order. */
export function commandWarnings(raw, cwd) {
  const warnings = COMMAND_FLAGS.filter(([re]) => re.test(raw)).map(([, why]) => why);
  HIDDEN_CHARS.lastIndex = 0;
  if (HIDDEN_CHARS.test(raw)) warnings.unshift(RULES.hidden[1]);
  HIDDEN_CHARS.lastIndex = 0;
  const targets = WRITES.flatMap((re) => [...raw.matchAll(re)].map((m) => m[1]));
  const paths = targets.flatMap((t) => t.split(/[ \t\n\r\f\v]+/)).filter((p) => p && !p.startsWith("-"));
  if (paths.some((p) => outsideProject(p, cwd))) warnings.push(WRITES_WARNING);
  return warnings;
}

/**
 * What a permission card must show about a shell command so that nothing it approves is
 * hidden: `{command, full, warnings}` for Bash (null otherwise). `full`: the one-line label
 * does not show the command exactly as it runs (several lines, too long, spacing, hidden
 * characters) or there are warnings, so the whole command is shown in a block above Approve.
 */
export function commandPreview(name, input, cwd) {
  if (name !== "Bash" && name !== "PowerShell") return null;
  const raw = input && typeof input === "object" ? input.command : undefined;
  if (typeof raw !== "string" || raw === "") return null;
  const warnings = commandWarnings(raw, cwd);
  return { command: revealHidden(raw), full: shorten(raw) !== raw || warnings.length > 0, warnings };
}
