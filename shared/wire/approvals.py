"""What collectors and gateways agree on for remote approvals: keys, records, the edit preview.

* ``{ns}:session:<sid>:watchers`` — hash gatewayId -> ``"<count>:<expiresAtMs>"``: clients
  with a full-access token watching the session through that gateway. A gateway rewrites
  its field when its count changes and refreshes it well before it expires, so the field
  of a dead gateway stops counting once its stamp passes (and the key expires with it).
* ``{ns}:session:<sid>:approvals`` — hash requestKey -> JSON ``{host, name, expiresAt}``:
  the requests a collector holds for the session (clients may omit the key when there
  is exactly one).
* ``{ns}:approval:<requestKey>`` — the decision, claimed once with ``SET NX``: JSON
  ``{decision, message?}``. Whoever sets it first decides (a client's allow/deny, or the
  collector's timeout/cancel); everyone later is told ``already_resolved``.
* ``{ns}:session:<sid>:approval_resolved`` — JSON ``{requestKey, decision, resolvedAt}`` of
  the session's last request to end, set by the collector as it drops the request from
  ``approvals``, expiring after the approval timeout: a decision without a ``requestKey``
  that finds nothing pending is ``already_resolved`` while it exists (the client was late),
  ``no_pending_request`` otherwise.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
from collections.abc import Mapping
from typing import Any

import orjson

from relaybus.shared.store.keys import Keys
from relaybus.shared.transcript.edits import edit_info

#: Command type (gateway -> ``{ns}:cmd:<host>``) delivering a decision to the holding collector.
PERMISSION_DECISION = "permission_decision"

ALLOW = "allow"
DENY = "deny"
TIMEOUT = "timeout"
CANCELLED = "cancelled"
#: The terminal answered first (the tool's result is in the transcript, or Claude Code's own
#: dialog closed): the request is over, relaybus decided nothing.
ANSWERED_ELSEWHERE = "answered_elsewhere"
CLIENT_DECISIONS = frozenset({ALLOW, DENY})

# Error codes of accept_diff / reject_diff.
AMBIGUOUS = "ambiguous"
ALREADY_RESOLVED = "already_resolved"

#: Watcher fields count for this long by default (``RELAYBUS_WATCHERS_TTL_S``) and are
#: refreshed every third of it.
WATCHERS_TTL_S = 15
#: A decision is remembered this long after the request expired (late answers: already_resolved).
DECISION_GRACE_S = 600
PREVIEW_MAX_CHARS = 16_384
#: Files larger than this are not read for line numbers or a Write's old content.
PREVIEW_FILE_MAX_BYTES = 2 * 1024 * 1024

_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")


def pending_key(keys: Keys, sid: str) -> str:
    return f"{keys.prefix}session:{sid}:approvals"


def decision_key(keys: Keys, request_key: str) -> str:
    return f"{keys.prefix}approval:{request_key}"


def resolved_key(keys: Keys, sid: str) -> str:
    return f"{keys.prefix}session:{sid}:approval_resolved"


def resolved_record(request_key: str, decision: str, resolved_ms: int) -> bytes:
    return orjson.dumps(
        {"requestKey": request_key, "decision": decision, "resolvedAt": resolved_ms}
    )


def parse_resolved(raw: bytes | str | None) -> tuple[str, str] | None:
    """(requestKey, decision) of a :func:`resolved_record`, ``None`` if absent or malformed."""
    if raw is None:
        return None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict):
        return None
    key, decision = body.get("requestKey"), body.get("decision")
    return (key, decision) if isinstance(key, str) and isinstance(decision, str) else None


def watcher_value(count: int, expires_ms: int) -> str:
    return f"{count}:{expires_ms}"


def live_watchers(fields: Mapping[Any, Any], now_ms: int) -> int:
    """Clients counted by gateways whose stamp has not passed."""
    total = 0
    for raw in fields.values():
        text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else str(raw)
        count, _, expires = text.partition(":")
        if count.isdigit() and expires.isdigit() and int(expires) > now_ms:
            total += int(count)
    return total


def decision_record(decision: str, message: str | None = None) -> bytes:
    body: dict[str, Any] = {"decision": decision}
    if message:
        body["message"] = message
    return orjson.dumps(body)


def parse_decision(raw: bytes | str | None) -> tuple[str, str | None] | None:
    if raw is None:
        return None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("decision"), str):
        return None
    message = body.get("message")
    return body["decision"], message if isinstance(message, str) else None


# --- the edit preview -------------------------------------------------------------------


def edit_preview(
    tool_name: str,
    tool_input: Mapping[str, Any],
    *,
    root: str | None = None,
    max_chars: int = PREVIEW_MAX_CHARS,
) -> dict[str, Any] | None:
    """``edit{added, removed, hunks}`` of an edit Claude asks to make, before it is made.

    Works from ``old_string``/``new_string`` (``edits[]`` for several) or ``content``; the
    file gives real line numbers and a ``Write``'s old content when :func:`read_under`
    allows it under ``root`` (the session's cwd; ``None``: no file is read). ``None`` for
    tools that change no file text.
    """
    path = tool_input.get("file_path")
    current = read_under(root, path) if isinstance(path, str) and root else None
    pairs: list[tuple[str, str]] = []
    edits = tool_input.get("edits")
    if isinstance(edits, list):
        pairs = [
            (e["old_string"], e["new_string"])
            for e in edits
            if isinstance(e, dict)
            and isinstance(e.get("old_string"), str)
            and isinstance(e.get("new_string"), str)
        ]
    elif isinstance(tool_input.get("old_string"), str) and isinstance(
        tool_input.get("new_string"), str
    ):
        pairs = [(tool_input["old_string"], tool_input["new_string"])]
    content = tool_input.get("content")
    if not pairs and isinstance(content, str):
        if current is None:
            return edit_info(
                {"structuredPatch": [], "type": "create", "content": content}, max_chars
            )
        return edit_info({"structuredPatch": _hunks(current, content, 0)}, max_chars)
    if not pairs:
        return None
    hunks: list[dict[str, Any]] = []
    for old, new in pairs:
        at = current.find(old) if current is not None and old else -1
        offset = current.count("\n", 0, at) if current is not None and at >= 0 else 0
        hunks += _hunks(old, new, offset)
    return edit_info({"structuredPatch": hunks}, max_chars)


def _hunks(old: str, new: str, line_offset: int) -> list[dict[str, Any]]:
    """Unified-diff hunks (3 lines of context), ``oldStart`` shifted by ``line_offset``."""
    out: list[dict[str, Any]] = []
    diff = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=3)
    for line in diff:
        m = _HUNK.match(line)
        if m:
            start = int(m.group(1))
            out.append({"oldStart": max(start, 1) + line_offset, "lines": []})
        elif out and line[:1] in ("+", "-", " "):
            out[-1]["lines"].append(line)
    return out


#: Never read for a preview, whatever the cwd: the kernel's and devices' views of processes.
_NEVER_READ = ("/proc", "/sys", "/dev")
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def read_under(root: str, path: str) -> str | None:
    """The UTF-8 text of ``path`` if it is a regular file of at most
    :data:`PREVIEW_FILE_MAX_BYTES` whose real path is under ``root``'s real path and not
    under ``/proc``, ``/sys`` or ``/dev``; ``None`` otherwise (symlinks out of ``root``,
    FIFOs and devices included). The path comes from an untrusted request.
    """
    if not (os.path.isabs(root) and os.path.isabs(path)):
        return None
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if os.path.commonpath([real, real_root]) != real_root:
        return None
    if any(real == p or real.startswith(p + "/") for p in _NEVER_READ):
        return None
    try:
        fd = os.open(real, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > PREVIEW_FILE_MAX_BYTES:
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(PREVIEW_FILE_MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > PREVIEW_FILE_MAX_BYTES:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
