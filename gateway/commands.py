"""Route commands to the session's machine and answer the client that asked.

``prompt`` / ``interrupt_request`` / ``new_conversation`` go to ``{ns}:cmd:<host>`` after a
heartbeat check (``host_offline`` at once when the host is gone). One
:class:`ReplyReader` per process reads ``{ns}:reply:<gatewayId>`` and resolves the
waiting command by id; no reply within ``command_timeout_seconds`` is ``timeout``. Every
request gets exactly one answer, logged and counted once — and a prompt whose headless run
fails after its ``prompt_sent`` gets a second reply from the collector (``data.late``),
sent to the same client as ``error{code:"prompt_failed", message, requestId, sessionId}``
(for :data:`LATE_TTL_S`, while the connection lasts).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from relaybus.gateway import protocol
from relaybus.gateway.connection import Connection
from relaybus.gateway.metrics import GatewayMetrics
from relaybus.gateway.protocol import ErrorCode, ProtocolError
from relaybus.shared.settings import Settings
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire import commands as c
from relaybus.shared.wire.commands import Command, EnvelopeError, Reply

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 5.0
#: Commands one connection may have waiting for their machine; more are refused.
MAX_IN_FLIGHT = 16
#: How long (and how many) answered prompts can still get a late failure.
LATE_TTL_S = 3600.0
LATE_MAX = 10_000


class ReplyReader:
    """The process's one reader of its reply stream; futures are resolved by command id."""

    def __init__(self, client: aioredis.Redis, stream: str, *, block_ms: int = 1000) -> None:
        """``client`` must allow reads of ``block_ms`` (``relaybus.shared.store.connection.connect(block_ms=…)``)."""
        self._client = client
        self._stream = stream
        self._block_ms = block_ms
        self._waiting: dict[str, asyncio.Future[Reply]] = {}
        self._last = "0-0"
        self._running = False
        #: Told of a late reply (``data.late``): a command failed after its first answer.
        self.on_late: Callable[[Reply], None] | None = None
        #: Set once the reader knows where the stream ends; commands wait for it.
        self.ready = asyncio.Event()

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
            await self._read()
        finally:
            self._running = False

    async def _read(self) -> None:
        backoff = 0.1
        while True:
            try:
                if not self.ready.is_set():
                    # replies before the stream's current end are not ours to wait for
                    newest: Any = await self._client.xrevrange(self._stream, count=1)
                    if newest:
                        self._last = newest[0][0].decode()
                    self.ready.set()
                response: Any = await self._client.xread(
                    {self._stream: self._last}, count=100, block=self._block_ms
                )
                backoff = 0.1
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise asyncio.CancelledError from exc  # redis-py turned a cancel into this
                log.warning("reply stream unavailable: %s; retrying in %.1fs", exc, backoff)
                await asyncio.sleep(backoff * (1 + random.random()))
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            for _stream, entries in response or []:
                for entry_id, fields in entries:
                    self._last = entry_id.decode()
                    self._resolve(fields)

    def _resolve(self, fields: dict[bytes, bytes]) -> None:
        try:
            reply = Reply.from_fields(fields)
        except EnvelopeError as exc:
            log.warning("dropping malformed reply: %s", exc)
            return
        if reply.data.get(c.LATE):
            if self.on_late is not None:
                self.on_late(reply)
            return
        fut = self._waiting.pop(reply.command_id, None)
        if fut is not None and not fut.done():
            fut.set_result(reply)
        else:
            log.debug("reply to %s arrived with nobody waiting", reply.command_id)


