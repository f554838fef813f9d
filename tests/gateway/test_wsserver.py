"""relaybus's own WebSocket protocol (gateway/web/wsserver.py) on real sockets: the
handshake's checks, frame rules and their close codes, fragments, ping/pong, both close
handshakes, a client that never reads; raw bytes where a client library would refuse to
send them, the websockets client where it can."""

from __future__ import annotations

import asyncio
import os
import ssl
import struct
import time
from pathlib import Path

import orjson
import pytest
import redis.asyncio as aioredis
import uvicorn
from uvicorn.server import ServerState
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from relaybus import tls
from relaybus.gateway.web import wsframes
from relaybus.gateway.web.security import HostPolicy
from relaybus.gateway.web.wsserver import WsRoute, WsServer, websocket_protocol
from relaybus.shared.settings import Settings, SettingsError, load_settings
from relaybus.shared.store.keys import Keys
from tests.gateway.test_attacks import fill_session
from tests.support.gateway_client import FULL
from tests.support.gateway_server import RunningGateway, running_gateway
from tests.support.raw_ws import DeafClient, open_sockets, upgrade_request, ws_frame

HELLO = orjson.dumps({"type": "hello", "capabilities": FULL})


class Raw:
    """A client over a plain socket: exact bytes out, frames parsed back."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def upgrade(
        cls, port: int, *, token: str | None = "full-token", extra: bytes = b""
    ) -> Raw:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head = upgrade_request(port, token=token)
        writer.write(head + extra)
        status = await reader.readuntil(b"\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 101 "), status
        return cls(reader, writer)

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def frame(self, within_s: float = 10) -> tuple[int, bytes]:
        """The next server frame as (opcode, payload); server frames are never masked."""
        async with asyncio.timeout(within_s):
            b0, b1 = await self.reader.readexactly(2)
            assert b1 & 0x80 == 0 and b0 & 0x70 == 0
            n = b1 & 0x7F
            if n == 126:
                (n,) = struct.unpack("!H", await self.reader.readexactly(2))
            elif n == 127:
                (n,) = struct.unpack("!Q", await self.reader.readexactly(8))
            return b0 & 0x0F, await self.reader.readexactly(n)

    async def until(self, opcode: int) -> bytes:
        while True:
            op, payload = await self.frame()
            if op == opcode:
                return payload

    async def close_code(self) -> int:
        payload = await self.until(wsframes.CLOSE)
        return int.from_bytes(payload[:2], "big")

    async def eof(self, within_s: float = 5) -> bool:
        async with asyncio.timeout(within_s):
            while await self.reader.read(65536):
                pass
        return True

    def close(self) -> None:
        self.writer.close()


def frame(payload: bytes, opcode: int = 0x1, *, fin: bool = True, rsv: int = 0) -> bytes:
    """A masked client frame with any FIN/RSV bits (``ws_frame`` is always FIN, no RSV)."""
    raw = bytearray(ws_frame(payload, opcode))
    raw[0] = (0x80 if fin else 0) | rsv | opcode
    return bytes(raw)


KEY = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="
V13 = "Sec-WebSocket-Version: 13"
UP = ("Upgrade: websocket", "Connection: Upgrade")


@pytest.mark.parametrize(
    ("lines", "status"),
    [
        (("GET /ws HTTP/1.1", *UP, KEY), 426),
        (("GET /ws HTTP/1.1", *UP, KEY, "Sec-WebSocket-Version: 8"), 426),
        (("GET /ws HTTP/1.1", *UP, V13), 400),
        (("GET /ws HTTP/1.1", *UP, "Sec-WebSocket-Key: c2hvcnQ=", V13), 400),
        (("GET /ws HTTP/1.1", *UP, "Sec-WebSocket-Key: not base64!", V13), 400),
        (("GET /ws HTTP/1.1", *UP, KEY, KEY, V13), 400),
        (("POST /ws HTTP/1.1", *UP, KEY, V13), 405),
        (("GET /other HTTP/1.1", *UP, KEY, V13), 404),
        (("GET /ws HTTP/1.1", "Host: evil.example", *UP, KEY, V13), 403),
    ],
)
async def test_bad_handshakes_get_an_http_error(
    gw: RunningGateway, lines: tuple[str, ...], status: int
) -> None:
    """Each malformed upgrade is answered with its HTTP status and the socket is closed."""
    if not any(line.lower().startswith("host:") for line in lines):
        lines = (lines[0], f"Host: 127.0.0.1:{gw.port}", *lines[1:])
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    try:
        writer.write(upgrade_request(gw.port, token="full-token", lines=lines))
        response = await asyncio.wait_for(reader.read(), 10)  # the server closes
        assert response.startswith(f"HTTP/1.1 {status} ".encode()), response[:80]
        if status == 426:
            assert b"Sec-WebSocket-Version: 13" in response
    finally:
        writer.close()
    assert not gw.runtime.hub.connections


async def test_frame_rules_fail_with_their_close_codes(gw: RunningGateway) -> None:
    """Unmasked 1002, RSV bits 1002, unknown opcode 1002, long or fragmented control frames
    1002, a stray continuation 1002, a message above ws_max_size 1009, bad UTF-8 1007."""
    unmasked = bytes((0x81, 5)) + b"hello"
    huge = bytes((0x81, 0x80 | 127)) + struct.pack("!Q", 1 << 40) + os.urandom(4)
    cases = [
        (unmasked, 1002),
        (frame(HELLO, rsv=0x40), 1002),
        (frame(b"x", opcode=0x3), 1002),
        (frame(b"p" * 126, opcode=0x9), 1002),
        (frame(b"p", opcode=0x9, fin=False), 1002),
        (frame(b"tail", opcode=0x0), 1002),
        (frame(b"a", fin=False) + frame(b"b"), 1002),  # a new message inside a fragmented one
        (huge, 1009),
        (frame(b"\xff\xfe not utf-8"), 1007),
        (frame(b"\xc3", fin=False) + frame(b"(", opcode=0x0), 1007),
    ]
    for data, code in cases:
        client = await Raw.upgrade(gw.port)
        try:
            client.send(data)
            assert await client.close_code() == code, data[:16]
            assert await client.eof()
        finally:
            client.close()


async def test_fragments_are_reassembled_around_a_ping(gw: RunningGateway) -> None:
    """hello in three fragments with a ping between two of them: the pong comes first, then
    the welcome for the whole message."""
    client = await Raw.upgrade(gw.port)
    try:
        client.send(frame(HELLO[:5], fin=False))
        client.send(frame(b"mid", opcode=0x9))
        client.send(frame(HELLO[5:20], opcode=0x0, fin=False) + frame(HELLO[20:], opcode=0x0))
        assert await client.frame() == (wsframes.PONG, b"mid")
        op, payload = await client.frame()
        assert op == wsframes.TEXT and orjson.loads(payload)["type"] == "welcome"
    finally:
        client.close()


async def test_frames_behind_the_request_head_are_not_lost(gw: RunningGateway) -> None:
    """A hello sent in the same write as the upgrade request is answered."""
    client = await Raw.upgrade(gw.port, extra=frame(HELLO))
    try:
        op, payload = await client.frame()
        assert op == wsframes.TEXT and orjson.loads(payload)["type"] == "welcome"
    finally:
        client.close()


async def test_websockets_client_fragments_and_ping(gw: RunningGateway) -> None:
    """The websockets client: a fragmented hello is one message; ping gets its pong."""
    async with connect(
        gw.ws, additional_headers={"Authorization": "Bearer full-token"}, compression=None
    ) as ws:
        await ws.send([HELLO[:7].decode(), HELLO[7:].decode()])
        assert orjson.loads(await ws.recv())["type"] == "welcome"
        latency = await asyncio.wait_for(await ws.ping(b"abc"), 5)
        assert latency >= 0
        await ws.send(orjson.dumps({"type": "list_sessions", "requestId": "l"}).decode())
        assert orjson.loads(await ws.recv())["type"] == "sessions"
    # websockets' close() completed the handshake: the server echoed its 1000
    rcvd = ws.protocol.close_rcvd
    assert ws.close_code == 1000 and rcvd is not None and rcvd.code == 1000


async def test_client_close_is_echoed(gw: RunningGateway) -> None:
    """A client's close 1001 is echoed with 1001 and the server closes the TCP connection."""
    client = await Raw.upgrade(gw.port)
    try:
        client.send(frame(HELLO))
        await client.until(wsframes.TEXT)
        client.send(frame(struct.pack("!H", 1001) + b"bye", opcode=0x8))
        assert await client.close_code() == 1001
        assert await client.eof()
    finally:
        client.close()
    for _ in range(100):
        if not gw.runtime.hub.connections:
            break
        await asyncio.sleep(0.05)
    assert not gw.runtime.hub.connections


