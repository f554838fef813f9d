"""Fan-out: ONE log reader per gateway process and the index of who receives what.

The reader ``XREAD BLOCK``s on ``{ns}:log`` from the last id it dispatched and hands each
batch to the :class:`Hub`, which offers every event to the entitled connections
synchronously: the frame was serialised once by the collector and the same ``str`` goes
to every subscriber. The reader also guards the traps of DESIGN §8: it checks the epoch
on every block timeout and reconnect (Redis lost its data: reset to 0 and tell clients),
reports its own gap when the log was trimmed past its position, and after a reconnect
checks that the entries it dispatched last are still the log's (a Sentinel failover to a
replica that missed them takes them back; the collectors re-publish their lines from their
file offsets under those seqs, maybe in another order): if not, it rewinds to the first
changed seq and tells clients (``gap_detected{rewound}``). It records each rewind in Redis
(:mod:`relaybus.shared.store.rewinds`) so that a client resuming anywhere later is told too, and
it applies the rewinds other gateways recorded that its own check could not see.

(Over 300 lines: the reader's traps — epoch, trim gap, rewind — share its position and only make sense together.)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Iterable, Sequence
from itertools import chain
from typing import Any, cast

from redis.asyncio.cluster import RedisCluster

from relaybus.gateway import frames
from relaybus.gateway.context import GatewayContext
from relaybus.gateway.delivery.connection import Connection
from relaybus.gateway.delivery.events import Event, from_entry, seq_of
from relaybus.gateway.delivery.replay import TRIMMED, Gap
from relaybus.gateway.delivery.rewinds import token
from relaybus.gateway.delivery.runs import Burst, Run, runs
from relaybus.gateway.delivery.steady import Steady
from relaybus.gateway.frames import Outgoing
from relaybus.gateway.metrics import GatewayMetrics
from relaybus.gateway.places import Places
from relaybus.shared.aio import Backoff, Outage, reraise_if_cancelling
from relaybus.shared.store.connection import REDIS_UNAVAILABLE, ensure_epoch
from relaybus.shared.store.held_conn import HeldConnection, entry_fields, pack
from relaybus.shared.store.rewinds import Rewinds
from relaybus.shared.wire import frames as wire_frames

log = logging.getLogger(__name__)

EPOCH = "epoch"
REWOUND = "rewound"
#: Dispatched entries whose digest the reader keeps, to notice a rewound log on reconnect.
RECENT_MAX = 2_000
#: Sessions whose steady audience the hub keeps at most (each entry lists up to every
#: connection): past it the cache starts over.
STEADY_MAX = 256


class Hub:
    """Routing index: every connection, the firehose (v1 / buffering), watchers per session."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self.metrics = metrics
        self.connections: set[Connection] = set()
        self.firehose: set[Connection] = set()
        self.watchers: dict[str, set[Connection]] = {}
        #: Last seq dispatched to connections (what direct replies carry as ``seqId``).
        self.position = 0
        self.epoch = ""
        #: Rewind generation what this hub dispatched is consistent with (in the epoch
        #: token clients echo; :mod:`relaybus.gateway.delivery.rewinds`).
        self.gen = 0
        #: Bumped when entries already read may have changed (epoch change, rewind):
        #: shared replay pages read before are void (:mod:`relaybus.gateway.delivery.shared_pages`).
        self.pages_version = 0
        #: Where each session runs, for connections with a restricted scope.
        self.places = Places()
        #: Per session, its audience split into steady writes and the rest
        #: (:mod:`relaybus.gateway.delivery.steady`); dropped by any change that may matter.
        self._steady: dict[str, Steady] = {}
        self.changed = self._steady.clear
        #: Bytes and frames per kind written synchronously in the batch being dispatched.
        self._size = 0
        self._kinds: dict[str, int] = {}

    @property
    def token(self) -> str:
        """The epoch token of this hub's view (what its rewound gaps carry)."""
        return token(self.epoch, self.gen)

    def add(self, conn: Connection) -> None:
        self.changed()
        conn.on_change(self.changed)
        self.connections.add(conn)
        self.refresh(conn)
        self.metrics.connections.set(len(self.connections))

    def remove(self, conn: Connection) -> None:
        self.changed()
        self.connections.discard(conn)
        self.firehose.discard(conn)
        for sid in conn.state.watched:
            self._unindex(conn, sid)
        self.metrics.connections.set(len(self.connections))

    def refresh(self, conn: Connection) -> None:
        """Re-index ``conn`` after its mode changed (hello, resume finished)."""
        if conn not in self.connections:
            return
        self.changed()
        if conn.state.firehose:
            self.firehose.add(conn)
            for sid in conn.state.watched:
                self._unindex(conn, sid)
        else:
            self.firehose.discard(conn)
            for sid in conn.state.watched:
                self.watchers.setdefault(sid, set()).add(conn)

    def watch(self, conn: Connection, sid: str) -> None:
        """Index ``conn`` as a watcher of ``sid`` (its state began the watch)."""
        if not conn.state.firehose and conn in self.connections:
            self.changed()
            self.watchers.setdefault(sid, set()).add(conn)

    def unwatch(self, conn: Connection, sid: str) -> None:
        self.changed()
        conn.state.unwatch(sid)
        self._unindex(conn, sid)

    def _unindex(self, conn: Connection, sid: str) -> None:
        group = self.watchers.get(sid)
        if group is not None:
            group.discard(conn)
            if not group:
                del self.watchers[sid]

    def _audience(self, sid: str) -> Iterable[Connection]:
        """Who is offered a session's events: the firehose, then the session's watchers."""
        group = self.watchers.get(sid)
        return chain(self.firehose, group) if group else self.firehose

    def dispatch(self, events: Sequence[Event]) -> None:
        """Offer each event to the connections that may receive it (no awaits), then queue
        each connection's share of the batch as one entry.

        A batch that is one run (one session's events: the reader keeping up) above the
        floor of the session's steady connections is written to their transports at once
        (:mod:`relaybus.gateway.delivery.steady`). Any other batch takes the checked path,
        which writes each connection's share of it once (a run at a time would cost a
        firehose connection a write per session in the batch)."""
        touched: list[Connection] = []
        try:
            items = list(runs(events))
            if len(items) == 1 and isinstance(run := items[0], Run):
                steady = self._steady_of(run.sid)
                if steady.groups and run.events[0].seq > steady.floor:
                    self._write_steady(run, steady)
                    touched.extend(c for c in steady.others if c.offer_run(run))
                    self.position = run.events[-1].seq
                    return
            for item in items:
                if isinstance(item, Run):
                    # One session's events back to back: each connection takes them at once.
                    touched.extend(c for c in self._audience(item.sid) if c.offer_run(item))
                    self.position = item.events[-1].seq
                    continue
                ev = item
                if ev.session_scoped:
                    touched.extend(c for c in self._audience(ev.sid) if c.offer(ev))
                elif ev.kind in wire_frames.BROADCAST_KINDS:
                    for conn in self.connections:
                        if conn.offer(ev):
                            touched.append(conn)
                self.position = ev.seq
        finally:  # even if the reader crashes here: a staged batch left unflushed would stall
            if touched:
                self._flush(touched)
            self._count(events)

    def _steady_of(self, sid: str) -> Steady:
        cache = self._steady
        steady = cache.get(sid)
        if steady is None:
            if len(cache) >= STEADY_MAX:
                cache.clear()
            steady = cache[sid] = Steady(sid, self._audience(sid), self.position)
        return steady

    def _write_steady(self, run: Run, steady: Steady) -> None:
        """Write ``run`` whole to every steady transport of its session (tallied once)."""
        for blocks_only, writes in steady.groups:
            burst = run.burst(0, blocks_only=blocks_only, raw=True)
            wire = burst.wire
            for write in writes:
                write(wire)
            self._size += _tally(burst, len(writes), self._kinds)

    def _flush(self, touched: list[Connection]) -> None:
        """Flush each touched connection; their synchronous writes are tallied for
        :meth:`_count`.

        The loop only writes: connections of one kind wrote the same shared :class:`Burst`,
        counted once with how many wrote it (not per connection between two writes)."""
        size = 0
        kinds = self._kinds
        last: Sequence[Outgoing] | None = None
        times = 0
        for conn in touched:
            written = conn.flush()
            if written is last:
                times += 1
                continue
            if last is not None:
                size += _tally(last, times, kinds)
            last, times = written, 1
        if last is not None:
            size += _tally(last, times, kinds)
        self._size += size

    def _count(self, events: Iterable[Event]) -> None:
        """Count the batch's synchronous writes once, with one latency sample per event."""
        kinds = self._kinds
        if not kinds:
            return
        m = self.metrics
        m.bytes_sent.inc(self._size)
        for kind, n in kinds.items():
            m.sent(kind).inc(n)
        self._size = 0
        self._kinds = {}
        # One latency sample per event and gateway: stamp to the end of its fan-out.
        now = time.time()
        for ev in events:
            if ev.delivered and ev.stamp_ms:
                m.e2e_latency.observe(max(0.0, now - ev.stamp_ms / 1000))

    def reader_gap(self, from_seq: int, to_seq: int) -> None:
        """The log was trimmed past the reader: tell every client what it will not get
        (above what its own replay read from the log).

        A connection still buffering (before hello, or while its resume replays the log)
        holds the gap; its merge places it after the replay (:func:`relaybus.gateway.delivery.replay.
        with_held_gaps`), so it never overtakes frames that come before it.
        """
        log.warning("log reader gap: seqs %d..%d were trimmed before dispatch", from_seq, to_seq)
        gap = Gap(from_seq, to_seq, TRIMMED)
        for conn in self.connections:
            told = conn.state.hold_gap(gap)
            if told is not None:  # not what its replay read
                self.metrics.gaps.labels(TRIMMED).inc()
                conn.send(frames.gap_frame(told.from_seq, told.to_seq, TRIMMED))

    def epoch_changed(self, new_epoch: str, old_position: int) -> None:
        """Redis lost its data: seqs restart; clients must drop what they hold."""
        log.warning("epoch changed to %s (was at seq %d): resetting", new_epoch, old_position)
        self.epoch = new_epoch
        self.gen = 0
        self.position = 0
        self.pages_version += 1
        frame = frames.gap_frame(1, old_position, EPOCH, epoch=new_epoch)
        for conn in self.connections:
            conn.state.reset_epoch()
            if conn.state.welcomed:  # the others compare epochs when their hello arrives
                self.metrics.gaps.labels(EPOCH).inc()
                conn.send(frame)

    def rewound(self, from_seq: int, old_position: int) -> None:
        """Seqs ``from_seq``..``old_position`` were dispatched but the log now holds other
        entries (or none yet) there: clients drop what they got for them and receive the
        log's entries again from ``from_seq``."""
        log.warning(
            "log rewound: seqs %d..%d changed under this gateway (failover or restore); "
            "re-reading from %d",
            from_seq,
            old_position,
            from_seq,
        )
        self.position = from_seq - 1
        self.pages_version += 1
        frame = frames.gap_frame(from_seq, old_position, REWOUND, epoch=self.token)
        for conn in self.connections:
            conn.state.rewind(from_seq - 1)
            if conn.state.welcomed:
                self.metrics.gaps.labels(REWOUND).inc()
                conn.send(frame)

    def close_all(self, code: int, reason: str) -> None:
        for conn in list(self.connections):
            conn.abort(code, reason)


