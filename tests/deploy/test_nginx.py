"""deploy/nginx.conf in front of two real gateways: a client survives its gateway's death."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import httpx
import pytest
import redis

from relaybus.shared.store.keys import Keys
from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import Entries, append, transcript, user_line
from tests.support.deploy_clients import ResumingClient, stop_clients
from tests.support.deploy_procs import Nginx
from tests.support.gateway_server import GatewayProc
from tests.support.servers import RedisServer
from tests.support.wait import wait_for

TOKEN = "full-token"
PHASE_LINES = 15


@pytest.fixture
def stack(
    tmp_path: Path, server: RedisServer, namespace: str, claude_dir: Path
) -> Iterator[tuple[Nginx, dict[str, GatewayProc]]]:
    """A collector, gateways gw-a and gw-b, and nginx in front of them."""
    gateways = {
        name: GatewayProc(
            redis_url=server.url,
            namespace=namespace,
            env={"RELAYBUS_GATEWAY_ID": name},
            log_path=tmp_path / f"{name}.log",
        )
        for name in ("gw-a", "gw-b")
    }
    collector = CollectorProc(
        redis_url=server.url,
        namespace=namespace,
        claude_dir=claude_dir,
        env={"RELAYBUS_BACKFILL_EVENTS": "0"},
    )
    nginx = Nginx(tmp_path / "nginx", [g.port for g in gateways.values()])
    try:
        for g in gateways.values():
            g.start()
        collector.start()
        nginx.start()
        yield nginx, gateways
    finally:
        nginx.stop()
        collector.stop()
        for g in gateways.values():
            g.kill()


def _published(server: RedisServer, namespace: str, sid: str) -> list[tuple[int, bytes]]:
    """Ground truth: (seqId, frame) of the session's events in the Redis log."""
    client = redis.Redis(port=server.port, socket_timeout=5)
    try:
        entries = cast(Entries, client.xrange(Keys(namespace).session_events(sid)))
    finally:
        client.close()
    return [
        (int(eid.split(b"-")[0]), fields[b"f"])
        for eid, fields in entries
        if fields[b"k"] == b"session_event"
    ]


def _published_through(server: RedisServer, namespace: str, sid: str, line: int) -> list[int]:
    """The session's event seqIds once ``line {line}`` is published, else an empty list."""
    events = _published(server, namespace, sid)
    if not any(f'"line {line}"'.encode() in frame for _, frame in events):
        return []
    return [seq for seq, _ in events]


async def test_nginx_serves_the_web_client_and_hides_metrics(
    stack: tuple[Nginx, dict[str, GatewayProc]],
) -> None:
    """Through nginx: the web client and /readyz answer; /metrics is not exposed."""
    nginx, _ = stack
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{nginx.port}", timeout=10) as http:
        assert (await http.get("/")).status_code == 200
        assert (await http.get("/readyz")).status_code == 200
        assert (await http.get("/metrics")).status_code == 404


async def test_client_keeps_every_event_across_sigkill_of_its_gateway(
    stack: tuple[Nginx, dict[str, GatewayProc]],
    server: RedisServer,
    namespace: str,
    claude_dir: Path,
) -> None:
    """SIGKILL the gateway two clients are on while lines are written: both reconnect
    through nginx (hello lastSeqId / watch_session sinceSeqId) to the other gateway and
    see every event of the session exactly once, in order."""
    nginx, gateways = stack
    url = f"ws://127.0.0.1:{nginx.port}/ws"
    sid = str(uuid.uuid4())
    path = transcript(claude_dir, sid)

    resumer = ResumingClient(url, TOKEN, sid, "global")
    victim = await resumer.connect()
    append(path, b"".join(user_line(sid, f"line {i}") for i in range(PHASE_LINES)))
    await wait_for(
        lambda: _published_through(server, namespace, sid, PHASE_LINES - 1), timeout_s=60
    )
    first_phase = _published(server, namespace, sid)
    watcher = ResumingClient(url, TOKEN, sid, "watch")
    await watcher.land_on(victim)

    stop = asyncio.Event()
    clients = [resumer, watcher]
    tasks = [asyncio.create_task(c.run(stop)) for c in clients]
    try:
        await wait_for(lambda: all(len(c.seqs) >= len(first_phase) for c in clients), timeout_s=60)
        for i in range(PHASE_LINES, 3 * PHASE_LINES):
            append(path, user_line(sid, f"line {i}"))
            if i == 2 * PHASE_LINES:
                gateways[victim].kill()
            await asyncio.sleep(0.02)
        await wait_for(
            lambda: _published_through(server, namespace, sid, 3 * PHASE_LINES - 1), timeout_s=60
        )
        expected = [seq for seq, _ in _published(server, namespace, sid)]
        await wait_for(lambda: all(len(c.seqs) >= len(expected) for c in clients), timeout_s=60)
    finally:
        stop.set()
        await stop_clients(tasks, clients)

    for client in clients:
        assert client.seqs == expected, client.mode
        assert client.gaps == []
        assert client.gateways[0] == victim
        assert len(client.gateways) == 2 and client.gateways[1] != victim
    assert f"127.0.0.1:{gateways[victim].port}" in nginx.log()