async def test_server_close_waits_for_the_client_then_gives_up(settings: Settings) -> None:
    """The gateway's close (4401 here) ends at once when the client answers it, and after
    close_timeout_s when it does not."""
    async with running_gateway(settings, close_timeout_s=1.0) as gw:
        polite = await Raw.upgrade(gw.port, token="wrong")
        silent = await Raw.upgrade(gw.port, token="wrong")
        try:
            started = time.monotonic()
            assert await polite.close_code() == 4401
            polite.send(frame(struct.pack("!H", 4401), opcode=0x8))
            assert await polite.eof(within_s=0.9)
            assert await silent.close_code() == 4401
            assert await silent.eof(within_s=5)
            assert time.monotonic() - started >= 0.9  # it waited for the reply first
        finally:
            polite.close()
            silent.close()


async def test_garbage_after_the_upgrade_fails_the_connection(gw: RunningGateway) -> None:
    """Random bytes fail the connection (or wait as an incomplete frame until the socket
    goes); the gateway serves the next client."""
    for seed in range(5):
        client = await Raw.upgrade(gw.port)
        try:
            client.send(bytes((seed * 37 + i * 101) % 256 for i in range(300)))
            client.writer.write_eof()
            assert await client.eof()
        finally:
            client.close()
    client = await Raw.upgrade(gw.port)
    try:
        client.send(frame(HELLO))
        _op, payload = await client.frame()
        assert orjson.loads(payload)["type"] == "welcome"
    finally:
        client.close()


