"""Following one stream from its end, entry by entry, across Redis outages: the gateway's
readers of ``{ns}:revocations`` and of its command replies ``{ns}:reply:<gatewayId>``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

from relaybus.shared.aio import Backoff, Outage, reraise_if_cancelling
from relaybus.shared.store.connection import REDIS_UNAVAILABLE

log = logging.getLogger(__name__)

#: What a tail calls with each entry: its id and its fields.
Handler = Callable[[str, dict[bytes, bytes]], Awaitable[None]]

#: Entries one XREAD returns at most.
BATCH = 100


class StreamTail:
    """Reads ``stream`` from where it ended when first read, forever.

    Each entry goes to the handler in order; :attr:`position` moves past it once the handler
    returned, so a handler's error ends :meth:`follow` and the next call (the supervisor's
    restart) hands the same entry again. Redis outages are retried with a jittered backoff
    (0.2 s doubling to 10 s; a warning when an outage starts, an info line when it ends)
    from :attr:`position`: no entry written meanwhile is missed.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        stream: str,
        *,
        what: str,
        block_ms: int,
        backoff: Backoff | None = None,
    ) -> None:
        """``client`` must allow reads of ``block_ms`` (``connection.connect(block_ms=…)``);
        ``what`` names the stream in the log."""
        self._client = client
        self._stream = stream
        self._block_ms = block_ms
        self._outage = Outage(log, what, backoff or Backoff(first_s=0.2, max_s=10.0))
        #: The id of the last entry handled (``$``: not started, the stream's end).
        self.position = "$"
        #: Set once the tail knows where the stream ended.
        self.ready = asyncio.Event()

    async def follow(self, handle: Handler) -> None:
        """Hand every new entry to ``handle`` until cancelled; only a handler's error ends it."""
        while True:
            try:
                if self.position == "$":
                    newest: Any = await self._client.xrevrange(self._stream, count=1)
                    self.position = _text(newest[0][0]) if newest else "0-0"
                    self.ready.set()
                reply: Any = await self._client.xread(
                    {self._stream: self.position}, count=BATCH, block=self._block_ms
                )
                self._outage.ok()
            except REDIS_UNAVAILABLE as exc:
                reraise_if_cancelling(exc)
                await asyncio.sleep(self._outage.failed(exc))
                continue
            for _stream, entries in reply or []:
                for eid, fields in entries:
                    await handle(_text(eid), fields)
                    self.position = _text(eid)


def _text(eid: bytes | str) -> str:
    return eid.decode() if isinstance(eid, bytes) else str(eid)
