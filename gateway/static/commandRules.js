// The one source of the rules that decide whether a shell command is shown whole and warned
// about (the web client's permission card, commandPreview.js) and whether its notification may
// offer one-tap Approve (gateway/push/policy.py). The object after `export default` is strict
// JSON: Python reads it with json.loads. Patterns use only the common subset of JavaScript and
// Python regular expressions: no flags, no `$`, no named groups, no look-behind.
//
// flags: [pattern, warning]: the command matches the pattern.
// hidden: characters that make a command display differently from what runs.
// writes: [warning, patterns]: group 1 of a pattern holds the path(s) a command writes
//   (options are skipped); the warning is given when one lies outside the project.
// harmlessTargets: absolute paths a write to is never "outside the project".
export default {
  "flags": [
    ["\\n", "Runs more than one line"],
    ["[;&|]\\s*\\S", "Chains several commands (; && || |)"],
    ["\\$\\(|`", "Runs a command substitution ($(…) or `…`)"],
    ["\\b(curl|wget|fetch|nc|ncat)\\b[^|\\n]*\\|\\s*(sudo\\s+)?(ba|z|da|k|c|tc)?sh\\b", "Pipes a download into a shell"],
    ["\\brm\\s+(-[a-zA-Z]*[rfRF][a-zA-Z]*\\s+|--recursive\\s+|--force\\s+)+", "Deletes files recursively or forcibly (rm -r/-f)"],
    ["\\bsudo\\b|\\bsu\\s+-", "Runs as another user (sudo/su)"],
    ["\\beval\\b|\\bexec\\b|\\bsource\\b|(^|\\s)\\.\\s+\\S", "Evaluates generated code (eval/exec/source)"],
    ["\\bbase64\\b[^\\n|]*(-d|--decode)", "Decodes hidden content (base64 -d)"],
    ["\\bgit\\s+push\\b[^\\n]*(--force|-f\\b)", "Force-pushes (git push --force)"],
    ["\\b(chmod|chown)\\b[^\\n]*(777|-R)", "Changes permissions broadly (chmod/chown)"],
    ["\\b(dd|mkfs|shred)\\b", "Writes raw disks or destroys data (dd/mkfs/shred)"],
    ["(^|[\\s>])(~|\\$HOME)?/?\\.(ssh|aws|gnupg|netrc|config/gh)\\b", "Touches credentials (~/.ssh, ~/.aws, …)"],
    [">\\s*/(etc|usr|bin|boot)/|>\\s*/dev/(?!null\\b|stdout\\b|stderr\\b)", "Writes to a system directory"]
  ],
  "hidden": ["[\\u0000-\\u0008\\u000b-\\u001f\\u007f-\\u009f\\u200b-\\u200f\\u202a-\\u202e\\u2060-\\u2064\\u2066-\\u2069\\ufeff]", "Contains invisible or control characters"],
  "writes": ["Writes outside the project", [
    ">>?\\s*([^\\s;&|<>()]+)",
    "\\btee\\s+((?:-[a-zA-Z]+\\s+)*[^\\s;&|<>()]+)",
    "\\b(?:cp|mv|ln|install|rsync)\\s+(?:[^;&|<>()\\n]*\\s)?([^\\s;&|<>()]+)(?=\\s*(?:[;&|)\\n]|(?![\\s\\S])))",
    "\\b(?:touch|mkdir|rm|rmdir|truncate|unlink|chmod|chown)\\s+([^;&|<>()\\n]+)",
    "\\bsed\\s+-[a-zA-Z]*i\\S*\\s+(?:[^;&|<>()\\n]*\\s)?([^\\s;&|<>()]+)(?=\\s*(?:[;&|)\\n]|(?![\\s\\S])))"
  ]],
  "harmlessTargets": ["/dev/null", "/dev/stdout", "/dev/stderr"]
}
