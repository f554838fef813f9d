"""Sentinel failover with real processes: a collector and two gateways follow the promoted
replica without a restart, and the lines the dead primary acknowledged but never replicated
reach every watching client exactly once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from relaybus.shared.store.keys import Keys
from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import append, session_texts, transcript, user_line
from tests.support.gateway_client import FULL, WsClient
from tests.support.gateway_server import GatewayProc
from tests.support.sentinel import SentinelRig

SID = "5e7f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b"
BEFORE, UNREPLICATED, DURING = 40, 25, 40


def texts(c: WsClient) -> list[str]:
    out = []
    for f in c.events(SID):
        blocks = f["event"].get("blocks") or []
        if f["event"]["type"] == "user" and blocks:
            out.append(str(blocks[0].get("text", "")))
    return out


async def watch(stack: contextlib.AsyncExitStack, url: str) -> WsClient:
    c = await stack.enter_async_context(WsClient(url, token="full-token"))
    await c.hello(FULL)
    await c.send({"type": "watch_session", "sessionId": SID})
    await c.expect("watch_ack")
    return c


async def holds(clients: list[WsClient], last: str, wait_s: float) -> None:
    """Read every client until its last chat line is ``last``."""
    for c in clients:

        def done(_: object, c: WsClient = c) -> bool:
            held = texts(c)
            return bool(held) and held[-1] == last

        await c.until(done, wait_s)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[SentinelRig]:
    ha = SentinelRig(tmp_path / "ha", down_after_ms=1000)
    ha.start()
    yield ha
    ha.stop()


async def test_failover_loses_and_repeats_nothing(
    rig: SentinelRig, namespace: str, claude_dir: Path
) -> None:
    """SIGKILL the primary with lines it never replicated: every client holds each line once."""
    env = {"RELAYBUS_REDIS_SENTINELS": rig.sentinels, "RELAYBUS_REDIS_SOCKET_TIMEOUT_S": "1"}
    path = transcript(claude_dir, SID)
    append(path, user_line(SID, "L0"))
    expected = [f"L{i}" for i in range(BEFORE + UNREPLICATED + DURING + 1)]
    with (
        CollectorProc(
            redis_url=rig.primary.url, namespace=namespace, claude_dir=claude_dir, env=env
        ) as collector,
        GatewayProc(redis_url=rig.primary.url, namespace=namespace, env=env) as gw_a,
        GatewayProc(redis_url=rig.primary.url, namespace=namespace, env=env) as gw_b,
    ):
        async with contextlib.AsyncExitStack() as stack:
            clients = [await watch(stack, gw.ws) for gw in (gw_a, gw_b, gw_a, gw_b)]
            for i in range(1, BEFORE + 1):
                append(path, user_line(SID, f"L{i}"))
                await asyncio.sleep(0.005)
            await holds(clients, f"L{BEFORE}", 30)
            # Replication is cut (the replica frozen, its link dropped) while the primary
            # acknowledges more lines, which every client receives; then the primary dies.
            assert rig.replica.proc is not None and rig.primary.proc is not None
            os.kill(rig.replica.proc.pid, signal.SIGSTOP)
            with rig.primary.client() as p:
                p.client_kill_filter(_type="replica")
            unreplicated = expected[BEFORE + 1 : BEFORE + UNREPLICATED + 1]
            append(path, b"".join(user_line(SID, t) for t in unreplicated))
            await holds(clients, unreplicated[-1], 10)
            keys = Keys(namespace)
            with rig.primary.client() as p:
                acknowledged = int(p.get(keys.seq) or 0)
            rig.primary.stop()
            killed = time.monotonic()
            os.kill(rig.replica.proc.pid, signal.SIGCONT)
            with rig.replica.client() as r:
                assert acknowledged - int(r.get(keys.seq) or 0) == UNREPLICATED
            for t in expected[BEFORE + UNREPLICATED + 1 :]:
                append(path, user_line(SID, t))
                await asyncio.sleep(0.02)
            await holds(clients, expected[-1], 30)
            assert time.monotonic() - killed < 20
            assert rig.named_primary() == rig.replica.port
            for c in clients:
                assert c.of_type("gap_detected") == []
                assert texts(c) == expected
            with rig.replica.client() as r:  # the promoted log matches the file
                chat = [t for t in session_texts(r, keys, SID) if t.startswith("L")]
            assert chat == expected
            # The collector found its committed offset behind and re-published from it.
            assert "adopting it" in collector.log()
