"""Every frame the gateway builds itself, and :class:`Outgoing`, a frame on its way out.

Log frames (``session_event``, ``session_started``, …) arrive serialised by the collector
(:mod:`relaybus.gateway.delivery.events`); the direct frames below (``welcome``, ``sessions``,
``watch_ack``, ``decision_ack``, ``turn_status`` after a replay, ``gap_detected``,
``error``) carry the head seq (or, for a gap, the last seq before it). Pure: no sockets,
no Redis. Command answers are built by :mod:`relaybus.shared.wire.commands`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from relaybus.shared import __version__
from relaybus.shared.store.session_row import SessionRow
from relaybus.shared.wire import frames


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
