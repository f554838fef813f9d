"""The shapes of a Claude Code session id and of a machine id, checked wherever one comes
from outside.

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


#: A machine id (``RELAYBUS_HOST_ID``, a command's ``host``, a token scope's hosts): up to
#: 128 characters, none of them whitespace, ``:`` or braces (Redis keys and hash tags), nor a
#: C0/C1 control character or DEL (they would reach logs, the audit trail and the phone).
HOST_ID_PATTERN = r"^[^\s{}:\x00-\x1f\x7f-\x9f]{1,128}$"
_HOST_ID = re.compile(HOST_ID_PATTERN)


def valid_host_id(value: object) -> TypeGuard[str]:
    """True when ``value`` is a string of the machine id shape."""
    return isinstance(value, str) and _HOST_ID.fullmatch(value) is not None
