"""The client side of the wire protocol: parse and validate client frames (replies are built
in :mod:`relaybus.gateway.frames`).

Pure: no sockets, no Redis. A bad frame becomes a :class:`ProtocolError` carrying the
protocol error code; the connection layer turns it into an ``error`` frame.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from relaybus.shared.wire.errors import ErrorCode
from relaybus.shared.wire.ids import HOST_ID_PATTERN, SESSION_ID_PATTERN

#: Capabilities this server understands; ``welcome`` echoes the intersection.
SESSION_SUBSCRIPTIONS = "session_subscriptions"
TURN_STATUS_OBSERVE = "turn_status_observe"
BLOCKS_ONLY = "blocks_only"
KNOWN_CAPABILITIES = (SESSION_SUBSCRIPTIONS, TURN_STATUS_OBSERVE, BLOCKS_ONLY)


class ProtocolError(Exception):
    """A client frame was refused; ``code`` is the wire error code."""

    def __init__(self, code: ErrorCode, message: str, request_id: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


class _Msg(BaseModel):
    # Unknown (future) fields are ignored; known ones are type-checked strictly.
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    requestId: str | None = Field(default=None, max_length=256)
    traceId: str | None = Field(default=None, max_length=256)


#: Claude Code's id shape (shared/wire/ids.py): never ``:`` (Redis keys), never ``-`` first (argv).
SessionId = Annotated[str, Field(pattern=SESSION_ID_PATTERN)]
#: A collector's request key (hex); nothing that could splice a Redis key.
RequestKey = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,128}$")]
SeqId = Annotated[int, Field(ge=0)]


class Hello(_Msg):
    type: Literal["hello"]
    capabilities: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=list, max_length=64
    )
    lastSeqId: SeqId | None = None
    epoch: str | None = Field(default=None, max_length=128)
    token: str | None = Field(default=None, max_length=1024)


class ListSessions(_Msg):
    type: Literal["list_sessions"]


class WatchSession(_Msg):
    type: Literal["watch_session"]
    sessionId: SessionId
    sinceSeqId: SeqId | None = None


class UnwatchSession(_Msg):
    type: Literal["unwatch_session"]
    sessionId: SessionId


class NewConversation(_Msg):
    type: Literal["new_conversation"]
    sessionId: SessionId | None = None
    cwd: str | None = Field(default=None, max_length=4096)
    host: str | None = Field(default=None, pattern=HOST_ID_PATTERN)


class Prompt(_Msg):
    type: Literal["prompt"]
    message: str
    sessionId: SessionId | None = None


class InterruptRequest(_Msg):
    type: Literal["interrupt_request"]
    sessionId: SessionId


class AcceptDiff(_Msg):
    type: Literal["accept_diff"]
    sessionId: SessionId | None = None
    requestKey: RequestKey | None = None
    #: AskUserQuestion: question -> label | [labels] | free text (checked against the request).
    answers: dict[str, str | list[str]] | None = None
    #: An index into the request's ``suggestions`` ("always allow").
    suggestion: int | None = Field(default=None, ge=0, le=1000)


class RejectDiff(_Msg):
    type: Literal["reject_diff"]
    sessionId: SessionId | None = None
    requestKey: RequestKey | None = None
    reason: str | None = Field(default=None, max_length=4096)
    #: "Reject and stop Claude": the CLI ends the turn instead of going on.
    interrupt: bool = False


class SetPermissionMode(_Msg):
    type: Literal["set_permission_mode"]
    sessionId: SessionId
    mode: Literal["default", "acceptEdits", "plan", "auto", "dontAsk", "bypassPermissions"]


Command = NewConversation | Prompt | InterruptRequest | AcceptDiff | RejectDiff | SetPermissionMode
ClientMessage = Hello | ListSessions | WatchSession | UnwatchSession | Command

_ADAPTER: TypeAdapter[ClientMessage] = TypeAdapter(
    Annotated[ClientMessage, Field(discriminator="type")]
)
#: Every client message type (a ``Command`` needs a full-access token).
_TYPES = frozenset(
    get_args(model.model_fields["type"].annotation)[0] for model in get_args(ClientMessage)
)


def parse_client_frame(raw: str | bytes, max_bytes: int) -> ClientMessage:
    """Validate one client frame; raise :class:`ProtocolError` with the matching code."""
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > max_bytes:
        raise ProtocolError(ErrorCode.FRAME_TOO_LARGE, f"frame of {size} bytes exceeds {max_bytes}")
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(ErrorCode.BAD_JSON, f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(ErrorCode.NOT_OBJECT, "a frame must be a JSON object")
    rid = obj.get("requestId")
    request_id = rid if isinstance(rid, str) and len(rid) <= 256 else None
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(ErrorCode.INVALID_FIELD, "missing string field 'type'", request_id)
    if kind not in _TYPES:
        raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"unknown type {kind[:64]!r}", request_id)
    try:
        return _ADAPTER.validate_python(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"][1:]) or "?"
        raise ProtocolError(
            ErrorCode.INVALID_FIELD, f"field {loc!r}: {err['msg']}", request_id
        ) from None


def accepted_capabilities(requested: list[str]) -> list[str]:
    """The requested capabilities this server knows, in the server's order."""
    wanted = set(requested)
    return [c for c in KNOWN_CAPABILITIES if c in wanted]
