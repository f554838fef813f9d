// The one source of the rules that decide whether a shell command is shown whole and warned
// about (the web client's permission card, commandPreview.js) and whether its notification may
// offer one-tap Approve (gateway/push/policy.py). The object after `export default` is strict
// JSON: Python reads it with json.loads. Patterns use only the common subset of JavaScript and
// Python regular expressions: no flags, no `$`, no named groups, no look-behind, and no `\s`
// or `\S` except in `[\s\S]` (the engines disagree on which characters are spaces; a shell
// splits words on ASCII ones). Python compiles them with re.ASCII, so `\b` and `\w` agree.
//
// flags: [pattern, warning]: the command matches the pattern.
// hidden: characters that make a command display differently from what runs.
// writes: [warning, patterns]: group 1 of a pattern holds the path(s) a command writes
//   (options are skipped); the warning is given when one lies outside the project.
// harmlessTargets: absolute paths a write to is never "outside the project".
export default {
  "flags": [
    ["\\n", "Runs more than one line"],
    ["[;&|][ \\t\\n\\r\\f\\v]*[^ \\t\\n\\r\\f\\v]", "Chains several commands (; && || |)"],
    ["\\$\\(|`", "Runs a command substitution ($(…) or `…`)"],
    ["\\b(curl|wget|fetch|nc|ncat)\\b[^|\\n]*\\|[ \\t\\n\\r\\f\\v]*(sudo[ \\t\\n\\r\\f\\v]+)?(ba|z|da|k|c|tc)?sh\\b", "Pipes a download into a shell"],
    ["\\brm[ \\t\\n\\r\\f\\v]+(-[a-zA-Z]*[rfRF][a-zA-Z]*[ \\t\\n\\r\\f\\v]+|--recursive[ \\t\\n\\r\\f\\v]+|--force[ \\t\\n\\r\\f\\v]+)+", "Deletes files recursively or forcibly (rm -r/-f)"],
    ["\\bsudo\\b|\\bsu[ \\t\\n\\r\\f\\v]+-", "Runs as another user (sudo/su)"],
    ["\\beval\\b|\\bexec\\b|\\bsource\\b|(^|[ \\t\\n\\r\\f\\v])\\.[ \\t\\n\\r\\f\\v]+[^ \\t\\n\\r\\f\\v]", "Evaluates generated code (eval/exec/source)"],
    ["\\bbase64\\b[^\\n|]*(-d|--decode)", "Decodes hidden content (base64 -d)"],
    ["\\bgit[ \\t\\n\\r\\f\\v]+push\\b[^\\n]*(--force|-f\\b)", "Force-pushes (git push --force)"],
    ["\\b(chmod|chown)\\b[^\\n]*(777|-R)", "Changes permissions broadly (chmod/chown)"],
    ["\\b(dd|mkfs|shred)\\b", "Writes raw disks or destroys data (dd/mkfs/shred)"],
    ["(^|[ \\t\\n\\r\\f\\v>])(~|\\$HOME)?/?\\.(ssh|aws|gnupg|netrc|config/gh)\\b", "Touches credentials (~/.ssh, ~/.aws, …)"],
    [">[ \\t\\n\\r\\f\\v]*/(etc|usr|bin|boot)/|>[ \\t\\n\\r\\f\\v]*/dev/(?!null\\b|stdout\\b|stderr\\b)", "Writes to a system directory"]
  ],
  "hidden": ["[\\u0000-\\u0008\\u000b-\\u001f\\u007f-\\u009f\\u200b-\\u200f\\u202a-\\u202e\\u2060-\\u2064\\u2066-\\u2069\\ufeff]", "Contains invisible or control characters"],
  "writes": ["Writes outside the project", [
    ">>?[ \\t\\n\\r\\f\\v]*([^ \\t\\n\\r\\f\\v;&|<>()]+)",
    "\\btee[ \\t\\n\\r\\f\\v]+((?:-[a-zA-Z]+[ \\t\\n\\r\\f\\v]+)*[^ \\t\\n\\r\\f\\v;&|<>()]+)",
    "\\b(?:cp|mv|ln|install|rsync)[ \\t\\n\\r\\f\\v]+(?:[^;&|<>()\\n]*[ \\t\\n\\r\\f\\v])?([^ \\t\\n\\r\\f\\v;&|<>()]+)(?=[ \\t\\n\\r\\f\\v]*(?:[;&|)\\n]|(?![\\s\\S])))",
    "\\b(?:touch|mkdir|rm|rmdir|truncate|unlink|chmod|chown)[ \\t\\n\\r\\f\\v]+([^;&|<>()\\n]+)",
    "\\bsed[ \\t\\n\\r\\f\\v]+-[a-zA-Z]*i[^ \\t\\n\\r\\f\\v]*[ \\t\\n\\r\\f\\v]+(?:[^;&|<>()\\n]*[ \\t\\n\\r\\f\\v])?([^ \\t\\n\\r\\f\\v;&|<>()]+)(?=[ \\t\\n\\r\\f\\v]*(?:[;&|)\\n]|(?![\\s\\S])))"
  ]],
  "harmlessTargets": ["/dev/null", "/dev/stdout", "/dev/stderr"]
}
