"""Drive pushes from the log through a consumer group: one push per event across gateways.

Every gateway reads ``{ns}:log`` in the consumer group ``push`` (consumer = its gateway id),
so each entry goes to one gateway. An entry is acknowledged once every notification it
makes was sent, given up or dropped; a gateway that dies before that leaves it pending, and
another takes it over with ``XAUTOCLAIM`` after ``RELAYBUS_PUSH_CLAIM_IDLE_S``. Before
sending to a target the gateway claims ``(seq, notice, target)`` with ``SET NX``, so the
takeover skips every target the dead gateway had started: no device is notified twice
(a send cut off by the kill itself is not repeated — at most once per target).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Mapping
from typing import Any, cast

import orjson
import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from relaybus.gateway.context import GatewayContext
from relaybus.gateway.push import policy
from relaybus.gateway.push.audience import Audience, audience
from relaybus.gateway.push.holds import PushHolds
from relaybus.gateway.push.metrics import PushMetrics
from relaybus.gateway.push.policy import Notice, Session
from relaybus.gateway.push.senders import AppriseSender, WebPushSender
from relaybus.gateway.push.store import DEFAULT_EVENTS, PushStore, Subscription
from relaybus.shared.aio import Backoff, Outage, now_ms, reraise_if_cancelling
from relaybus.shared.store.command_streams import ensure_group
from relaybus.shared.store.session_row import SessionRow
from relaybus.shared.wire import frames

log = logging.getLogger(__name__)

GROUP = "push"
BATCH = 64
#: Without subscriptions or Apprise URLs the notifier reads nothing; it looks again this often.
IDLE_CHECK_S = 1.0
LAST_TEXT_SCAN = 30


def _may_notify(raw: bytes) -> bool:
    """Whether a ``session_event`` frame can hold a notice (Claude's own, an API error)."""
    return b"PushNotification" in raw or b'"error":true' in raw


def _text(raw: Any) -> str:
    return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw or "")


