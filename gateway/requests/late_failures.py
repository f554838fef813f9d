"""Prompts that failed after their ``prompt_sent``: the collector's second reply
(``data.late``) goes to the client that sent the prompt as ``error{prompt_failed}``, for
:data:`LATE_TTL_S` and while that connection lasts."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from relaybus.gateway.delivery.connection import Connection
from relaybus.gateway.frames import refusal
from relaybus.gateway.metrics import GatewayMetrics
from relaybus.shared.wire.commands import PROMPT, Reply
from relaybus.shared.wire.errors import ErrorCode

log = logging.getLogger(__name__)

#: How long (and how many) answered prompts can still get a late failure.
LATE_TTL_S = 3600.0
LATE_MAX = 10_000


class LateFailures:
    """Answered prompts by command id, and the client told when one fails late."""

    def __init__(self, metrics: GatewayMetrics, *, position: Callable[[], int]) -> None:
        self._metrics = metrics
        self._position = position
        #: Command id -> (connection, request id, trace id, session, expiry).
        self._answered: OrderedDict[str, tuple[Connection, str | None, str | None, str, float]] = (
            OrderedDict()
        )

    def remember(
        self, cmd_id: str, conn: Connection, sid: str, request_id: str | None, trace_id: str | None
    ) -> None:
        """``cmd_id`` was answered ``prompt_sent`` on ``conn``: it may still fail late."""
        now = time.monotonic()
        while self._answered and (
            len(self._answered) >= LATE_MAX or next(iter(self._answered.values()))[4] < now
        ):
            self._answered.popitem(last=False)
        self._answered[cmd_id] = (conn, request_id, trace_id, sid, now + LATE_TTL_S)

    def failed(self, reply: Reply) -> None:
        """A prompt's run failed after ``prompt_sent``: tell the client that sent it."""
        entry = self._answered.pop(reply.command_id, None)
        if entry is None:
            return
        conn, rid, trace, sid, _expiry = entry
        if conn.close_code is not None:
            return
        frame = refusal(
            PROMPT,
            reply.code or ErrorCode.PROMPT_FAILED,
            reply.message or "the prompt failed",
            request_id=rid,
            trace_id=trace,
        )
        frame["sessionId"] = sid
        frame["seqId"] = self._position()
        conn.send(frame)
        self._metrics.commands.labels(PROMPT, f"late_{reply.code or 'error'}").inc()
        log.info(
            "command %s prompt session=%s request=%s: failed late: %s",
            reply.command_id,
            sid or "-",
            rid or "-",
            reply.code,
        )
