"""Sentinel failover with real processes: a collector and two gateways follow the promoted
replica without a restart, and the lines the dead primary acknowledged but never replicated
reach every watching client exactly once, also a client that resumes later on a gateway that
never saw them; a client that connected after the failover is not told of a rewind."""

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
from tests.support.gateway_client import WsClient
from tests.support.gateway_server import GatewayProc
from tests.support.rewound_view import view
from tests.support.sentinel import SentinelRig

#: Two transcripts: their lost lines are re-published in another order than they first were.
SIDS = ("5e7f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b", "6f8a2b3c-4d5e-4f6a-9b0c-1d2e3f4a5b6c")
BEFORE, UNREPLICATED, DURING = 20, 12, 20


def lines(k: int, start: int, stop: int) -> list[str]:
    return [f"s{k}-{i}" for i in range(start, stop)]


async def watch(stack: contextlib.AsyncExitStack, url: str) -> WsClient:
    """A client seeing every session event (hello without session_subscriptions)."""
    c = await stack.enter_async_context(WsClient(url, token="full-token"))
    await c.hello([])
    return c


async def holds(clients: list[WsClient], want: set[str], wait_s: float) -> None:
    for c in clients:

        def done(_: object, c: WsClient = c) -> bool:
            return want <= set(view(c))

        await c.until(done, wait_s)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[SentinelRig]:
    ha = SentinelRig(tmp_path / "ha", down_after_ms=1000)
    try:
        ha.start()
        yield ha
    finally:
        ha.stop()


async def test_failover_loses_and_repeats_nothing(
    rig: SentinelRig, namespace: str, claude_dir: Path
) -> None:
    """SIGKILL the primary with lines it never replicated: every client ends up holding each
    line once and in order (a rewound gap voids what it got from the lost primary)."""
    env = {"RELAYBUS_REDIS_SENTINELS": rig.sentinels, "RELAYBUS_REDIS_SOCKET_TIMEOUT_S": "1"}
    paths = [transcript(claude_dir, sid) for sid in SIDS]
    for k, (sid, path) in enumerate(zip(SIDS, paths, strict=True)):
        append(path, user_line(sid, f"s{k}-start"))

    def write(start: int, stop: int) -> None:
        for k, (sid, path) in enumerate(zip(SIDS, paths, strict=True)):
            append(path, b"".join(user_line(sid, t) for t in lines(k, start, stop)))

    with (
        CollectorProc(
            redis_url=rig.primary.url, namespace=namespace, claude_dir=claude_dir, env=env
        ) as collector,
        GatewayProc(redis_url=rig.primary.url, namespace=namespace, env=env) as gw_a,
        GatewayProc(redis_url=rig.primary.url, namespace=namespace, env=env) as gw_b,
    ):
        async with contextlib.AsyncExitStack() as stack:
            clients = [await watch(stack, gw.ws) for gw in (gw_a, gw_b, gw_a, gw_b)]
            gone = WsClient(gw_a.ws, token="full-token")  # leaves holding lost lines
            await gone.__aenter__()
            token = (await gone.hello([]))["epoch"]
            for i in range(BEFORE):
                write(i, i + 1)
                await asyncio.sleep(0.005)
            await holds(clients, {"s0-19", "s1-19"}, 30)
            # Replication is cut (the replica frozen, its link dropped) while the primary
            # acknowledges more lines, which every client receives; then the primary dies.
            assert rig.replica.proc is not None and rig.primary.proc is not None
            os.kill(rig.replica.proc.pid, signal.SIGSTOP)
            with rig.primary.client() as p:
                p.client_kill_filter(_type="replica")
            write(BEFORE, BEFORE + UNREPLICATED)
            await holds([*clients, gone], {f"s{k}-{BEFORE + UNREPLICATED - 1}" for k in (0, 1)}, 10)
            gone_last = max(f["seqId"] for f in gone.received)
            await gone.__aexit__(None, None, None)
            keys = Keys(namespace)
            with rig.primary.client() as p:
                acknowledged = int(p.get(keys.seq) or 0)
            rig.primary.stop()
            killed = time.monotonic()
            os.kill(rig.replica.proc.pid, signal.SIGCONT)
            with rig.replica.client() as r:
                assert acknowledged - int(r.get(keys.seq) or 0) == 2 * UNREPLICATED
            end = BEFORE + UNREPLICATED + DURING
            for i in range(BEFORE + UNREPLICATED, end):
                write(i, i + 1)
                await asyncio.sleep(0.02)
            everything = {t for k in (0, 1) for t in lines(k, 0, end)}
            await holds(clients, everything, 30)
            assert time.monotonic() - killed < 20
            assert rig.named_primary() == rig.replica.port
            for c in clients:
                held = view(c)
                assert len(held) == len(everything)  # no line twice
                for k in (0, 1):
                    assert [t for t in held if t.startswith(f"s{k}-")] == lines(k, 0, end)
                assert {g["reason"] for g in c.of_type("gap_detected")} <= {"rewound"}
            with rig.replica.client() as r:  # the promoted log matches the files
                for k, sid in enumerate(SIDS):
                    chat = session_texts(r, keys, sid)
                    assert [t for t in chat if t != f"s{k}-start"] == lines(k, 0, end)
            # The collector found its committed offsets behind and re-published from them.
            assert "adopting it" in collector.log()
            # It left holding lost entries, and the log was re-published past them.
            assert acknowledged - 2 * UNREPLICATED < gone_last <= acknowledged
            with rig.replica.client() as r:
                assert int(r.get(keys.seq) or 0) > gone_last
                # Both gateways found the rewind; it was recorded once.
                assert r.hget(keys.rewinds, "gen") == b"1"
            await later_clients(gone, gone_last, token, rig, namespace, everything, gw_a.ws)


async def later_clients(
    gone: WsClient,
    last: int,
    token: str,
    rig: SentinelRig,
    namespace: str,
    everything: set[str],
    other_ws: str,
) -> None:
    """``gone`` resumes on a gateway started after the failover (it never saw the lost
    entries; the log has been re-published past ``last``): it is told rewound and ends with
    every line once. A client that connects now and resumes on another gateway is not."""
    env = {"RELAYBUS_REDIS_SENTINELS": rig.sentinels}
    with GatewayProc(redis_url=rig.replica.url, namespace=namespace, env=env) as gw_c:
        async with WsClient(gw_c.ws, token="full-token") as back:
            await back.hello([], lastSeqId=last, epoch=token)
            await back.until(lambda _: everything <= set(view(gone, back)), 20)
            assert len(view(gone, back)) == len(everything)  # no line twice
            gaps = back.of_type("gap_detected")
            assert [g["reason"] for g in gaps] == ["rewound"]
            assert gaps[0]["fromSeqId"] <= last and gaps[0]["epoch"] != token
        async with WsClient(gw_c.ws, token="full-token") as fresh:
            hello = await fresh.hello([])
        assert hello["epoch"] != token  # the generation after the rewind
        async with WsClient(other_ws, token="full-token") as again:
            await again.hello([], lastSeqId=hello["seqId"], epoch=hello["epoch"])
            await again.send({"type": "list_sessions"})
            await again.expect("sessions")
            assert not again.of_type("gap_detected")
