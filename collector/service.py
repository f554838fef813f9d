"""The collector process: engine, watcher, rescan and heartbeat as supervised tasks.

``serve(settings, stop)`` runs until ``stop`` is set, then stops reading, lets the batch
in flight finish (every batch commits its own offset atomically) and returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from relaybus.collector.approvals.holds import Approvals
from relaybus.collector.commands import CollectorCommands
from relaybus.collector.engine import Engine
from relaybus.collector.heartbeat import beat
from relaybus.collector.history import HistoryRequests
from relaybus.collector.inbox import Inbox
from relaybus.collector.metrics import CollectorMetrics, metrics_server
from relaybus.collector.publisher import Publisher
from relaybus.collector.traces import TraceMap
from relaybus.collector.wake import Rescan, Wake
from relaybus.collector.watcher import rescan, watch
from relaybus.shared.aio import Backoff, Outage, sleep_unless, supervise
from relaybus.shared.preflight import StartupError, collector_dirs
from relaybus.shared.settings import Settings
from relaybus.shared.store.appendlog import EpochChanged
from relaybus.shared.store.connection import REDIS_UNAVAILABLE, Connects, connect
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire.approvals import PERMISSION_DECISION
from relaybus.shared.wire.commands import LOAD_HISTORY

log = logging.getLogger(__name__)

TICK_S = 1.0
#: How often a session whose live-process file is gone looks for its process's exit.
CLOSING_POLL_S = 0.1
#: Batches read from one file before the other changed files get their turn.
ROUND_BATCHES = 4
RESCAN_S = 2.0
#: How often the committed offsets are compared with Redis's even without a reconnect seen
#: (a cluster client's reconnects are not counted).
VERIFY_S = 30.0
SHUTDOWN_S = 5.0


async def drive(
    engine: Engine,
    wake: Wake,
    stop: asyncio.Event,
    metrics: CollectorMetrics,
    connects: Connects,
) -> None:
    """The engine loop: sync what changed, apply its inbox, run timers, survive Redis
    outages and data loss."""
    loop = asyncio.get_running_loop()
    need_start, next_tick = True, 0.0
    outage = Outage(log, "redis", Backoff())
    verify, opened, next_verify = False, 0, 0.0
    while not stop.is_set():
        try:
            if need_start:
                wake.take()
                opened = connects.opened
                await engine.start()
                need_start = False
            else:
                # A new connection may be to a promoted replica that lost acknowledged
                # appends, even when no command failed (redis-py reconnects silently).
                if verify or connects.opened != opened or loop.time() >= next_verify:
                    opened = connects.opened
                    await engine.filesync.verify()
                    verify, next_verify = False, loop.time() + VERIFY_S
                paths, processes, rescan = wake.take()
                more: set[Path] = set()
                if rescan:
                    more |= await engine.sync_all(
                        max_batches=ROUND_BATCHES, every_file=rescan is Rescan.FULL
                    )
                for path in sorted(paths):
                    if stop.is_set():
                        break
                    if await engine.sync_path(path, max_batches=ROUND_BATCHES):
                        more.add(path)
                if more:  # round robin: a huge file gets its next turn after the others
                    wake.add(more)
                if processes or engine.closing:
                    await engine.sync_processes()
            reread = engine.filesync.take_reread()
            if reread:  # rewound by a failover: read again from Redis's offset
                wake.add(reread)
            await engine.apply_inbox()
            if loop.time() >= next_tick:
                if await engine.pub.epoch_changed():
                    raise EpochChanged("")
                await engine.sync_processes()
                await engine.tick()
                next_tick = loop.time() + TICK_S
            outage.ok()
        except EpochChanged:
            log.warning(
                "redis lost its data (epoch changed): new epoch, backfilling recent history"
            )
            engine.reset()
            need_start = True
            continue
        except REDIS_UNAVAILABLE as exc:
            metrics.redis_errors.inc()
            delay = outage.failed(exc)
            engine.forget()
            verify = True
            wake.request_rescan()
            await sleep_unless(stop, delay)
            continue
        deadline = next_tick
        if engine.closing:  # a process whose live file is gone: notice its exit promptly
            deadline = min(deadline, loop.time() + CLOSING_POLL_S)
        await wake.wait_until(deadline)


async def heartbeat(client: aioredis.Redis, settings: Settings, stop: asyncio.Event) -> None:
    keys = Keys(settings.namespace)
    while not stop.is_set():
        try:
            await beat(client, settings, stop)
        except REDIS_UNAVAILABLE:
            await sleep_unless(stop, 1.0)
    with contextlib.suppress(*REDIS_UNAVAILABLE):
        await asyncio.wait_for(client.delete(keys.host(settings.host_id)), 1.0)
        await asyncio.wait_for(client.zrem(keys.hosts, settings.host_id), 1.0)


@contextlib.contextmanager
def _metrics_or_startup_error(registry: CollectorRegistry, port: int, host: str) -> Iterator[int]:
    """:func:`metrics_server`, a port it cannot bind being a one-line :class:`StartupError`."""
    with contextlib.ExitStack() as stack:
        try:
            bound = stack.enter_context(metrics_server(registry, port, host))
        except OSError as exc:
            raise StartupError(
                f"collector metrics port {port} on {host} cannot be bound ({exc.strerror or exc}): "
                "free it, or set RELAYBUS_COLLECTOR_METRICS_PORT to another port (0 = off)"
            ) from None
        yield bound


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    """Run one collector until ``stop`` is set. An unusable Claude directory or metrics
    port raises :class:`StartupError` before anything runs."""
    dirs = collector_dirs(settings)
    registry = CollectorRegistry()
    metrics = CollectorMetrics(registry)
    connects = Connects()
    client = connect(settings, connects=connects)
    wake = Wake(settings.claude_dir)
    inbox = Inbox(wake.event.set)
    traces = TraceMap()
    approvals = Approvals(settings, inbox, metrics.approvals)
    engine = Engine(
        settings,
        Publisher(client, settings, metrics, traces=traces),
        metrics,
        inbox=inbox,
        observers=[approvals],  # the terminal answering first resolves held requests
    )
    history = HistoryRequests(inbox)
    commands = CollectorCommands(
        settings,
        metrics.commands,
        inbox,
        traces,
        extra_handlers={PERMISSION_DECISION: approvals.decide, LOAD_HISTORY: history.handle},
    )
    jobs: dict[str, Callable[[], Awaitable[None]]] = {
        "engine": lambda: drive(engine, wake, stop, metrics, connects),
        "commands": lambda: commands.run(stop),
        "approvals": lambda: approvals.serve(stop),
        "watcher": lambda: watch(
            wake, dirs, stop, step_ms=settings.watch_step_ms, backend=settings.watch_backend
        ),
        "rescan": lambda: rescan(wake, stop, interval_s=RESCAN_S),
        "heartbeat": lambda: heartbeat(client, settings, stop),
    }
    started = False
    try:
        with _metrics_or_startup_error(
            registry, settings.collector_metrics_port, settings.collector_metrics_host
        ):
            started = True
            log.info("collector %s starting on %s", settings.host_id, settings.claude_dir)
            crashes = metrics.task_crashes
            tasks = {
                asyncio.create_task(
                    supervise(n, f, stop, lambda task: crashes.labels(task).inc()),
                    name=f"collector-{n}",
                )
                for n, f in jobs.items()
            }
            try:
                await stop.wait()
                _done, pending = await asyncio.wait(tasks, timeout=SHUTDOWN_S)
                for t in pending:
                    t.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await client.aclose()
        if started:
            log.info("collector %s stopped", settings.host_id)
