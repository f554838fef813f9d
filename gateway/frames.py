"""Every frame the gateway builds itself, and :class:`Outgoing`, a frame on its way out.

Log frames (``session_event``, ``session_started``, …) arrive serialised by the collector
(:mod:`relaybus.gateway.delivery.events`); the direct frames below (``welcome``, ``sessions``,
``watch_ack``, ``decision_ack``, ``turn_status`` after a replay, ``gap_detected``,
``error``) carry the head seq (or, for a gap, the last seq before it). Command answers
(:func:`client_frame`, :func:`refusal`) and SessionInfo (:func:`session_info`, which
``list_sessions`` and push's notifications share) are built here too. Pure: no sockets,
no Redis.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from relaybus.shared import __version__
from relaybus.shared.store.session_row import SessionRow
from relaybus.shared.wire import frames
from relaybus.shared.wire.commands import (
    INTERRUPT,
    NEW_CONVERSATION,
    PROMPT,
    SET_PERMISSION_MODE,
    Command,
    Reply,
)
from relaybus.shared.wire.errors import ErrorCode

#: Refusals are ``error`` frames, except a refused interrupt (``interrupt_ack``) and a new
#: conversation's own outcome (``new_conversation_ack``); see :func:`refusal`.
INTERRUPT_ACK_CODES = frozenset(
    {ErrorCode.NO_ACTIVE_TURN, ErrorCode.INTERRUPT_UNAVAILABLE, ErrorCode.BRIDGE_ERROR}
)
#: Codes the gateway decides: a new conversation refused so gets an ``error`` frame.
GATEWAY_CODES = frozenset(
    {
        ErrorCode.FORBIDDEN,
        ErrorCode.UNKNOWN_SESSION,
        ErrorCode.HOST_OFFLINE,
        ErrorCode.TIMEOUT,
        ErrorCode.INVALID_MESSAGE,
    }
)


#: Title ranks at or below this were a prompt, not a title (hashes written before titles
#: became only what Claude Code writes as titles): shown as ``firstPrompt`` instead.
PROMPT_RANK = 1


class Outgoing(NamedTuple):
    """One frame on its way to a client."""

    #: The JSON text (``""`` for a log event bound for a sink that writes ``wire``).
    text: str
    #: The frame's ``type`` (the ``messages_sent_total`` label).
    kind: str
    #: The collector's stamp (ms) of a live log event, else 0.
    stamp_ms: int
    #: Bytes this frame counts against the connection's send budget.
    size: int
    #: The pre-encoded WebSocket frame of a log event, else ``None``.
    wire: bytes | None


def encode(frame: dict[str, Any]) -> str:
    return orjson.dumps(frame).decode()


def direct(frame: dict[str, Any]) -> Outgoing:
    """A frame built here, encoded for sending."""
    text = encode(frame)
    return Outgoing(text, str(frame["type"]), 0, len(text), None)


def with_request(frame: dict[str, Any], request_id: str | None) -> dict[str, Any]:
    if request_id is not None:
        frame["requestId"] = request_id
    return frame


def error_frame(code: str, message: str, request_id: str | None, seq_id: int) -> dict[str, Any]:
    return with_request(
        {"type": "error", "code": code, "message": message, "seqId": seq_id}, request_id
    )


def gap_frame(
    from_seq: int,
    to_seq: int,
    reason: str,
    *,
    session_id: str | None = None,
    epoch: str | None = None,
) -> dict[str, Any]:
    """``gap_detected``. Its ``seqId`` is the last seq before the gap: a client that keeps
    the highest ``seqId`` it saw never moves past what it was actually given."""
    frame: dict[str, Any] = {"type": "gap_detected"}
    if session_id is not None:
        frame["sessionId"] = session_id
    frame.update(fromSeqId=from_seq, toSeqId=to_seq, reason=reason)
    if epoch is not None:
        frame["epoch"] = epoch
    frame["seqId"] = max(from_seq - 1, 0)
    return frame


def welcome(
    capabilities: list[str],
    epoch: str,
    gateway_id: str,
    seq_id: int,
    request_id: str | None,
    *,
    read_only: bool = False,
) -> dict[str, Any]:
    """``readOnly`` (additive) tells a client its token may watch but not act, so it can
    leave out buttons that would only be answered ``forbidden``."""
    frame: dict[str, Any] = {
        "type": "welcome",
        "capabilities": capabilities,
        "epoch": epoch,
        "gatewayId": gateway_id,
        "serverVersion": __version__,
        "seqId": seq_id,
        "readOnly": read_only,
    }
    return with_request(frame, request_id)


def sessions(
    infos: list[dict[str, Any]],
    hosts: list[dict[str, Any]],
    seq_id: int,
    request_id: str | None,
) -> dict[str, Any]:
    frame = {"type": "sessions", "sessions": infos, "hosts": hosts, "seqId": seq_id}
    return with_request(frame, request_id)


def watch_ack(
    sid: str, watching: bool, seq_id: int, request_id: str | None, trace_id: str | None
) -> dict[str, Any]:
    frame: dict[str, Any] = {
        "type": "watch_ack",
        "sessionId": sid,
        "watching": watching,
        "seqId": seq_id,
    }
    if trace_id is not None:
        frame["traceId"] = trace_id
    return with_request(frame, request_id)


def decision_ack(
    sid: str,
    request_key: str,
    decision: str,
    seq_id: int,
    request_id: str | None,
    trace_id: str | None,
) -> dict[str, Any]:
    frame: dict[str, Any] = {
        "type": "decision_ack",
        "sessionId": sid,
        "requestKey": request_key,
        "decision": decision,
        "seqId": seq_id,
    }
    if trace_id:
        frame["traceId"] = trace_id
    return with_request(frame, request_id)


def turn_status(sid: str, row: SessionRow, seq_id: int) -> dict[str, Any] | None:
    """The session's current turn state (from its hash) as ``turn_status``, if it has one."""
    if not row.state:
        return None
    frame = frames.turn_status_frame(
        sid, state=row.state, since=row.since, waiting_for=row.waiting_for
    )
    frame["seqId"] = seq_id
    return frame


