"""The shape of a Claude Code session id, checked wherever an id comes from outside.

Claude Code names sessions with UUIDs; anything of up to 64 letters, digits, ``_`` and
``-`` that starts with a letter or digit is accepted too (older and future CLIs). An id
outside this shape never reaches Redis (``:`` would splice key names), a command line
(``-`` first would read as an option) or a path (``/``, ``..``).
"""

from __future__ import annotations

import re
from typing import TypeGuard

#: The accepted session (and sub-agent) id, as a regular expression.
SESSION_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
_SESSION_ID = re.compile(SESSION_ID_PATTERN)


def valid_session_id(value: object) -> TypeGuard[str]:
    """True when ``value`` is a string of the session id shape."""
    return isinstance(value, str) and _SESSION_ID.fullmatch(value) is not None
