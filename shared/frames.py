"""Wire-frame prefixes for log events.

Each log entry stores its wire frame serialised once, by the collector; the append
script closes the JSON object with the ids it assigns. These builders return the
frame without its closing ``}``.
"""

from __future__ import annotations

from typing import Any

import orjson

SESSION_EVENT = "session_event"
SESSION_STARTED = "session_started"
SESSION_ENDED = "session_ended"
TURN_STATUS = "turn_status"

#: Log kinds every client may receive (subject to capabilities); the rest are per-watch.
BROADCAST_KINDS = frozenset({SESSION_STARTED, SESSION_ENDED, TURN_STATUS})


def _prefix(obj: dict[str, Any]) -> bytes:
    raw = orjson.dumps(obj)
    return raw[:-1]


def session_event(
    sid: str, event: dict[str, Any], *, trace_id: str | None = None
) -> bytes:
    """``event`` is ``{type, blocks, data?, …}``; ``data`` may be an ``orjson.Fragment``."""
    frame: dict[str, Any] = {"type": SESSION_EVENT, "sessionId": sid, "event": event}
    if trace_id:
        frame["traceId"] = trace_id
    return _prefix(frame)


def session_started(
    sid: str, *, cwd: str, entrypoint: str, host: str, title: str | None, started_at: int
) -> bytes:
    return _prefix(
        {
            "type": SESSION_STARTED,
            "sessionId": sid,
            "cwd": cwd,
            "entrypoint": entrypoint,
            "host": host,
            "title": title,
            "startedAt": started_at,
        }
    )


def session_ended(sid: str, *, reason: str) -> bytes:
    return _prefix({"type": SESSION_ENDED, "sessionId": sid, "reason": reason})


def turn_status(sid: str, *, state: str, since: int, waiting_for: str | None = None) -> bytes:
    frame: dict[str, Any] = {"type": TURN_STATUS, "sessionId": sid, "state": state, "since": since}
    if waiting_for:
        frame["waitingFor"] = waiting_for
    return _prefix(frame)
