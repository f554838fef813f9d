"""The shape of a working directory a client names (``new_conversation.cwd``).

Checked at the gateway (``invalid_field`` before anything is routed) and again by the
collector before the path reaches ``realpath``, a child's ``cwd`` or a Redis hash: a NUL
byte would raise inside the standard library, a control character could reach a terminal
or a log line, and a relative path would depend on the collector's own directory.
"""

from __future__ import annotations

import unicodedata

#: Longest accepted cwd, in UTF-8 bytes (Linux ``PATH_MAX``).
MAX_CWD_BYTES = 4096
#: Characters that render a line differently from its bytes (line/paragraph separators and
#: bidirectional overrides and isolates).
_INVISIBLE = frozenset("\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def cwd_problem(cwd: str) -> str | None:
    """Why ``cwd`` cannot name a directory to run in; ``None`` when it can.

    Accepted: an absolute path (``/…``) or one under the home directory (``~``, ``~/…``) of at
    most :data:`MAX_CWD_BYTES` bytes, without control characters (C0 including NUL, DEL, C1)
    or the invisible characters of :data:`_INVISIBLE`.
    """
    try:
        size = len(cwd.encode())
    except UnicodeEncodeError:
        return "cwd is not valid UTF-8"
    if size > MAX_CWD_BYTES:
        return f"cwd exceeds {MAX_CWD_BYTES} bytes"
    for ch in cwd:
        if unicodedata.category(ch) == "Cc" or ch in _INVISIBLE:
            return f"cwd contains the control character U+{ord(ch):04X}"
    if not (cwd.startswith("/") or cwd == "~" or cwd.startswith("~/")):
        return "cwd must be an absolute path (or start with ~/)"
    return None
