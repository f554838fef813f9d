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
SESSION_UPDATED = "session_updated"
TURN_STATUS = "turn_status"

PERMISSION_REQUEST = "permission_request"
PERMISSION_RESOLVED = "permission_resolved"

#: Log kinds every client may receive (subject to capabilities); the rest are per-watch.
BROADCAST_KINDS = frozenset({SESSION_STARTED, SESSION_ENDED, SESSION_UPDATED, TURN_STATUS})
#: Log kinds of one session's stream: delivered to its watchers and replayed on watch.
SESSION_KINDS = frozenset({SESSION_EVENT, PERMISSION_REQUEST, PERMISSION_RESOLVED})


def _prefix(obj: dict[str, Any]) -> bytes:
    raw = orjson.dumps(obj)
    return raw[:-1]


def session_event(sid: str, event: dict[str, Any], *, trace_id: str | None = None) -> bytes:
    """``event`` is ``{type, blocks, data?, …}``; ``data`` may be an ``orjson.Fragment``."""
    frame: dict[str, Any] = {"type": SESSION_EVENT, "sessionId": sid, "event": event}
    if trace_id:
        frame["traceId"] = trace_id
    return _prefix(frame)


def session_started(
    sid: str,
    *,
    cwd: str,
    entrypoint: str,
    host: str,
    title: str | None,
    started_at: int,
    first_prompt: str | None = None,
    permission_mode: str | None = None,
) -> bytes:
    frame: dict[str, Any] = {
        "type": SESSION_STARTED,
        "sessionId": sid,
        "cwd": cwd,
        "entrypoint": entrypoint,
        "host": host,
        "title": title,
        "startedAt": started_at,
    }
    if first_prompt:
        frame["firstPrompt"] = first_prompt
    if permission_mode:
        frame["permissionMode"] = permission_mode
    return _prefix(frame)


def session_updated(sid: str, info: dict[str, Any]) -> bytes:
    """A session's SessionInfo changed (title, firstPrompt, cwd, entrypoint, permissionMode): ``session`` is
    the whole SessionInfo as the collector knows it."""
    return _prefix({"type": SESSION_UPDATED, "sessionId": sid, "session": info})


def session_ended(sid: str, *, reason: str) -> bytes:
    return _prefix({"type": SESSION_ENDED, "sessionId": sid, "reason": reason})


def turn_status_frame(
    sid: str, *, state: str, since: int, waiting_for: str | None = None
) -> dict[str, Any]:
    """The ``turn_status`` frame (without ``seqId``): logged by the collector, and sent by a
    gateway from the session hash to a client that starts watching."""
    frame: dict[str, Any] = {"type": TURN_STATUS, "sessionId": sid, "state": state, "since": since}
    if waiting_for:
        frame["waitingFor"] = waiting_for
    return frame


def turn_status(sid: str, *, state: str, since: int, waiting_for: str | None = None) -> bytes:
    return _prefix(turn_status_frame(sid, state=state, since=since, waiting_for=waiting_for))


def permission_request(
    sid: str,
    *,
    request_key: str,
    tool_use_id: str | None,
    name: str,
    tool_input: dict[str, Any],
    edit: dict[str, Any] | None,
    expires_at: int,
    asks: dict[str, Any] | None = None,
) -> bytes:
    """A held permission request (session stream, no ``sessionSeq``); ``asks`` adds what it
    asks beyond yes/no: ``questions``, ``suggestions``, ``plan``, ``answerable: false`` with
    ``answerableReason`` (``relaybus.collector.approvals.asks``)."""
    frame: dict[str, Any] = {
        "type": PERMISSION_REQUEST,
        "sessionId": sid,
        "requestKey": request_key,
        "name": name,
        "input": tool_input,
    }
    if tool_use_id:
        frame["toolUseId"] = tool_use_id
    if edit is not None:
        frame["edit"] = edit
    frame.update(asks or {})
    frame["expiresAt"] = expires_at
    return _prefix(frame)


def permission_resolved(
    sid: str,
    *,
    request_key: str,
    decision: str,
    message: str | None = None,
    decided_by: dict[str, Any] | None = None,
) -> bytes:
    """``decision``: ``allow``, ``deny``, ``timeout``, ``cancelled`` or ``answered_elsewhere``
    (open union); ``decided_by``: who decided from a client (``{member, device, at}``)."""
    frame: dict[str, Any] = {
        "type": PERMISSION_RESOLVED,
        "sessionId": sid,
        "requestKey": request_key,
        "decision": decision,
    }
    if message:
        frame["message"] = message
    if decided_by:
        frame["decidedBy"] = decided_by
    return _prefix(frame)
