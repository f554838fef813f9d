"""The ``/ws`` endpoint: authenticate, receive, rate-limit, parse, dispatch, clean up.

Each connection runs one task: this receive loop, on :mod:`relaybus.gateway.web.wsserver`'s
protocol; its sender task exists only while frames are queued (:class:`Connection`). Bad input gets an ``error`` frame and the connection
stays open; only auth failure (4401), flooding (4029), a slow consumer (4008) and frames
above the hard cap (1009, enforced by the WebSocket layer) close it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from relaybus.gateway import frames, protocol
from relaybus.gateway.auth import TokenTable, token_from_request
from relaybus.gateway.context import GatewayContext
from relaybus.gateway.delivery.connection import Connection
from relaybus.gateway.delivery.fanout import Hub
from relaybus.gateway.delivery.wsio import ClientGone
from relaybus.gateway.protocol import ProtocolError
from relaybus.gateway.requests.router import Router
from relaybus.gateway.scope import Members
from relaybus.gateway.web.security import OriginPolicy
from relaybus.gateway.web.wsserver import WsServer
from relaybus.shared.wire.device import device_label
from relaybus.shared.wire.errors import CloseCode, ErrorCode

log = logging.getLogger(__name__)

#: ``?epoch=`` longer than this is refused (``hello.epoch`` has the same cap).
MAX_URL_EPOCH_CHARS = 128


@dataclass(frozen=True, slots=True)
class EndpointConfig:
    max_frame_bytes: int
    send_queue_max: int
    rate_limit_per_s: float
    #: How long a connection without hello waits before it is treated as a v1 client.
    hello_grace_s: float = 1.0
    #: How long an unauthenticated connection may take to send ``hello.token``.
    auth_timeout_s: float = 10.0
    close_timeout_s: float = 10.0
    #: Bytes queued per connection before it is a slow consumer (live and replays).
    send_buffer_bytes: int = 4 * 1024 * 1024
    #: A socket that takes no data for this long is dropped (4008).
    write_timeout_s: float = 30.0
    #: Which browser pages may open /ws (their ``Origin``).
    origins: OriginPolicy = field(default_factory=lambda: OriginPolicy(frozenset()))

    @property
    def buffer_max(self) -> int:
        return max(self.send_queue_max * 16, 10_000)


class RateLimiter:
    """Token bucket: ``rate`` frames per second, bursts up to twice that."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.capacity = max(2.0 * rate, 1.0)
        self.tokens = self.capacity
        self.stamp = time.monotonic()

    def allow(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


class Endpoint:
    def __init__(
        self,
        ctx: GatewayContext,
        *,
        hub: Hub,
        router: Router,
        tokens: TokenTable,
        config: EndpointConfig,
        members: Members | None = None,
    ) -> None:
        self.ctx = ctx
        #: Members' tokens in Redis (``None``: ``RELAYBUS_TOKENS`` only).
        self.members = members
        self.hub = hub
        self.router = router
        self.tokens = tokens
        self.config = config

    async def __call__(self, ws: WsServer) -> None:
        cfg = self.config
        if not cfg.origins.allows(ws.headers):
            # A page on another site: refused before the upgrade (HTTP 403).
            self.ctx.metrics.auth_failures.inc()
            log.info(
                "connection from %s refused: Origin %r not allowed",
                ws.client,
                ws.headers.get("origin"),
            )
            await ws.close(CloseCode.UNAUTHORIZED)
            return
        # What the request says is read now: accept() releases the headers and the query.
        offered = token_from_request(ws.headers, ws.query_params)
        params = ws.query_params
        device = device_label(ws.headers.get("user-agent"))
        try:
            ws.accept()
        except ClientGone:
            return
        conn = Connection(
            ws,
            cid=uuid.uuid4().hex[:12],
            metrics=self.ctx.metrics,
            queue_max=cfg.send_queue_max,
            buffer_max=cfg.buffer_max,
            position=self.hub.position,
            budget_bytes=cfg.send_buffer_bytes,
        )
        conn.device = device
        # The receive loop runs in this task; the connection closing (auth, a slow
        # consumer, the write deadline, shutdown) ends it.
        conn.on_close = ws.stop
        self.hub.add(conn)
        log.info("connection %s open from %s", conn.cid, ws.client)
        try:
            await self._receive(ws, conn, offered, params)
        except Exception:
            log.exception("connection %s: receive failed", conn.cid)
            conn.abort(CloseCode.INTERNAL_ERROR, "internal error")
        finally:
            self.hub.remove(conn)
            await conn.finish()  # a final frame (an error before the close) goes first
            if conn.close_code is not None:
                try:
                    await asyncio.wait_for(
                        ws.close(conn.close_code, conn.close_reason), cfg.close_timeout_s
                    )
                except TimeoutError:
                    ws.abort()  # the close frame could not even be written: not reading
            # Whatever the client does (pings, nothing, no close reply), the socket is gone
            # within close_timeout_s: a transport that is still flushing is dropped then.
            asyncio.get_running_loop().call_later(cfg.close_timeout_s, ws.abort)
            log.info("connection %s closed (%s)", conn.cid, conn.close_code or "by client")

    async def _receive(
        self, ws: WsServer, conn: Connection, offered: str | None, params: Mapping[str, str]
    ) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        auth_timer: asyncio.TimerHandle | None = None
        #: When a connection that sent no hello becomes a v1 client (None: not pending).
        v1_at: float | None = None
        if offered is not None or self.tokens.allow_anonymous:
            if not await self._admit(conn, offered):
                self._refuse(conn, "invalid token")
                return
            v1_at = loop.time() + cfg.hello_grace_s
        else:
            auth_timer = loop.call_later(cfg.auth_timeout_s, self._auth_expired, conn)
        url_error = self._url_resume(params, conn)
        limiter = RateLimiter(cfg.rate_limit_per_s)
        try:
            while conn.close_code is None:
                if v1_at is not None and (conn.state.hello_done or conn.state.welcomed):
                    v1_at = None
                if v1_at is None:
                    message = await ws.receive()
                else:
                    try:
                        async with asyncio.timeout_at(v1_at):
                            message = await ws.receive()
                    except TimeoutError:
                        v1_at = None
                        await self._resolve_v1(conn, url_error)
                        url_error = None
                        continue
                if message is None:
                    return
                if not limiter.allow():
                    self.ctx.metrics.bad_frames.labels("rate_limited").inc()
                    conn.abort(CloseCode.RATE_LIMITED, "rate limit exceeded")
                    return
                if not await self._one(conn, message):
                    continue
                if url_error is not None and conn.state.welcomed and not conn.state.hello_done:
                    self._url_error(conn, url_error)  # a v1 client resolved by its first frame
                url_error = None
        finally:
            if auth_timer is not None:
                auth_timer.cancel()

    def _url_resume(self, params: Mapping[str, str], conn: Connection) -> str | None:
        """Read ``?lastSeqId=`` and ``?epoch=`` (the resume point of a client that sends no
        hello); an unusable value is ignored: the message of the ``error{invalid_field}``
        it gets once it is resolved as v1."""
        epoch = params.get("epoch") or None
        raw = params.get("lastSeqId")
        if epoch is not None and len(epoch) > MAX_URL_EPOCH_CHARS:
            return f"query parameter 'epoch' exceeds {MAX_URL_EPOCH_CHARS} characters; not resuming"
        usable = raw is not None and raw.isascii() and raw.isdigit() and len(raw) <= 18
        conn.state.set_url_resume(int(raw) if raw is not None and usable else None, epoch)
        if raw is None or usable:
            return None
        return "query parameter 'lastSeqId' must be an integer >= 0; not resuming"

    def _url_error(self, conn: Connection, message: str) -> None:
        self.ctx.metrics.bad_frames.labels(ErrorCode.INVALID_FIELD.value).inc()
        conn.send(frames.error_frame(ErrorCode.INVALID_FIELD, message, None, self.hub.position))

    async def _resolve_v1(self, conn: Connection, url_error: str | None) -> None:
        try:
            await self.router.resume.resolve_v1(conn)
        except RedisError as exc:  # the resume closes the connection itself; belt and braces
            log.warning("connection %s: v1 resume failed: %s", conn.cid, exc)
        if url_error is not None:
            self._url_error(conn, url_error)

    async def _one(self, conn: Connection, raw: str | bytes) -> bool:
        """Handle one client frame; ``False`` when it was refused before being handled."""
        request_id: str | None = None
        try:
            msg = protocol.parse_client_frame(raw, self.config.max_frame_bytes)
            request_id = msg.requestId
            if conn.access is None and (not isinstance(msg, protocol.Hello) or msg.token is None):
                self._refuse(conn, "the first frame must be hello with a token")
                return False
            # A second hello is refused (bad_state) by the handler: its token changes
            # nothing, so a read-only connection cannot upgrade itself that way.
            if (
                isinstance(msg, protocol.Hello)
                and msg.token is not None
                and not conn.state.hello_done
                and not await self._admit(conn, msg.token)
            ):
                self._refuse(conn, "invalid token")
                return False
            await self.router.handle(conn, msg)
        except ProtocolError as exc:
            self.ctx.metrics.bad_frames.labels(exc.code.value).inc()
            log.debug("connection %s: %s %s", conn.cid, exc.code, exc.message)
            if conn.access is None:
                self._refuse(conn, "the first frame must be hello with a token")
                return False
            frame = frames.error_frame(
                exc.code, exc.message, exc.request_id or request_id, self.hub.position
            )
            conn.send(frame)
        except RedisError as exc:
            log.warning("connection %s: Redis error: %s", conn.cid, exc)
            frame = frames.error_frame(
                ErrorCode.UNAVAILABLE, "storage unavailable, retry", request_id, self.hub.position
            )
            conn.send(frame)
        return True

    async def _admit(self, conn: Connection, token: str | None) -> bool:
        """Authenticate ``conn`` (a member's scope too); ``False``: refuse it."""
        if self.members is not None:
            return await self.members.admit(conn, token)
        conn.access = self.tokens.check(token)
        return conn.access is not None

    def _auth_expired(self, conn: Connection) -> None:
        if conn.access is None:
            self._refuse(conn, "no token")

    def _refuse(self, conn: Connection, why: str) -> None:
        if conn.close_code is not None:
            return
        self.ctx.metrics.auth_failures.inc()
        log.info("connection %s refused: %s", conn.cid, why)
        frame = frames.error_frame(ErrorCode.UNAUTHORIZED, why, None, self.hub.position)
        conn.abort(CloseCode.UNAUTHORIZED, "unauthorized", final=frame)
        # Refused means gone: if the client does not take the error and close frames in
        # close_timeout_s (it floods pings and reads nothing), drop the socket.
        asyncio.get_running_loop().call_later(self.config.close_timeout_s, conn.sink.abort)
