// What a permission card must show about a shell command so nothing it approves is hidden.

import { shorten } from "./text.js";

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
