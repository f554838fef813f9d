"""Command and reply envelopes between gateways and collectors.

A gateway XADDs a :class:`Command` to ``{ns}:cmd:<host>`` (consumer group ``collectors``);
the host's collector executes it and XADDs a :class:`Reply` to ``{ns}:reply:<gatewayId>``;
the gateway turns the reply into the client's frame
(:func:`relaybus.gateway.frames.client_frame`). Both sides import this module, so the stream
fields are defined once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from relaybus.shared.wire.json_object import json_object

PROMPT = "prompt"
INTERRUPT = "interrupt_request"
NEW_CONVERSATION = "new_conversation"
#: Client commands a gateway routes to the session's machine (``{ns}:cmd:<host>``).
COMMAND_TYPES = frozenset({PROMPT, INTERRUPT, NEW_CONVERSATION})
#: Switch a session's Claude Code permission mode (``{sessionId, mode}``), routed like a prompt.
SET_PERMISSION_MODE = "set_permission_mode"
#: Commands of one session a collector runs in stream order.
SESSION_COMMAND_TYPES = COMMAND_TYPES | {SET_PERMISSION_MODE}
#: Permission modes a client may ask for: what Claude Code writes as ``permissionMode``
#: (``default`` is the one its terminal calls "manual").
PERMISSION_MODES = ("default", "acceptEdits", "plan", "auto", "dontAsk", "bypassPermissions")
#: Gateway-internal: publish the history of a session listed without it (relaybus.collector.history).
LOAD_HISTORY = "load_history"

#: Heartbeat capabilities (``{ns}:host:<host>`` JSON ``capabilities``).
CAP_LOAD_HISTORY = "load_history"
CAP_PROMPTS = "prompts"

#: ``Reply.data`` flag of a second reply: the command failed after its first (ok) reply.
LATE = "late"
MAX_MESSAGE_CHARS = 100_000


class EnvelopeError(ValueError):
    """A stream entry is not a well-formed command or reply."""


def _text(fields: Mapping[bytes, bytes], name: str, *, required: bool = True) -> str:
    raw = fields.get(name.encode())
    if raw is None:
        if required:
            raise EnvelopeError(f"missing field {name!r}")
        return ""
    return raw.decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class Command:
    """One routed command. ``deadline_ms`` is the gateway's wall clock when it gives up."""

    id: str
    type: str
    session_id: str
    gateway_id: str
    deadline_ms: int
    payload: dict[str, Any] = field(default_factory=dict)
    request_id: str | None = None
    trace_id: str | None = None
    #: Who asked (``{member, tokenId, device}``) for the collector's audit entry; ``None`` for
    #: the gateway's own commands (``load_history``).
    by: dict[str, str] | None = None

    def fields(self) -> dict[str, bytes | str]:
        out: dict[str, bytes | str] = {
            "id": self.id,
            "type": self.type,
            "sid": self.session_id,
            "gw": self.gateway_id,
            "deadline": str(self.deadline_ms),
            "payload": orjson.dumps(self.payload),
            "rid": self.request_id or "",
            "trace": self.trace_id or "",
        }
        if self.by:
            out["by"] = orjson.dumps(self.by)
        return out

    @classmethod
    def from_fields(cls, fields: Mapping[bytes, bytes]) -> Command:
        try:
            deadline = int(_text(fields, "deadline"))
            payload = orjson.loads(fields.get(b"payload", b"{}"))
        except (ValueError, orjson.JSONDecodeError) as exc:
            raise EnvelopeError(str(exc)) from None
        if not isinstance(payload, dict):
            raise EnvelopeError("payload is not an object")
        return cls(
            id=_text(fields, "id"),
            type=_text(fields, "type"),
            session_id=_text(fields, "sid", required=False),
            gateway_id=_text(fields, "gw"),
            deadline_ms=deadline,
            payload=payload,
            request_id=_text(fields, "rid", required=False) or None,
            trace_id=_text(fields, "trace", required=False) or None,
            by=_by(fields.get(b"by")),
        )


#: The fields of ``Command.by`` and their longest kept value.
_BY_FIELDS = ("member", "tokenId", "device")
_BY_MAX = 64


def _by(raw: bytes | None) -> dict[str, str] | None:
    """``Command.by`` from its field; ``None`` when absent or malformed (hostile: bounded)."""
    if not raw or len(raw) > 1024:
        return None
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    by = {k: obj[k][:_BY_MAX] for k in _BY_FIELDS if isinstance(obj.get(k), str)}
    return by or None


@dataclass(frozen=True, slots=True)
class Reply:
    """A collector's answer: ``ok`` with ``data``, or an error ``code`` and ``message``."""

    command_id: str
    ok: bool
    code: str | None = None
    message: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def failure(cls, command_id: str, code: str, message: str) -> Reply:
        return cls(command_id, False, code, message)

    def fields(self) -> dict[str, bytes | str]:
        body = {"ok": self.ok, "code": self.code, "message": self.message, "data": self.data}
        return {"id": self.command_id, "r": orjson.dumps(body)}

    @classmethod
    def from_fields(cls, fields: Mapping[bytes, bytes]) -> Reply:
        try:
            body = orjson.loads(fields.get(b"r", b""))
        except orjson.JSONDecodeError as exc:
            raise EnvelopeError(str(exc)) from None
        if not isinstance(body, dict):
            raise EnvelopeError("reply body is not an object")
        data = body.get("data")
        return cls(
            command_id=_text(fields, "id"),
            ok=bool(body.get("ok")),
            code=body.get("code") if isinstance(body.get("code"), str) else None,
            message=body.get("message") if isinstance(body.get("message"), str) else None,
            data=data if isinstance(data, dict) else {},
        )


def host_capabilities(heartbeat: bytes | str | None) -> list[str]:
    """The ``capabilities`` of a ``{ns}:host:<host>`` heartbeat value ([] when absent or unreadable)."""
    value = json_object(heartbeat)
    caps = value.get("capabilities") if value is not None else None
    return [str(x) for x in caps] if isinstance(caps, list) else []
