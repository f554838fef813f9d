"""Two namespaces on two shards, each served by a real collector and gateway process; the
first namespace's slot is moved to another master twice while its collector appends and
clients watch. Every client must hold every line exactly once, in order, and nobody restarts.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import redis

from relaybus.shared.store.keys import Keys
from tests.support.cluster import ClusterRig, namespace_slot
from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import append, session_texts, transcript, user_line
from tests.support.gateway_client import FULL, WsClient
from tests.support.gateway_server import GatewayProc

LINES = 200
CLUSTER_ENV = {"RELAYBUS_REDIS_CLUSTER": "1"}


def texts(c: WsClient, sid: str) -> list[str]:
    return [e["event"]["blocks"][0]["text"] for e in c.events(sid) if e["event"]["type"] == "user"]


async def watching(gw: GatewayProc, sid: str, v1: bool = False) -> WsClient:
    c = WsClient(gw.ws, token="full-token")
    await c.__aenter__()
    if v1:  # no capabilities: every session event is broadcast, resumed from the start
        await c.hello(lastSeqId=0)
    else:
        await c.hello(FULL)
        await c.watch(sid, requestId="w")
    return c


async def test_resharding_under_live_clients_loses_nothing(
    cluster: ClusterRig, tmp_path: Path
) -> None:
    """Lines written before, during and after two slot migrations reach every client once,
    in order, without a gap; the log in Redis matches the file; the other namespace, on
    another shard, is unaffected."""
    ns_a = cluster.namespace_away_from_seed()
    slot = namespace_slot(ns_a)
    home = cluster.owner(slot)
    ns_b = next(
        ns for ns in iter(cluster.namespace_away_from_seed, None) if cluster.owner_of(ns) != home
    )
    sid_a, sid_b = str(uuid.uuid4()), str(uuid.uuid4())
    dirs = {}
    for name in ("a", "b"):
        d = tmp_path / name / "claude"
        (d / "projects").mkdir(parents=True)
        (d / "sessions").mkdir()
        dirs[name] = d
    path_a, path_b = transcript(dirs["a"], sid_a), transcript(dirs["b"], sid_b)
    append(path_a, user_line(sid_a, "line-0"))
    append(path_b, user_line(sid_b, "other-0"))
    url = cluster.seed_url
    with (
        CollectorProc(
            redis_url=url, namespace=ns_a, claude_dir=dirs["a"], env=CLUSTER_ENV
        ) as collector_a,
        CollectorProc(redis_url=url, namespace=ns_b, claude_dir=dirs["b"], env=CLUSTER_ENV),
        GatewayProc(
            redis_url=url, namespace=ns_a, env=CLUSTER_ENV, log_path=tmp_path / "gw-a.log"
        ) as gw_a,
        GatewayProc(redis_url=url, namespace=ns_b, env=CLUSTER_ENV) as gw_b,
    ):
        clients = [
            await watching(gw_a, sid_a),
            await watching(gw_a, sid_a),
            await watching(gw_a, sid_a, v1=True),
        ]
        other = await watching(gw_b, sid_b)
        try:
            for c in clients:
                await c.until(lambda _: texts(c, sid_a) == ["line-0"], 30)  # noqa: B023  # awaited before the loop moves on

            async def writer() -> None:
                for i in range(1, LINES):
                    append(path_a, user_line(sid_a, f"line-{i}"))
                    if i % 20 == 0:
                        append(path_b, user_line(sid_b, f"other-{i // 20}"))
                    await asyncio.sleep(0.015)

            started = time.monotonic()
            writing = asyncio.create_task(writer())
            await asyncio.sleep(0.5)
            away = next(p for p in cluster.ports if p not in (home, cluster.owner_of(ns_b)))
            moved = [await asyncio.to_thread(cluster.move_slot, slot, away)]
            await asyncio.sleep(0.5)
            moved.append(await asyncio.to_thread(cluster.move_slot, slot, home))
            await writing
            expected = [f"line-{i}" for i in range(LINES)]
            for c in clients:
                await c.until(lambda _: len(texts(c, sid_a)) >= LINES, 60)  # noqa: B023  # awaited before the loop moves on
                await c.send({"type": "list_sessions"})
                await c.expect("sessions")  # anything duplicated would have arrived before this
            await other.until(lambda _: len(texts(other, sid_b)) >= LINES // 20, 30)
            took = time.monotonic() - started
            assert collector_a.alive() and gw_a.alive()  # followed the slot, no restart
        finally:
            for c in [*clients, other]:
                await c.__aexit__(None, None, None)
    assert all(n > 0 for n in moved) and cluster.owner(slot) == home
    for c in clients:
        assert texts(c, sid_a) == expected
        seqs = [e["seqId"] for e in c.events(sid_a)]
        assert seqs == sorted(set(seqs))
        assert not c.of_type("gap_detected") and not c.of_type("error")
    for log in (collector_a.log_path.read_text(), (tmp_path / "gw-a.log").read_text()):
        assert '"level":"error"' not in log and '"level":"warning"' not in log
    assert texts(other, sid_b) == [f"other-{i}" for i in range(LINES // 20)]
    rc = redis.RedisCluster.from_url(url)
    try:
        assert session_texts(rc, Keys(ns_a), sid_a) == expected
    finally:
        rc.close()
    print(
        f"\nreshard: {len(moved)} migrations of slot {slot} ({sum(moved)} keys moved), "
        f"{LINES} lines x {len(clients)} clients = {LINES * len(clients)} checked, "
        f"lost 0, duplicated 0, gaps 0, {took:.1f} s"
    )