class GatewayCommands:
    """The gateway's command router: prompt, interrupt_request, new_conversation, load_history."""

    def __init__(
        self,
        *,
        client: aioredis.Redis,
        reader_client: aioredis.Redis,
        keys: Keys,
        settings: Settings,
        gateway_id: str,
        metrics: GatewayMetrics,
        position: Callable[[], int],
        block_ms: int = 1000,
    ) -> None:
        self._client = client
        self._keys = keys
        self._timeout_s = settings.command_timeout_seconds
        self._gateway_id = gateway_id
        self._metrics = metrics
        self._position = position
        self.replies = ReplyReader(reader_client, keys.reply(gateway_id), block_ms=block_ms)
        self.replies.on_late = self._late
        #: Answered prompts by command id: (connection, request id, trace id, session, expiry).
        self._answered: OrderedDict[str, tuple[Connection, str | None, str | None, str, float]] = (
            OrderedDict()
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self._in_flight: dict[str, int] = {}
        self._history: dict[str, asyncio.Future[bool]] = {}

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.replies.close()

    async def handle(self, conn: Connection, msg: protocol.Command) -> None:
        """Validate now (errors go back through the endpoint), answer from a task of its own."""
        if isinstance(msg, protocol.Prompt):
            if msg.sessionId is None:
                raise ProtocolError(
                    ErrorCode.INVALID_FIELD, "prompt needs a sessionId", msg.requestId
                )
            if not msg.message.strip() or len(msg.message) > c.MAX_MESSAGE_CHARS:
                raise ProtocolError(
                    ErrorCode.INVALID_FIELD,
                    f"message must be 1..{c.MAX_MESSAGE_CHARS} characters",
                    msg.requestId,
                )
        if self._in_flight.get(conn.cid, 0) >= MAX_IN_FLIGHT:
            raise ProtocolError(
                ErrorCode.UNAVAILABLE,
                f"{MAX_IN_FLIGHT} commands are already waiting; wait for their answers",
                msg.requestId,
            )
        self._in_flight[conn.cid] = self._in_flight.get(conn.cid, 0) + 1
        task = asyncio.create_task(self._answer(conn, msg), name=f"command-{msg.type}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _t: self._release(conn.cid))

    def _release(self, cid: str) -> None:
        left = self._in_flight.get(cid, 1) - 1
        if left > 0:
            self._in_flight[cid] = left
        else:
            self._in_flight.pop(cid, None)

    async def _answer(self, conn: Connection, msg: protocol.Command) -> None:
        started = time.monotonic()
        cmd_id = "-"
        try:
            frame, outcome, cmd_id = await self.execute(msg)
        except RedisError as exc:
            log.warning("command %s: Redis error: %s", msg.type, exc)
            frame = c.refusal(
                msg.type,
                ErrorCode.UNAVAILABLE,
                "storage unavailable, retry",
                request_id=msg.requestId,
                trace_id=msg.traceId,
            )
            outcome = ErrorCode.UNAVAILABLE.value
        except Exception:  # a bug must still answer the request, and be seen
            log.exception("command %s failed", msg.type)
            frame = c.refusal(
                msg.type,
                c.BRIDGE_ERROR,
                "internal error",
                request_id=msg.requestId,
                trace_id=msg.traceId,
            )
            outcome = "internal_error"
        elapsed = time.monotonic() - started
        frame["seqId"] = self._position()
        conn.send(frame)
        if frame.get("type") == "prompt_sent":
            self._remember(cmd_id, conn, msg)
        self._metrics.commands.labels(msg.type, outcome).inc()
        log.info(
            "command %s %s session=%s request=%s trace=%s: %s in %.3fs",
            cmd_id,
            msg.type,
            getattr(msg, "sessionId", None) or "-",
            msg.requestId or "-",
            msg.traceId or "-",
            outcome,
            elapsed,
        )

    def _remember(self, cmd_id: str, conn: Connection, msg: protocol.Command) -> None:
        now = time.monotonic()
        while self._answered and (
            len(self._answered) >= LATE_MAX or next(iter(self._answered.values()))[4] < now
        ):
            self._answered.popitem(last=False)
        sid = str(getattr(msg, "sessionId", "") or "")
        self._answered[cmd_id] = (conn, msg.requestId, msg.traceId, sid, now + LATE_TTL_S)

    def _late(self, reply: Reply) -> None:
        """A prompt's run failed after ``prompt_sent``: tell the client that sent it."""
        entry = self._answered.pop(reply.command_id, None)
        if entry is None:
            return
        conn, rid, trace, sid, _expiry = entry
        if conn.close_code is not None:
            return
        frame = c.refusal(
            c.PROMPT,
            reply.code or c.PROMPT_FAILED,
            reply.message or "the prompt failed",
            request_id=rid,
            trace_id=trace,
        )
        frame["sessionId"] = sid
        frame["seqId"] = self._position()
        conn.send(frame)
        self._metrics.commands.labels(c.PROMPT, f"late_{reply.code or 'error'}").inc()
        log.info(
            "command %s prompt session=%s request=%s: failed late: %s",
            reply.command_id,
            sid or "-",
            rid or "-",
            reply.code,
        )

    async def execute(self, msg: protocol.Command) -> tuple[dict[str, Any], str, str]:
        """Route one command; returns the client frame (no seqId), the outcome and the command id."""
        rid, trace = msg.requestId, msg.traceId

        def refuse(code: str, message: str) -> tuple[dict[str, Any], str, str]:
            return c.refusal(msg.type, code, message, request_id=rid, trace_id=trace), code, "-"

        payload: dict[str, Any] = {}
        sid = ""
        if isinstance(msg, protocol.NewConversation):
            host = msg.host or await self._only_live_host()
            if host is None:
                return refuse(c.HOST_REQUIRED, "several or no machines are live: say which host")
            if msg.cwd:
                payload["cwd"] = msg.cwd
        else:
            sid = str(getattr(msg, "sessionId", "") or "")
            route = await c.session_route(self._client, self._keys, sid)
            if route is None:
                return refuse(c.UNKNOWN_SESSION, f"no session {sid!r}")
            host = route[0]
            if isinstance(msg, protocol.Prompt):
                payload["message"] = msg.message
        if not await self._client.exists(self._keys.host(host)):
            return refuse(c.HOST_OFFLINE, f"machine {host!r} is offline")
        cmd = Command(
            id=str(uuid.uuid4()),
            type=msg.type,
            session_id=sid,
            gateway_id=self._gateway_id,
            deadline_ms=c.now_ms() + int(self._timeout_s * 1000),
            payload=payload,
            request_id=rid,
            trace_id=trace,
        )
        reply = await self._round_trip(host, cmd)
        if reply is None:
            frame = c.refusal(
                msg.type,
                c.TIMEOUT,
                f"machine {host!r} did not answer in {self._timeout_s:g}s",
                request_id=rid,
                trace_id=trace,
            )
            return frame, c.TIMEOUT, cmd.id
        outcome = "ok" if reply.ok else (reply.code or "error")
        return c.client_frame(cmd, reply), outcome, cmd.id

    async def load_history(self, sid: str, host: str) -> bool:
        """Ask ``host`` to publish ``sid``'s history (``relaybus.collector.history``); True once it did.

        Concurrent watches of one session on this gateway share one command; the collector
        publishes a history at most once whoever asks.
        """
        shared = self._history.get(sid)
        if shared is not None:
            return await asyncio.shield(shared)
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._history[sid] = fut
        ok = False
        try:
            ok = await self._load_history(sid, host)
        finally:
            del self._history[sid]
            fut.set_result(ok)
        return ok

    async def _load_history(self, sid: str, host: str) -> bool:
        if c.CAP_LOAD_HISTORY not in c.host_capabilities(
            await self._client.get(self._keys.host(host))
        ):
            log.info("history of %s not loaded: machine %s is offline or too old", sid, host)
            return False
        cmd = Command(
            id=str(uuid.uuid4()),
            type=c.LOAD_HISTORY,
            session_id=sid,
            gateway_id=self._gateway_id,
            deadline_ms=c.now_ms() + int(self._timeout_s * 1000),
        )
        reply = await self._round_trip(host, cmd)
        outcome = "timeout" if reply is None else "ok" if reply.ok else (reply.code or "error")
        self._metrics.commands.labels(c.LOAD_HISTORY, outcome).inc()
        log.info("command %s load_history session=%s: %s", cmd.id, sid, outcome)
        return reply is not None and reply.ok

    async def _round_trip(self, host: str, cmd: Command) -> Reply | None:
        stream = self._keys.cmd(host)
        fut = self.replies.expect(cmd.id)
        started = time.monotonic()
        try:
            await asyncio.wait_for(self.replies.ready.wait(), self._timeout_s)
            await c.ensure_group(self._client, stream)
            fields = cmd.fields()
            await self._client.xadd(stream, fields, maxlen=c.CMD_MAXLEN, approximate=True)  # type: ignore[arg-type]
            reply = await asyncio.wait_for(fut, self._timeout_s)
        except TimeoutError:
            return None
        finally:
            self.replies.forget(cmd.id)
        self._metrics.command_round_trip.observe(time.monotonic() - started)
        return reply

    async def _only_live_host(self) -> str | None:
        """The one machine whose heartbeat is current, from the ``hosts`` index (never a
        SCAN of the keyspace: a client could make every gateway walk it per request)."""
        live = await self._client.zrangebyscore(
            self._keys.hosts, c.now_ms(), "+inf", start=0, num=2
        )
        hosts = [h.decode() if isinstance(h, bytes) else str(h) for h in live]
        return hosts[0] if len(hosts) == 1 else None
