"""Consume this host's command stream ``{ns}:cmd:<host>`` and answer each command once.

Read with the consumer group ``collectors`` (consumer name = host id, so a restarted
collector gets its own pending entries back first). Each command is executed at most
once: ``SET {ns}:cmddone:<id> running NX`` precedes execution and the record then holds
the reply, so a redelivered command is answered again, never run again. A command past
its deadline is answered ``timeout`` without running. The reply (XADD to the gateway's
reply stream, with a cap and an expiry) and the XACK are one transaction.

Each command runs in a task of its own (up to :data:`MAX_IN_FLIGHT`), so a prompt waiting
for its run to take it never holds up another session's commands. Commands of one session
start in stream order: each waits until the previous one finished or released the order
(the handler's :data:`~relaybus.collector.drivers.Release`: a prompt calls it once its run
exists).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import redis.asyncio as aioredis
from prometheus_client import Counter
from redis.exceptions import RedisError, ResponseError

from relaybus.collector.drivers import Release
from relaybus.collector.drivers.control import Controller
from relaybus.collector.drivers.notices import TurnNotices
from relaybus.collector.drivers.permission_mode import ModeSwitcher
from relaybus.collector.inbox import Inbox
from relaybus.collector.traces import TraceMap
from relaybus.shared.aio import Backoff, Outage, now_ms, reraise_if_cancelling, sleep_unless
from relaybus.shared.settings import Settings
from relaybus.shared.store.audit import Trail
from relaybus.shared.store.command_streams import ensure_group, queue_reply
from relaybus.shared.store.connection import REDIS_UNAVAILABLE, connect
from relaybus.shared.store.keys import DONE_TTL_S, GROUP, Keys
from relaybus.shared.wire import commands as wire
from relaybus.shared.wire.commands import Command, EnvelopeError, Reply
from relaybus.shared.wire.errors import ErrorCode
from relaybus.shared.wire.ids import valid_session_id

log = logging.getLogger(__name__)

#: Executes a command; its :data:`Release` lets the session's next command start early.
Handler = Callable[[Command, Release], Awaitable[Reply]]
#: Executes a command that holds its session's order until it answered.
Executor = Callable[[Command], Awaitable[Reply]]

RUNNING = b"running"
CLAIM_IDLE_MS = 30_000
READ_COUNT = 16
MAX_BACKOFF_S = 5.0
MAX_IN_FLIGHT = 64
#: On stop, commands still running get this long to answer.
DRAIN_S = 5.0
#: Outcomes the audit trail calls ``failed`` (the command was allowed and did not work);
#: every other non-``ok`` outcome is ``refused``.
FAILED = frozenset(
    {
        "expired",
        ErrorCode.TIMEOUT,
        ErrorCode.BRIDGE_ERROR,
        ErrorCode.PROMPT_FAILED,
        ErrorCode.UNKNOWN_OUTCOME,
        ErrorCode.CWD_NOT_FOUND,
        ErrorCode.TRANSCRIPT_MISSING,
    }
)


def in_order(execute: Executor) -> Handler:
    """``execute`` as a :data:`Handler` that never releases the order early."""

    async def handler(cmd: Command, _release: Release) -> Reply:
        return await execute(cmd)

    return handler


def count(counter: Counter, known: Mapping[str, object], cmd_type: str, outcome: str) -> None:
    """``relaybus_collector_commands_total{type,outcome}``; ``type`` is bounded to ``known``."""
    counter.labels(cmd_type if cmd_type in known else "other", outcome).inc()


class CommandConsumer:
    """The collector's command loop. ``handlers`` maps a command type to its executor."""

    def __init__(
        self,
        client: aioredis.Redis,
        settings: Settings,
        handlers: Mapping[str, Handler],
        commands_total: Counter,
        *,
        block_ms: int = 1000,
    ) -> None:
        """``client`` must allow reads of ``block_ms`` (``relaybus.shared.store.connection.connect(block_ms=…)``)."""
        self._client = client
        self._keys = Keys(settings.namespace)
        self._host = settings.host_id
        self._stream = self._keys.cmd(settings.host_id)
        self._trail = Trail(client, self._keys, settings.audit_retention_days)
        self._handlers = handlers
        self._counter = commands_total
        self._block_ms = block_ms
        self._in_flight: dict[bytes, asyncio.Task[None]] = {}
        #: A command could not be answered: take back the pending entries again.
        self._lost = False
        #: Per session: released when its latest command may be followed by the next.
        self._order: dict[str, asyncio.Future[None]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set; Redis outages are waited out with backoff."""
        outage = Outage(log, "command stream", Backoff(0.1, MAX_BACKOFF_S))
        recovered = False
        log.info("command consumer started on %s", self._stream)
        while not stop.is_set():
            try:
                if self._lost:
                    recovered, self._lost = False, False
                if not recovered:
                    await ensure_group(self._client, self._stream)
                    await self._recover()
                    recovered = True
                await self._room()
                await self._read_once(">")
                outage.ok()
            except REDIS_UNAVAILABLE as exc:  # also READONLY (a failover) and OOM replies
                reraise_if_cancelling(exc)
                recovered = False
                await sleep_unless(stop, outage.failed(exc))
            except ResponseError as exc:
                if not str(exc).startswith("NOGROUP"):
                    raise
                log.warning("command group vanished (Redis lost data?): recreating")
                recovered = False
        await self._drain()
        log.info("command consumer stopped")

    async def _room(self) -> None:
        """Wait until fewer than :data:`MAX_IN_FLIGHT` commands run."""
        while len(self._in_flight) >= MAX_IN_FLIGHT:
            await asyncio.wait(set(self._in_flight.values()), return_when=asyncio.FIRST_COMPLETED)

    async def _drain(self) -> None:
        tasks = set(self._in_flight.values())
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=DRAIN_S)
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    def _start(self, entry_id: bytes, fields: Mapping[bytes, bytes]) -> bool:
        """Run one entry in its own task (False: it runs already)."""
        if entry_id in self._in_flight:
            return False
        sid = fields.get(b"sid", b"").decode("utf-8", "replace")
        ordered = (
            bool(sid)
            and fields.get(b"type", b"").decode("utf-8", "replace") in wire.SESSION_COMMAND_TYPES
        )
        after = self._order.get(sid) if ordered else None
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if ordered:
            self._order[sid] = gate
        task = asyncio.create_task(self._run_one(entry_id, fields, sid, after, gate))
        self._in_flight[entry_id] = task
        return True

    async def _run_one(
        self,
        entry_id: bytes,
        fields: Mapping[bytes, bytes],
        sid: str,
        after: asyncio.Future[None] | None,
        gate: asyncio.Future[None],
    ) -> None:
        def release() -> None:
            if not gate.done():
                gate.set_result(None)

        try:
            if after is not None:
                await asyncio.shield(after)
            await self._handle(entry_id, fields, release)
        except REDIS_UNAVAILABLE as exc:
            log.warning("command %s not answered (%s); it stays pending", entry_id, exc)
            self._lost = True
        except Exception:
            log.exception("command %s failed", entry_id)
        finally:
            release()
            if self._order.get(sid) is gate:
                del self._order[sid]
            self._in_flight.pop(entry_id, None)

    async def _recover(self) -> None:
        """Take back what a previous run of this collector read but never acknowledged."""
        while await self._read_once("0", block=False):
            pass
        claimed: Any = await self._client.xautoclaim(
            self._stream, GROUP, self._host, CLAIM_IDLE_MS, "0-0", count=100
        )
        for entry_id, fields in claimed[1]:
            if fields is not None:
                self._start(entry_id, fields)

    async def _read_once(self, start: str, *, block: bool = True) -> int:
        response: Any = await self._client.xreadgroup(
            GROUP,
            self._host,
            {self._stream: start},
            count=READ_COUNT,
            block=self._block_ms if block else None,
        )
        handled = 0
        for _stream, entries in response or []:
            for entry_id, fields in entries:
                if fields:
                    handled += self._start(entry_id, fields)
                else:  # pending entry trimmed from the stream: nothing left to run
                    await self._client.xack(self._stream, GROUP, entry_id)
                    handled += 1
        return handled

    async def _handle(
        self, entry_id: bytes, fields: Mapping[bytes, bytes], release: Release
    ) -> None:
        try:
            cmd = Command.from_fields(fields)
        except EnvelopeError as exc:
            log.warning("dropping malformed command %s: %s", entry_id, exc)
            count(self._counter, self._handlers, "other", "malformed")
            await self._client.xack(self._stream, GROUP, entry_id)
            return
        if cmd.session_id and not valid_session_id(cmd.session_id):
            # never a key, a glob or an argv word: refused before anything runs
            outcome, reply = (
                "invalid",
                Reply.failure(cmd.id, ErrorCode.INVALID_MESSAGE, "invalid session id"),
            )
        else:
            outcome, reply = await self._execute_once(cmd, release)
        async with self._client.pipeline(transaction=True) as pipe:
            queue_reply(pipe, self._keys, cmd.gateway_id, reply)
            pipe.xack(self._stream, GROUP, entry_id)
            await pipe.execute()
        count(self._counter, self._handlers, cmd.type, outcome)
        await self._audit(cmd, outcome)
        log.info(
            "command %s %s session=%s trace=%s: %s",
            cmd.id,
            cmd.type,
            cmd.session_id or "-",
            cmd.trace_id or "-",
            outcome,
        )

    async def _audit(self, cmd: Command, outcome: str) -> None:
        """Record what this machine did with a client's command (``ran``, ``refused`` or
        ``failed``); a redelivered one was recorded the first time. Best effort: the
        command's reply is already on its way."""
        if cmd.by is None or outcome == "duplicate":
            return
        action = "ran" if outcome == "ok" else "failed" if outcome in FAILED else "refused"
        try:
            await self._trail.append(
                action,
                member=cmd.by.get("member"),
                tokenId=cmd.by.get("tokenId"),
                device=cmd.by.get("device"),
                sessionId=cmd.session_id,
                host=self._host,
                commandId=cmd.id,
                detail=f"{cmd.type}: {outcome}",
            )
        except (RedisError, OSError) as exc:
            log.warning("command %s: audit entry not written: %s", cmd.id, exc)

    async def _execute_once(self, cmd: Command, release: Release) -> tuple[str, Reply]:
        if now_ms() > cmd.deadline_ms:
            return "expired", Reply.failure(
                cmd.id, ErrorCode.TIMEOUT, "the command expired before it ran"
            )
        done = self._keys.command_done(cmd.id)
        if not await self._client.set(done, RUNNING, nx=True, ex=DONE_TTL_S):
            prior = await self._client.get(done)
            if isinstance(prior, bytes) and prior != RUNNING:
                return "duplicate", Reply.from_fields({b"id": cmd.id.encode(), b"r": prior})
            return "duplicate", Reply.failure(
                cmd.id,
                ErrorCode.UNKNOWN_OUTCOME,
                "the collector restarted while running this command",
            )
        handler = self._handlers.get(cmd.type)
        if handler is None:
            reply = Reply.failure(
                cmd.id, ErrorCode.INVALID_MESSAGE, f"unsupported command {cmd.type!r}"
            )
        else:
            try:
                reply = await handler(cmd, release)
            except Exception:
                log.exception("command %s (%s) failed", cmd.id, cmd.type)
                reply = Reply.failure(
                    cmd.id, ErrorCode.BRIDGE_ERROR, "the command failed on the host"
                )
        await self._client.set(done, reply.fields()["r"], xx=True, keepttl=True)
        return ("ok" if reply.ok else reply.code or "error"), reply