async def test_a_client_that_never_reads_is_cut_off_by_the_write_deadline(
    settings: Settings, rclient: aioredis.Redis, keys: Keys
) -> None:
    """A replay to a socket that takes nothing: dropped as a slow consumer (4008, counted)
    once the write deadline passes."""
    await fill_session(rclient, keys, "big", 2000, pad=3000)
    settings = settings.model_copy(update={"write_timeout_s": 1.0})
    async with running_gateway(settings) as gw:
        deaf = await asyncio.to_thread(DeafClient, gw.port, token="ro-token", rcvbuf=4096)
        try:
            deaf.send({"type": "hello", "capabilities": FULL})
            deaf.send({"type": "watch_session", "sessionId": "big", "sinceSeqId": 0})
            started = time.monotonic()
            while open_sockets(os.getpid(), gw.port) > 0:
                assert time.monotonic() - started < 15, "deaf client still connected"
                await asyncio.sleep(0.1)
            assert gw.metric("relaybus_gateway_slow_consumer_disconnects_total") >= 1
        finally:
            deaf.close()


def test_next_frame_waits_for_every_byte() -> None:
    """Every prefix of a frame (7-bit, 16-bit and 64-bit lengths) is incomplete, the whole
    is one frame, unmasked."""
    for payload in (b"x" * 5, b"y" * 300, b"z" * 70_000):
        data = frame(payload)
        for cut in (0, 1, 2, 3, 5, 9, len(data) - 1):
            assert wsframes.next_frame(bytearray(data[:cut]), 1 << 20) is None
        got = wsframes.next_frame(bytearray(data + b"more"), 1 << 20)
        assert got is not None
        parsed, end = got
        assert (parsed.fin, parsed.opcode, parsed.payload, end) == (True, 1, payload, len(data))