NGINX_CONF = Path(__file__).resolve().parents[2] / "deploy" / "nginx.conf"


def _directive(text: str, name: str) -> str:
    """The value of the (single) http-level directive ``name`` in nginx.conf."""
    values = [
        line.strip()[len(name) :].strip(" ;")
        for line in text.splitlines()
        if line.strip().startswith(name + " ")
    ]
    assert len(values) == 1, f"{name}: {values}"
    return values[0]


def _seconds(value: str) -> float:
    return float(value[:-1]) * {"s": 1, "m": 60}[value[-1]] if value[-1] in "sm" else float(value)


def test_nginx_conf_bounds_slow_clients_and_keeps_tokens_out_of_its_log() -> None:
    """The shipped nginx.conf sets header/body/send/keep-alive timeouts and a per-address
    connection limit, and logs $uri (never $request, which carries ?token=)."""
    text = NGINX_CONF.read_text()
    assert _seconds(_directive(text, "client_header_timeout")) <= 15
    assert _seconds(_directive(text, "client_body_timeout")) <= 15
    assert _seconds(_directive(text, "send_timeout")) <= 60
    assert _seconds(_directive(text, "keepalive_timeout")) <= 30
    assert int(_directive(text, "limit_conn per_address")) <= 256
    log_format = text[text.index("log_format") : text.index("access_log")]
    assert "$uri" in log_format and "$request " not in log_format and '$request"' not in log_format


async def test_nginx_cuts_off_half_sent_requests_and_logs_no_token(
    tmp_path: Path, server: RedisServer, namespace: str
) -> None:
    """Against a real nginx (header timeout shortened to 1 s): 50 half-sent requests are
    closed; a ?token= request is served with no-referrer and its token is not logged."""
    from tests.support.raw_ws import closed_by_peer, slowloris

    with GatewayProc(redis_url=server.url, namespace=namespace) as gw:
        nginx = Nginx(
            tmp_path / "nginx",
            [gw.port],
            edits={"client_header_timeout 10s;": "client_header_timeout 1s;"},
        )
        nginx.start()
        port = nginx.port
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
                for _ in range(200):
                    try:
                        r = await http.get("/?token=s3cr3t-in-url")
                        break
                    except httpx.TransportError:
                        await asyncio.sleep(0.05)
                assert r.status_code == 200
                assert r.headers["referrer-policy"] == "no-referrer"
            socks = await asyncio.to_thread(slowloris, port, 50)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while sum(closed_by_peer(s) for s in socks) < len(socks):
                assert loop.time() < deadline, "nginx kept half-sent requests open"
                await asyncio.sleep(0.1)
            for s in socks:
                s.close()
            deadline = loop.time() + 10
            while "GET / HTTP/1.1" not in nginx.log():
                assert loop.time() < deadline, "nginx logged no access line"
                await asyncio.sleep(0.1)
            assert "s3cr3t-in-url" not in nginx.log()
        finally:
            nginx.stop()
