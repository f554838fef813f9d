"""deploy/prometheus.yml (loopback copy) scrapes a real gateway and collector, and every
query of the Grafana dashboard runs against the data they export."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import (
    append,
    assistant_line,
    progress_line,
    transcript,
    user_line,
)
from tests.support.deploy_files import dashboard_exprs, metric_families
from tests.support.deploy_procs import Prometheus
from tests.support.gateway_client import FULL, WsClient
from tests.support.gateway_server import GatewayProc
from tests.support.servers import RedisServer, free_port

TOKEN = "full-token"
WAIT_S = 60.0


@pytest.fixture
def monitored(
    tmp_path: Path, server: RedisServer, namespace: str, claude_dir: Path
) -> Iterator[tuple[Prometheus, GatewayProc]]:
    """A gateway, a collector (metrics on a free port) and Prometheus scraping both."""
    gateway = GatewayProc(
        redis_url=server.url, namespace=namespace, log_path=tmp_path / "gateway.log"
    )
    collector, metrics_port = _start_collector(server, namespace, claude_dir)
    prometheus = Prometheus(
        tmp_path / "prometheus",
        {"gateway": [f"127.0.0.1:{gateway.port}"], "collector": [f"127.0.0.1:{metrics_port}"]},
    )
    try:
        gateway.start()
        prometheus.start()
        yield prometheus, gateway
    finally:
        prometheus.stop()
        collector.stop()
        gateway.kill()


def _start_collector(
    server: RedisServer, namespace: str, claude_dir: Path
) -> tuple[CollectorProc, int]:
    """A collector serving /metrics on a free port; another free port if one was taken
    between choosing and binding it (other suites run on this machine)."""
    for attempt in range(3):
        port = free_port()
        collector = CollectorProc(
            redis_url=server.url,
            namespace=namespace,
            claude_dir=claude_dir,
            env={"RELAYBUS_COLLECTOR_METRICS_PORT": str(port)},
        )
        try:
            return collector.start(), port
        except RuntimeError:
            collector.stop()
            if attempt == 2 or "Address already in use" not in collector.log():
                raise
    raise AssertionError("unreachable")


async def _drive_traffic(gateway: GatewayProc, claude_dir: Path) -> None:
    """Publish, watch, replay, a gap, a bad frame and a command: every family gets samples.
    Waits are long: other test suites may load the machine."""
    sid = str(uuid.uuid4())
    path = transcript(claude_dir, sid)
    async with WsClient(gateway.ws, token=TOKEN) as ws:
        await ws.send({"type": "hello", "capabilities": FULL})
        await ws.expect("welcome", WAIT_S)
        # written once welcomed: session_started is broadcast live, never replayed to a
        # hello without lastSeqId (a fast collector published it before a loaded gateway's
        # welcome once, and the wait below ran out)
        append(path, user_line(sid, "first") + progress_line(sid))
        await ws.until(lambda _: any(f["type"] == "session_started" for f in ws.received), WAIT_S)
        await ws.watch(sid, wait_s=WAIT_S, requestId="w")
        append(path, assistant_line(sid, "live reply"))
        await ws.until(lambda _: any("live reply" in str(f) for f in ws.events(sid)), WAIT_S)
        await ws.send("not json")
        await ws.expect("error", WAIT_S)
        await ws.send({"type": "interrupt_request", "requestId": "i", "sessionId": sid})
        await ws.until(lambda _: any(f.get("requestId") == "i" for f in ws.received), WAIT_S)
    async with WsClient(gateway.ws, token=TOKEN) as ws:
        await ws.send({"type": "hello", "capabilities": [], "lastSeqId": 1, "epoch": "old"})
        await ws.expect("gap_detected", WAIT_S)


async def _eventually(
    prometheus: Prometheus, query: str, timeout_s: float = WAIT_S
) -> dict[str, Any]:
    """Query until the answer is a success with at least one sample; the last answer."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        answer = await asyncio.to_thread(prometheus.api, "/api/v1/query", query=query)
        assert answer["status"] == "success", (query, answer)
        if answer["data"]["result"] or loop.time() > deadline:
            return answer
        await asyncio.sleep(0.5)


async def test_prometheus_scrapes_both_roles_and_every_dashboard_query_has_data(
    monitored: tuple[Prometheus, GatewayProc], claude_dir: Path
) -> None:
    """Both targets are up; each metric family the dashboard uses has samples; each
    dashboard expression parses and returns data (a broken one is reported as bad_data)."""
    prometheus, gateway = monitored
    await _drive_traffic(gateway, claude_dir)

    for job in ("relaybus-gateway", "relaybus-collector"):
        up = await _eventually(prometheus, f'up{{job="{job}"}} == 1')
        assert up["data"]["result"], await asyncio.to_thread(prometheus.api, "/api/v1/targets")

    exprs = dashboard_exprs()
    families = set().union(*(metric_families(e) for e in exprs))
    for family in sorted(families):
        answer = await _eventually(prometheus, f'{{__name__=~"{family}|{family}_count"}}')
        assert answer["data"]["result"], f"no samples of {family}"
    for expr in exprs:
        answer = await _eventually(prometheus, expr)
        assert answer["data"]["result"], f"no data for {expr}"
    broken = await asyncio.to_thread(prometheus.api, "/api/v1/query", query="sum(rate(x[1m])")
    assert (broken["status"], broken["errorType"]) == ("error", "bad_data")