def test_close_payload_rules() -> None:
    assert wsframes.parse_close(b"") is None
    assert wsframes.parse_close(struct.pack("!H", 4008) + b"slow") == 4008
    for bad, code in ((b"\x03", 1002), (struct.pack("!H", 1005), 1002), (b"\x03\xe8\xff", 1007)):
        with pytest.raises(wsframes.WsError) as err:
            wsframes.parse_close(bad)
        assert err.value.code == code


async def test_websockets_client_sees_no_extension(gw: RunningGateway) -> None:
    """permessage-deflate offered by the client is not negotiated."""
    async with connect(gw.ws, additional_headers={"Authorization": "Bearer full-token"}) as ws:
        assert ws.response is not None
        assert "Sec-WebSocket-Extensions" not in ws.response.headers
        await ws.send(HELLO.decode())
        assert orjson.loads(await ws.recv())["type"] == "welcome"
    with pytest.raises(ConnectionClosed):
        await ws.recv()


def test_compression_is_refused_at_start() -> None:
    """RELAYBUS_WS_COMPRESSION=true is a settings error naming why, not a silent no-op."""
    with pytest.raises(SettingsError, match="permessage-deflate is no longer offered"):
        load_settings(redis_url="redis://127.0.0.1:1/0", ws_compression=True)


async def test_wss_served_by_the_gateway_itself(
    settings: Settings, rclient: aioredis.Redis, keys: Keys, tmp_path: Path
) -> None:
    """RELAYBUS_TLS_CERT/KEY: the protocol runs on the TLS transport unchanged; a 2,000-event
    replay (~6 MB, past the transport's high-water mark) arrives whole and in order."""
    root = tls.make_root(tmp_path / "tls")
    server = tls.make_server(tmp_path / "tls", root, ["localhost"])
    settings = settings.model_copy(
        update={"tls_cert": str(server.cert), "tls_key": str(server.key)}
    )
    await fill_session(rclient, keys, "big", 2000, pad=3000)
    context = ssl.create_default_context(cafile=str(root.cert))
    async with (
        running_gateway(settings) as gw,
        connect(
            f"wss://127.0.0.1:{gw.port}/ws",
            ssl=context,
            server_hostname="localhost",
            additional_headers={"Authorization": "Bearer full-token"},
            max_size=None,
        ) as ws,
    ):
        await ws.send(HELLO.decode())
        assert orjson.loads(await ws.recv())["type"] == "welcome"
        watch = {"type": "watch_session", "sessionId": "big", "sinceSeqId": 0}
        await ws.send(orjson.dumps(watch).decode())
        seqs: list[int] = []
        async with asyncio.timeout(60):
            while len(seqs) < 2000:
                frame = orjson.loads(await ws.recv())
                if frame["type"] == "session_event":
                    seqs.append(frame["sessionSeq"])
        assert seqs == sorted(seqs) and len(set(seqs)) == 2000


async def test_keepalive_closes_a_peer_that_never_answers_pings() -> None:
    """The protocol alone on a real socket (no h11 in front, 0.2 s pings, 0.3 s to answer): a
    client that answers every ping stays open, one that does not gets 1011."""

    async def echo(ws: WsServer) -> None:
        ws.accept()
        while await ws.receive() is not None:
            pass

    route = WsRoute(echo, HostPolicy(frozenset()), lambda: None)
    config = uvicorn.Config(app=echo, ws_ping_interval=0.2, ws_ping_timeout=0.3)
    cls = websocket_protocol(route, config)
    state = ServerState()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: cls(config, state, {}), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    polite, silent = await Raw.upgrade(port), await Raw.upgrade(port)
    try:
        for _ in range(4):  # ~0.8 s: four pings, each answered in time
            payload = await polite.until(wsframes.PING)
            polite.send(frame(payload, opcode=0xA))
        assert await silent.until(wsframes.PING)
        assert await silent.close_code() == 1011
        assert await silent.eof()
        assert len(state.connections) == 1  # the polite one
    finally:
        polite.close()
        silent.close()
        server.close()
        await server.wait_closed()