class CollectorCommands:
    """The collector's command side: consumer, drivers, turn notices and the traceId window.

    ``run`` is the command task; turn notices go into the engine's ``inbox`` and remember
    prompts' traceIds in ``traces`` (the publisher's, which labels events with them).
    """

    def __init__(
        self,
        settings: Settings,
        commands_total: Counter,
        inbox: Inbox,
        traces: TraceMap,
        *,
        extra_handlers: Mapping[str, Executor] | None = None,
    ) -> None:
        self._settings = settings
        self._counter = commands_total
        #: Command types served outside the drivers (``permission_decision``: approvals).
        self._extra = dict(extra_handlers or {})
        self.notices = TurnNotices(traces, inbox)
        self._inbox = inbox

    async def run(self, stop: asyncio.Event) -> None:
        block_ms = 1000
        client = connect(self._settings, block_ms=block_ms)
        controller = Controller(self._settings, client, self.notices)
        handlers: dict[str, Handler] = dict.fromkeys(wire.COMMAND_TYPES, controller.execute)
        handlers[wire.SET_PERMISSION_MODE] = in_order(
            ModeSwitcher(self._settings, client, controller, self._inbox).execute
        )
        handlers.update((t, in_order(execute)) for t, execute in self._extra.items())
        consumer = CommandConsumer(
            client, self._settings, handlers, self._counter, block_ms=block_ms
        )
        try:
            await consumer.run(stop)
        finally:
            await controller.aclose()
            await client.aclose()