def _with_ids(
    frame: dict[str, Any], request_id: str | None, trace_id: str | None
) -> dict[str, Any]:
    with_request(frame, request_id)
    if trace_id:
        frame["traceId"] = trace_id
    return frame


def refusal(
    command_type: str,
    code: str,
    message: str,
    *,
    request_id: str | None = None,
    trace_id: str | None = None,
    session_id: str | None = None,
) -> dict[str, Any]:
    """The client frame for a failed command (without ``seqId``).

    Every refused interrupt is an ``interrupt_ack{ok:false, errorCode}`` (the frame a seed
    client reads); a new conversation's own outcome is a ``new_conversation_ack{ok:false}``;
    other refusals are ``error`` frames.
    """
    frame: dict[str, Any]
    if command_type == INTERRUPT:
        frame = {"type": "interrupt_ack", "ok": False, "errorCode": code, "message": message}
        if session_id:
            frame["sessionId"] = session_id
    elif command_type == NEW_CONVERSATION and code not in GATEWAY_CODES:
        frame = {"type": "new_conversation_ack", "ok": False, "errorCode": code, "message": message}
    else:
        frame = {"type": "error", "code": code, "message": message}
    return _with_ids(frame, request_id, trace_id)


def client_frame(command: Command, reply: Reply) -> dict[str, Any]:
    """The client frame answering ``command`` (without ``seqId``, which the gateway adds)."""
    rid, trace = command.request_id, command.trace_id
    if not reply.ok:
        return refusal(
            command.type,
            reply.code or ErrorCode.BRIDGE_ERROR,
            reply.message or "command failed",
            request_id=rid,
            trace_id=trace,
            session_id=command.session_id,
        )
    if command.type == PROMPT:
        frame: dict[str, Any] = {
            "type": "prompt_sent",
            "message": command.payload.get("message", ""),
            "sessionId": command.session_id,
        }
    elif command.type == INTERRUPT:
        frame = {"type": "interrupt_ack", "ok": True, "sessionId": command.session_id}
    elif command.type == SET_PERMISSION_MODE:
        frame = {"type": "permission_mode_ack", "ok": True, "sessionId": command.session_id}
        frame.update({k: reply.data[k] for k in ("mode", "driver", "appliesTo") if k in reply.data})
    else:
        frame = {"type": "new_conversation_ack", "ok": True, **reply.data}
    return _with_ids(frame, rid, trace)


def title_and_prompt(row: SessionRow) -> tuple[str | None, str | None]:
    """A session's title (only one Claude Code wrote) and its first prompt: a title ranked as
    a prompt (:data:`PROMPT_RANK`, older hashes) is the first prompt, not a title."""
    title, first = row.title, row.first_prompt
    if title and row.title_rank is not None and row.title_rank <= PROMPT_RANK:
        return None, first or title
    return title, first


def session_info(sid: str, row: SessionRow) -> dict[str, Any]:
    """SessionInfo as the seed shapes it (``title`` only when Claude Code wrote one), plus the
    additive firstPrompt/host/lastSeqId/lastActivity/state/since/waitingFor/live/historyLoaded/
    permissionMode."""
    info: dict[str, Any] = {
        "id": sid,
        "cwd": row.cwd,
        "startedAt": row.started_at,
        "entrypoint": row.entrypoint,
    }
    title, first = title_and_prompt(row)
    if title:
        info["title"] = title
    if first:
        info["firstPrompt"] = first
    info.update(
        host=row.host,
        lastSeqId=row.last_seq_id,
        lastActivity=row.last_activity,
        state=row.state or "idle",
        live=row.live,
    )
    if row.history_loaded is False:
        info["historyLoaded"] = False
    if row.state:
        info["since"] = row.since
    if row.waiting_for:
        info["waitingFor"] = row.waiting_for
    if row.permission_mode:
        info["permissionMode"] = row.permission_mode
    return info
