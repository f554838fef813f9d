"""The command/reply envelopes shared by gateways and collectors, and the client frames the
gateway answers them with."""

from __future__ import annotations

from typing import Any

import pytest

from relaybus.gateway import frames as f
from relaybus.shared.wire import commands as c
from relaybus.shared.wire.commands import Command, EnvelopeError, Reply
from relaybus.shared.wire.errors import ErrorCode


def _cmd(type_: str = c.PROMPT, **kw: object) -> Command:
    base: dict[str, Any] = {
        "id": "cmd-1",
        "type": type_,
        "session_id": "sid-1",
        "gateway_id": "gw-1",
        "deadline_ms": 123,
        "payload": {"message": "hi"},
        "request_id": "r-1",
        "trace_id": "t-1",
    }
    base.update(kw)
    return Command(**base)


def _wire(fields: dict[str, bytes | str]) -> dict[bytes, bytes]:
    return {k.encode(): v if isinstance(v, bytes) else v.encode() for k, v in fields.items()}


def test_command_round_trips_through_stream_fields() -> None:
    """A command decodes from its stream fields to an equal command."""
    cmd = _cmd()
    assert Command.from_fields(_wire(cmd.fields())) == cmd


def test_command_without_request_or_trace_ids_decodes_to_none() -> None:
    """Absent requestId/traceId travel as empty fields and come back as None."""
    cmd = _cmd(request_id=None, trace_id=None)
    back = Command.from_fields(_wire(cmd.fields()))
    assert back.request_id is None and back.trace_id is None


def test_malformed_command_raises_envelope_error() -> None:
    """A stream entry without a deadline or with a non-object payload is refused."""
    with pytest.raises(EnvelopeError):
        Command.from_fields({b"id": b"x", b"type": b"prompt", b"gw": b"g"})
    with pytest.raises(EnvelopeError):
        Command.from_fields(_wire({**_cmd().fields(), "payload": b"[1]"}))


def test_reply_round_trips_through_stream_fields() -> None:
    """Replies keep ok, code, message and data."""
    reply = Reply("cmd-1", False, ErrorCode.BUSY, "busy now", {"x": 1})
    assert Reply.from_fields(_wire(reply.fields())) == reply


def test_prompt_ok_becomes_prompt_sent_with_request_and_trace_ids() -> None:
    """A successful prompt is answered prompt_sent echoing the message."""
    frame = f.client_frame(_cmd(), Reply("cmd-1", True))
    assert frame == {
        "type": "prompt_sent",
        "message": "hi",
        "sessionId": "sid-1",
        "requestId": "r-1",
        "traceId": "t-1",
    }


def test_prompt_failure_becomes_error_frame() -> None:
    """A refused prompt is an error frame with the collector's code."""
    frame = f.client_frame(_cmd(), Reply.failure("cmd-1", ErrorCode.BUSY, "busy"))
    assert frame["type"] == "error" and frame["code"] == "busy" and frame["requestId"] == "r-1"


@pytest.mark.parametrize("code", sorted(f.INTERRUPT_ACK_CODES))
def test_interrupt_codes_become_interrupt_ack(code: str) -> None:
    """The seed's interrupt codes are interrupt_ack{ok:false, errorCode}."""
    frame = f.client_frame(_cmd(c.INTERRUPT), Reply.failure("cmd-1", code, "no"))
    assert frame["type"] == "interrupt_ack" and frame["ok"] is False and frame["errorCode"] == code


def test_gateway_refusals_are_errors_except_for_interrupts() -> None:
    """host_offline/timeout/unknown_session are error frames, but interrupt_ack for an interrupt."""
    for type_ in sorted(c.COMMAND_TYPES - {c.INTERRUPT}):
        for code in (ErrorCode.FORBIDDEN, ErrorCode.HOST_OFFLINE, ErrorCode.TIMEOUT):
            assert f.refusal(type_, code, "m", request_id="r")["type"] == "error"
    for code in (
        ErrorCode.HOST_OFFLINE,
        ErrorCode.TIMEOUT,
        ErrorCode.UNKNOWN_SESSION,
        ErrorCode.PROMPTS_DISABLED,
    ):
        frame = f.refusal(c.INTERRUPT, code, "m", request_id="r", session_id="s")
        assert frame == {
            "type": "interrupt_ack",
            "ok": False,
            "errorCode": code,
            "message": "m",
            "sessionId": "s",
            "requestId": "r",
        }


def test_new_conversation_outcomes_are_acks() -> None:
    """new_conversation answers new_conversation_ack, ok or with an errorCode."""
    cmd = _cmd(c.NEW_CONVERSATION, session_id="", payload={})
    ok = f.client_frame(
        cmd, Reply("cmd-1", True, data={"sessionId": "s", "host": "h", "cwd": "/w"})
    )
    assert ok == {
        "type": "new_conversation_ack",
        "ok": True,
        "sessionId": "s",
        "host": "h",
        "cwd": "/w",
        "requestId": "r-1",
        "traceId": "t-1",
    }
    bad = f.client_frame(cmd, Reply.failure("cmd-1", ErrorCode.CWD_NOT_ALLOWED, "no"))
    assert bad["type"] == "new_conversation_ack" and bad["errorCode"] == "cwd_not_allowed"