class PushNotifier:
    """This gateway's consumer of the ``push`` group: log entries in, notifications out."""

    def __init__(
        self,
        ctx: GatewayContext,
        *,
        reader: aioredis.Redis,
        store: PushStore,
        holds: PushHolds,
        web: WebPushSender,
        apprise: AppriseSender,
        metrics: PushMetrics,
        tokens: Mapping[str, bool],
    ) -> None:
        """``reader`` is the notifier's own client for blocking reads of ``ctx.block_ms``."""
        self._client = ctx.client
        self._reader = reader
        self._keys = ctx.keys
        self._settings = ctx.settings
        self._store = store
        self._holds = holds
        self._web = web
        self._apprise = apprise
        self._metrics = metrics
        self._id = ctx.gateway_id
        #: token fingerprint -> full access; a subscription of a token no longer configured
        #: gets nothing.
        self._tokens = tokens
        self._block_ms = ctx.block_ms
        self._grouped = False
        self._last_takeover = 0.0
        self._wake = asyncio.Event()
        self._running = False
        self._outage = Outage(log, "Redis (push notifier)", Backoff(first_s=0.5, max_s=10.0))

    def healthy(self) -> bool:
        """:meth:`run` is running (not crashed, not waiting to be restarted)."""
        return self._running

    # --- the consumer group -------------------------------------------------------------

    async def run(self) -> None:
        """Read the group until cancelled, riding out Redis outages with backoff; any other
        error ends it (the runtime's supervisor logs, counts and restarts it)."""
        self._running = True
        try:
            while True:
                try:
                    await self._step()
                    self._outage.ok()
                except ResponseError as exc:
                    reraise_if_cancelling(exc)
                    if "NOGROUP" in str(exc):
                        self._grouped = False  # the log was deleted (data loss): make it again
                        continue
                    delay = self._outage.backoff.next()
                    log.error("push: Redis refused a command: %s; retrying in %.1fs", exc, delay)
                    await asyncio.sleep(delay)
                except (RedisError, OSError) as exc:
                    reraise_if_cancelling(exc)
                    await asyncio.sleep(self._outage.failed(exc))
        finally:
            self._running = False

    async def _step(self) -> None:
        """One read of the group (or one idle wait while nobody is to be notified)."""
        if not await self._active():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), IDLE_CHECK_S)
            self._wake.clear()
            return
        await self.ensure_group()
        if time.monotonic() - self._last_takeover >= self._settings.push_claim_idle_s / 2:
            await self.takeover()
        got = await self._reader.xreadgroup(
            GROUP, self._id, {self._keys.log: ">"}, count=BATCH, block=self._block_ms
        )
        for _stream, entries in cast(list[tuple[Any, list[tuple[Any, Any]]]], got or []):
            await self._handle_all(entries)

    async def _active(self) -> bool:
        return bool(self._apprise.targets) or bool(await self._client.hlen(self._store.subs_key))

    async def ensure_group(self) -> None:
        """Create the group at the log's end (once) and wake an idle notifier."""
        self._wake.set()
        if self._grouped:
            return
        # new events only: a fresh fleet does not push the log's history
        await ensure_group(self._client, self._keys.log, GROUP, start="$")
        self._grouped = True

    async def takeover(self) -> None:
        """Take the entries another gateway took and did not acknowledge in time (it died)."""
        self._last_takeover = time.monotonic()
        idle_ms = int(self._settings.push_claim_idle_s * 1000)
        start = "0-0"
        for _ in range(16):  # bounded per pass; the next pass goes on
            got = await self._client.xautoclaim(
                self._keys.log, GROUP, self._id, idle_ms, start_id=start, count=BATCH
            )
            start = _text(got[0])
            entries = [(eid, f) for eid, f in got[1] if f]
            if entries:
                log.info("push: took over %d entries from a gateway that stopped", len(entries))
                await self._handle_all(entries)
            if start == "0-0":
                return

    async def _handle_all(self, entries: list[tuple[Any, Any]]) -> None:
        """Sessions concurrently (a slow channel holds up no other session), each session's
        entries in log order; each entry acknowledged once handled."""
        by_session: dict[bytes, list[tuple[Any, Any]]] = {}
        for eid, fields in entries:
            by_session.setdefault(fields.get(b"s", b""), []).append((eid, fields))

        async def one_session(run: list[tuple[Any, Any]]) -> None:
            for eid, fields in run:
                try:
                    await self.handle(_text(eid), fields)
                except (RedisError, OSError):
                    raise  # left pending: retried by a takeover
                except Exception:  # a malformed entry must not stop every later push
                    log.exception("push: entry %s could not be handled; skipped", _text(eid))
                    self._metrics.dropped.labels("all", "malformed").inc()
                await self._client.xack(self._keys.log, GROUP, eid)

        await asyncio.gather(*(one_session(run) for run in by_session.values()))

    # --- one entry ----------------------------------------------------------------------

    async def handle(self, eid: str, fields: Mapping[bytes, bytes]) -> None:
        kind = _text(fields.get(b"k"))
        if kind not in policy.KINDS:
            return
        sid = _text(fields.get(b"s"))
        hold_due = self._holds.due(sid)
        raw = fields[b"f"]
        if kind == frames.SESSION_EVENT and not hold_due and not _may_notify(raw):
            return  # routine progress: the common case, decided without a round trip
        frame = orjson.loads(raw)
        raw_row = await self._client.hgetall(self._keys.session(sid))
        row = SessionRow.parse(cast(dict[bytes, bytes], raw_row))
        session = Session.from_row(sid, row)
        subs = await self._store.subscriptions()
        who = await audience(self._client, self._keys, self._tokens, subs)
        if hold_due:
            await self._holds.hold({sid: (session.host, session.cwd)}, subs, who)
        notices = await self._notices(kind, frame, session)
        if not notices:
            return
        stamp_ms = int(_text(fields.get(b"t")) or 0)
        if now_ms() - stamp_ms > self._settings.push_max_age_s * 1000:
            self._metrics.dropped.labels("all", "stale").inc(len(notices))
            return
        seq = eid.split("-", 1)[0]
        sends = []
        for n in notices:
            for sub in subs:
                if self._wants(sub, n, who, session.cwd):
                    sends.append(self._web_one(seq, n, sub, stamp_ms))
            if n.event in DEFAULT_EVENTS and n.kind != "resolved":
                sends += [self._apprise_one(seq, n, t, stamp_ms) for t in self._apprise.targets]
        await asyncio.gather(*sends)

    async def _notices(self, kind: str, frame: dict[str, Any], s: Session) -> list[Notice]:
        if kind == frames.PERMISSION_REQUEST:
            return [policy.approval(frame, s)]
        if kind == frames.PERMISSION_RESOLVED:
            return [policy.resolved(frame, s)]
        if kind == frames.SESSION_EVENT:
            event = frame.get("event")
            return policy.from_event(event, s) if isinstance(event, dict) else []
        state = frame.get("state")
        if state == "working":
            await self._client.hsetnx(self._store.turns_key, s.sid, int(frame.get("since", 0)))
        elif state == "waiting":
            n = policy.waiting(frame, s)
            return [] if n is None else [n]
        elif state == "idle":
            pipe = self._client.pipeline(transaction=True)
            pipe.hget(self._store.turns_key, s.sid)
            pipe.hdel(self._store.turns_key, s.sid)
            started, _ = await pipe.execute()
            ran_s = (int(frame.get("since", 0)) - int(started or 0)) / 1000
            if started is not None and ran_s >= self._settings.push_done_after_seconds:
                return [policy.done(s, await self._last_text(s.sid))]
        return []

    async def _last_text(self, sid: str) -> str | None:
        rows = await self._client.xrevrange(self._keys.session_events(sid), count=LAST_TEXT_SCAN)
        for _eid, f in cast(list[tuple[bytes, dict[bytes, bytes]]], rows or []):
            if f.get(b"k") == frames.SESSION_EVENT.encode():
                event = orjson.loads(f[b"f"]).get("event")
                text = policy.last_text(event) if isinstance(event, dict) else None
                if text:
                    return text
        return None

    def _wants(self, sub: Subscription, n: Notice, who: Audience, cwd: str) -> bool:
        full = who.full(sub)
        if full is None:
            self._metrics.dropped.labels("webpush", "revoked").inc()
            return False
        if not who.reaches(sub, n.host, cwd):
            return False  # outside the member's scope: not even counted (nothing to learn)
        if n.event == policy.APPROVALS and not full:
            return False
        return sub.prefs.wants(n.event, n.host, n.sid)

    async def _web_one(self, seq: str, n: Notice, sub: Subscription, stamp_ms: int) -> None:
        event = f"{seq}:{n.kind}"
        if not await self._store.claim(event, sub.id, self._id):
            self._metrics.dropped.labels("webpush", "duplicate").inc()
            return
        ttl_s = self._settings.push_ttl_s
        cap = None
        if n.kind == "approval" and n.request_key and n.expires_ms:
            ttl_s = max(1, min(ttl_s, (n.expires_ms - now_ms()) // 1000))
            if n.one_tap:  # nothing to answer with where the notification cannot show it all
                cap = await self._store.grant(n.sid, n.request_key, n.expires_ms, sub.id)
        vapid = await self._store.vapid()
        topic = hashlib.sha256(n.tag.encode()).hexdigest()[:32]
        result = await self._web.send(
            vapid, sub, orjson.dumps(n.payload(cap)), ttl_s=ttl_s, topic=topic
        )
        await self._record("webpush", event, sub.id, result.outcome, result.reason, stamp_ms)
        if result.outcome == "gone":
            await self._store.delete(sub.id)
            log.info("push: subscription %s is gone (%s): deleted", sub.id, result.reason)

    async def _apprise_one(self, seq: str, n: Notice, target: str, stamp_ms: int) -> None:
        event = f"{seq}:{n.kind}"
        if not await self._store.claim(event, target, self._id):
            self._metrics.dropped.labels("apprise", "duplicate").inc()
            return
        base = self._settings.push_public_url
        link = f"{base.rstrip('/')}/{n.path}" if base else f"session {n.sid}"
        result = await self._apprise.send(target, n.title, f"{n.body}\n{link}")
        await self._record("apprise", event, target, result.outcome, result.reason, stamp_ms)

    async def _record(
        self, channel: str, event: str, target: str, outcome: str, reason: str, stamp_ms: int
    ) -> None:
        if outcome == "sent":
            self._metrics.sent.labels(channel).inc()
            self._metrics.latency.labels(channel).observe(max(0.0, (now_ms() - stamp_ms) / 1000))
        elif outcome == "gone":
            self._metrics.dropped.labels(channel, "gone").inc()
        else:
            self._metrics.failed.labels(channel, reason or "error").inc()
            log.warning("push: %s to %s failed (%s)", channel, target, reason)
        await self._store.settle(event, target, outcome)