class LogReader:
    """The one blocking reader of ``{ns}:log`` in this process."""

    def __init__(
        self,
        ctx: GatewayContext,
        hub: Hub,
        *,
        count: int = 1000,
        max_backoff_s: float = 2.0,
    ) -> None:
        """Reads through ``ctx.reader`` (blocking for ``ctx.block_ms``)."""
        self.ctx = ctx
        self.rewinds = Rewinds(ctx.reader, ctx.keys)
        self.hub = hub
        self.count = count
        self._outage = Outage(log, "Redis (log reader)", Backoff(first_s=0.1, max_s=max_backoff_s))
        #: monotonic time of the last completed loop (for /readyz)
        self.last_loop = 0.0
        self.synced = asyncio.Event()
        self._stopping = False
        #: (seq, digest of the frame) of the entries dispatched last
        self._recent: deque[tuple[int, int]] = deque(maxlen=RECENT_MAX)
        # A plain client's reads go through a connection of their own (``held_conn``); a
        # cluster client's through redis-py's pipeline.
        cluster = isinstance(cast(object, ctx.reader), RedisCluster)
        self._conn = None if cluster else HeldConnection(ctx.reader.connection_pool)
        keys = ctx.keys
        self._xread = (b"COUNT", b"%d" % count, b"BLOCK", b"%d" % ctx.block_ms, b"STREAMS")
        self._log = keys.log.encode()
        self._gets = pack(b"GET", keys.epoch.encode()) + pack(b"GET", keys.seq.encode())

    def healthy(self, slack_s: float) -> bool:
        return self.synced.is_set() and time.monotonic() - self.last_loop < (
            self.ctx.block_ms / 1000 + slack_s
        )

    def stop(self) -> None:
        """Make :meth:`run` return at its next loop (even if a cancellation got swallowed)."""
        self._stopping = True

    async def run(self) -> None:
        """Read until stopped, riding out Redis outages; any other error ends it (the
        runtime's supervisor logs, counts and restarts it). Not ready while not running."""
        try:
            while not self._stopping:
                try:
                    await self._sync()
                    self._outage.ok()
                    while not self._stopping:
                        await self._step()
                except REDIS_UNAVAILABLE as exc:
                    reraise_if_cancelling(exc)
                    self.synced.clear()
                    await asyncio.sleep(self._outage.failed(exc))
        finally:
            self.synced.clear()
            if self._conn is not None:  # not given back to the pool: closed here
                await self._conn.close()

    async def _sync(self) -> None:
        """On start and after every reconnect: compare the epoch, then resume from position."""
        hub = self.hub
        epoch = await ensure_epoch(self.ctx.reader, self.ctx.keys)
        if not hub.epoch:
            hub.epoch = epoch
            last: Any = await self.ctx.reader.xrevrange(self.ctx.keys.log, count=1)
            hub.position = seq_of(last[0][0]) if last else 0
            hub.gen = (await self.rewinds.since(0)).gen
            log.info("log reader starts at seq %d, epoch %s", hub.position, epoch)
        elif epoch != hub.epoch:
            hub.epoch_changed(epoch, hub.position)
            self._recent.clear()
        else:
            # A reconnect may follow a failover: replay pages read before it are void,
            # also beyond what this hub dispatched (rewinds it does not see itself).
            hub.pages_version += 1
            await self._check_recent()
        self.last_loop = time.monotonic()
        self.synced.set()

    async def _step(self) -> None:
        """One XREAD BLOCK, pipelined with GETs of the epoch and head seq (:meth:`_read`).

        Redis runs the GETs right after the XREAD returns, in the same round trip, so a
        batch is checked against the epoch before it is dispatched: if Redis lost its data
        and the new log already passed our position, XREAD hands out new-epoch entries
        that look like the next ones; they are dropped and re-read from seq 1 after the
        reset. An empty reply (block timeout) checks the epoch the same way.
        """
        hub = self.hub
        reply, raw_epoch, raw_head = await self._read(hub.position)
        self.last_loop = time.monotonic()
        epoch = (
            raw_epoch.decode() if raw_epoch else await ensure_epoch(self.ctx.reader, self.ctx.keys)
        )
        if epoch != hub.epoch:
            hub.epoch_changed(epoch, hub.position)
            self._recent.clear()
            return
        if reply:
            entries = reply[0][1]
            events = [from_entry(eid, fields) for eid, fields in entries]
            self._recent.extend((ev.seq, hash(ev.frame)) for ev in events)
            if events and events[0].seq > hub.position + 1:
                hub.reader_gap(hub.position + 1, events[0].seq - 1)
            await hub.places.ensure(
                self.ctx.reader, self.ctx.keys, ((e.sid, e.kind, e.frame) for e in events)
            )
            hub.dispatch(events)
        head = int(raw_head) if raw_head else 0
        self.ctx.metrics.reader_lag.set(max(0, head - hub.position))

    async def _read(self, position: int) -> tuple[Any, Any, Any]:
        """XREAD BLOCK from ``position``, GET epoch, GET head seq: one round trip."""
        conn = self._conn
        if conn is None:
            pipe = self.ctx.reader.pipeline(transaction=False)
            pipe.xread(
                {self.ctx.keys.log: f"{position}-0"}, count=self.count, block=self.ctx.block_ms
            )
            pipe.get(self.ctx.keys.epoch)
            pipe.get(self.ctx.keys.seq)
            reply, raw_epoch, raw_head = await pipe.execute()
            return reply, raw_epoch, raw_head
        xread = pack(b"XREAD", *self._xread, self._log, b"%d-0" % position)
        await conn.send(xread + self._gets, 3)
        try:
            reply = await conn.reply()
            raw_epoch = await conn.reply()
            raw_head = await conn.reply()
        except BaseException:
            await conn.close()  # an error reply left replies unread: never take them later
            raise
        if reply:  # raw: {stream: entries} (RESP3) or [[stream, entries]] (RESP2)
            entries = next(iter(reply.values())) if isinstance(reply, dict) else reply[0][1]
            reply = [(None, [(eid, entry_fields(flat)) for eid, flat in entries])]
        return reply, raw_epoch, raw_head

    async def _check_recent(self) -> None:
        """Compare the entries dispatched last with the log's, record what changed, and
        rewind from the first seq that changed or vanished here, or that another gateway
        recorded below what this one can compare."""
        hub = self.hub
        lo = self._recent[0][0] if self._recent else hub.position + 1
        changed = await self._first_changed()
        since = await self.rewinds.record(hub.gen, changed)
        start = changed
        if since.lowest is not None and since.lowest < lo:
            start = since.lowest if start is None else min(start, since.lowest)
        hub.gen = since.gen
        if start is not None and start <= hub.position:
            while self._recent and self._recent[-1][0] >= start:
                self._recent.pop()
            hub.rewound(start, hub.position)

    async def _first_changed(self) -> int | None:
        """The first dispatched seq whose entry changed or vanished (below the log's oldest
        entry, vanished means trimmed)."""
        if not self._recent:
            return None
        lo, hi = self._recent[0][0], self.hub.position
        first: Any = await self.ctx.reader.xrange(self.ctx.keys.log, count=1)
        oldest = seq_of(first[0][0]) if first else 0
        entries: Any = await self.ctx.reader.xrange(self.ctx.keys.log, f"{lo}-0", f"{hi}-0")
        now = {seq_of(eid): hash(fields.get(b"f", b"{}")) for eid, fields in entries}
        for seq, digest in self._recent:
            if seq >= oldest and now.get(seq) != digest:
                return seq
        return None


def _tally(written: Sequence[Outgoing], times: int, kinds: dict[str, int]) -> int:
    """Add ``times`` writes of ``written`` to ``kinds`` (frames per kind); their bytes."""
    if isinstance(written, Burst):
        for kind, n in written.kinds.items():
            kinds[kind] = kinds.get(kind, 0) + n * times
        return written.size * times
    for out in written:
        kinds[out.kind] = kinds.get(out.kind, 0) + times
    return sum(out.size for out in written) * times
