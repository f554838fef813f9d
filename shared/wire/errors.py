"""Every error code and close code on the wire, defined once.

:class:`ErrorCode` is what a client reads as ``error.code``, ``interrupt_ack.errorCode``
or ``new_conversation_ack.errorCode`` (the gateway's refusals and the collectors' command
outcomes alike); the web client has words for each (``tests/web/test_error_words.py``).
A permission request's *decision* (``timeout`` when nobody answered in time) is another
vocabulary: :class:`relaybus.shared.wire.approvals.Decision`.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum


class ErrorCode(StrEnum):
    # A frame the gateway could not accept.
    BAD_JSON = "bad_json"
    NOT_OBJECT = "not_object"
    UNKNOWN_TYPE = "unknown_type"
    INVALID_FIELD = "invalid_field"
    FRAME_TOO_LARGE = "frame_too_large"
    BAD_STATE = "bad_state"
    NOT_IMPLEMENTED = "not_implemented"
    # Who may ask, and whether the gateway can answer now.
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    UNAVAILABLE = "unavailable"
    # Routing a command to a machine (the gateway decides these).
    UNKNOWN_SESSION = "unknown_session"
    HOST_OFFLINE = "host_offline"
    HOST_REQUIRED = "host_required"
    #: The machine did not answer within ``command_timeout_seconds``.
    TIMEOUT = "timeout"
    # A machine's answer to a command (the collector decides these).
    INVALID_MESSAGE = "invalid_message"
    PROMPTS_DISABLED = "prompts_disabled"
    CWD_NOT_ALLOWED = "cwd_not_allowed"
    CWD_NOT_FOUND = "cwd_not_found"
    BUSY = "busy"
    UNKNOWN_OUTCOME = "unknown_outcome"
    #: The headless run exited non-zero (the message is the CLI's own reason).
    PROMPT_FAILED = "prompt_failed"
    #: A live Claude Code process relaybus cannot type into (not in tmux) owns the session.
    NOT_CONTROLLABLE = "not_controllable"
    #: The session's transcript is gone from its machine: a prompt would start a new
    #: conversation under the old id (only ``new_conversation`` creates conversations).
    TRANSCRIPT_MISSING = "transcript_missing"
    #: ``set_permission_mode``: the CLI cannot be put in that mode from here.
    MODE_UNAVAILABLE = "mode_unavailable"
    # interrupt_ack codes, exactly as the seed defines them.
    NO_ACTIVE_TURN = "no_active_turn"
    INTERRUPT_UNAVAILABLE = "interrupt_unavailable"
    BRIDGE_ERROR = "bridge_error"
    # accept_diff / reject_diff.
    AMBIGUOUS = "ambiguous"
    ALREADY_RESOLVED = "already_resolved"
    NO_PENDING_REQUEST = "no_pending_request"


class CloseCode(IntEnum):
    """WebSocket close codes the gateway sends."""

    MESSAGE_TOO_BIG = 1009
    INTERNAL_ERROR = 1011
    SERVICE_RESTART = 1012
    SLOW_CONSUMER = 4008
    RATE_LIMITED = 4029
    UNAUTHORIZED = 4401
