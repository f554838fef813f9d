"""The gateway's link to the collectors: commands out through ``{ns}:cmd:<host>``, replies
back through ``{ns}:reply:<gatewayId>``.

:class:`CommandLink` is the one place a :class:`Command` is built and sent (by the command
router and by approvals). Its :class:`ReplyReader` is the process's one reader of the reply
stream; a waiting command is resolved by its id.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from relaybus.gateway.context import GatewayContext
from relaybus.gateway.stream_tail import StreamTail
from relaybus.shared.aio import now_ms
from relaybus.shared.store.command_streams import ensure_group
from relaybus.shared.store.keys import CMD_MAXLEN
from relaybus.shared.wire.commands import LATE, Command, EnvelopeError, Reply

log = logging.getLogger(__name__)


class CommandLink:
    """Builds, sends and (for a round trip) waits for the reply of commands to machines."""

    def __init__(self, ctx: GatewayContext, *, on_late: Callable[[Reply], None]) -> None:
        """Replies are read through ``ctx.reader``; ``on_late`` is told of late failures."""
        self._client = ctx.client
        self._keys = ctx.keys
        self._gateway_id = ctx.gateway_id
        self.timeout_s = ctx.settings.command_timeout_seconds
        self._round_trip_seconds = ctx.metrics.command_round_trip
        self.replies = ReplyReader(
            ctx.reader, ctx.keys.reply(ctx.gateway_id), on_late=on_late, block_ms=ctx.block_ms
        )

    def command(
        self,
        type_: str,
        session_id: str,
        *,
        payload: dict[str, Any] | None = None,
        request_id: str | None = None,
        trace_id: str | None = None,
        by: dict[str, str] | None = None,
    ) -> Command:
        """A new command from this gateway, due within the command timeout; ``by``: who asked."""
        return Command(
            id=str(uuid.uuid4()),
            type=type_,
            session_id=session_id,
            gateway_id=self._gateway_id,
            deadline_ms=now_ms() + int(self.timeout_s * 1000),
            payload=payload or {},
            request_id=request_id,
            trace_id=trace_id,
            by=by,
        )

    async def send(self, host: str, cmd: Command) -> None:
        """Append ``cmd`` to ``host``'s command stream (its consumer group created if new)."""
        stream = self._keys.cmd(host)
        await ensure_group(self._client, stream)
        await self._client.xadd(stream, cmd.fields(), maxlen=CMD_MAXLEN, approximate=True)  # type: ignore[arg-type]

    async def round_trip(self, host: str, cmd: Command) -> Reply | None:
        """Send ``cmd`` and wait for its reply; ``None`` when none came within the timeout."""
        fut = self.replies.expect(cmd.id)
        started = time.monotonic()
        try:
            await asyncio.wait_for(self.replies.ready.wait(), self.timeout_s)
            await self.send(host, cmd)
            reply = await asyncio.wait_for(fut, self.timeout_s)
        except TimeoutError:
            return None
        finally:
            self.replies.forget(cmd.id)
        self._round_trip_seconds.observe(time.monotonic() - started)
        return reply


class ReplyReader:
    """The process's one reader of its reply stream; futures are resolved by command id."""

    def __init__(
        self,
        client: aioredis.Redis,
        stream: str,
        *,
        on_late: Callable[[Reply], None],
        block_ms: int = 1000,
    ) -> None:
        """``client`` must allow reads of ``block_ms`` (``relaybus.shared.store.connection.connect(block_ms=…)``);
        ``on_late`` is told of a late reply (``data.late``): a command failed after its first
        answer."""
        self._tail = StreamTail(client, stream, what="reply stream", block_ms=block_ms)
        self._on_late = on_late
        self._waiting: dict[str, asyncio.Future[Reply]] = {}
        self._running = False
        #: Set once the reader knows where the stream ends (replies before it are not ours
        #: to wait for); commands wait for it.
        self.ready = self._tail.ready

    def close(self) -> None:
        """Cancel every command still waiting (its reader task is the runtime's)."""
        for fut in self._waiting.values():
            fut.cancel()
        self._waiting.clear()

    def healthy(self) -> bool:
        """:meth:`run` is running (not crashed, not waiting to be restarted)."""
        return self._running

    def expect(self, command_id: str) -> asyncio.Future[Reply]:
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._waiting[command_id] = fut
        return fut

    def forget(self, command_id: str) -> None:
        self._waiting.pop(command_id, None)

    async def run(self) -> None:
        """Read replies until cancelled, riding out Redis outages; any other error ends it
        (the runtime's supervisor logs, counts and restarts it)."""
        self._running = True
        try:
            await self._tail.follow(self._resolve)
        finally:
            self._running = False

    async def _resolve(self, _eid: str, fields: dict[bytes, bytes]) -> None:
        try:
            reply = Reply.from_fields(fields)
        except EnvelopeError as exc:
            log.warning("dropping malformed reply: %s", exc)
            return
        if reply.data.get(LATE):
            self._on_late(reply)
            return
        fut = self._waiting.pop(reply.command_id, None)
        if fut is not None and not fut.done():
            fut.set_result(reply)
        else:
            log.debug("reply to %s arrived with nobody waiting", reply.command_id)
