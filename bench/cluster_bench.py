"""Collector append throughput on a Redis Cluster node vs a plain redis-server, side by side.

A plain ``redis-server`` and a 3-master cluster (``tests/support/cluster.py``) on loopback; a
real ``python -m relaybus.collector`` per run, given the plain server's URL or, with
``RELAYBUS_REDIS_CLUSTER=1``, only the cluster's seed node (the namespace is served by
another master, so the client follows the slot map). ``--lines`` fixture lines are dropped
into a transcript at once; lines/s until the file's offset is committed. Plain and cluster
runs alternate so that both see the same machine load; the best of ``--repeat`` is kept.

Writes ``bench/results/cluster.json``. Usage: ``python bench/cluster_bench.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import redis

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from rig.collector import drop_transcript, fixture_lines  # noqa: E402
from rig.services import header, write_result  # noqa: E402

from tests.support.cluster import ClusterRig  # noqa: E402
from tests.support.collector_proc import CollectorProc  # noqa: E402
from tests.support.servers import RedisServer, server_binaries  # noqa: E402

OUT = REPO / "bench" / "results" / "cluster.json"


def throughput(
    url: str,
    client: redis.Redis | redis.RedisCluster,
    ns: str,
    claude: Path,
    data: bytes,
    env: dict[str, str],
) -> float:
    (claude / "projects").mkdir(parents=True)
    (claude / "sessions").mkdir()
    proc = CollectorProc(redis_url=url, namespace=ns, claude_dir=claude, host_id="bench", env=env)
    proc.start()
    try:
        return drop_transcript(client, claude, ns, data)
    finally:
        proc.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--lines", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3, help="runs per target; the best is kept")
    args = ap.parse_args()
    base = fixture_lines()
    lines = (base * (args.lines // len(base) + 1))[: args.lines]
    data = b"".join(lines)
    result = header("cluster", "redis", load=True)
    runs: dict[str, list[float]] = {"plain": [], "cluster": []}
    with tempfile.TemporaryDirectory(prefix="cluster-bench-") as tmp:
        root = Path(tmp)
        plain = RedisServer("redis", server_binaries()["redis"], root / "plain")
        (root / "cluster").mkdir()
        cluster = ClusterRig(root / "cluster")
        plain.start()
        cluster.start()
        plain_client = plain.client()
        cluster_client = redis.RedisCluster.from_url(cluster.seed_url)
        try:
            for i in range(args.repeat):
                ns = f"bp{i}{time.monotonic_ns()}"
                took = throughput(plain.url, plain_client, ns, root / f"p{i}", data, {})
                runs["plain"].append(args.lines / took)
                ns = cluster.namespace_away_from_seed()
                env = {"RELAYBUS_REDIS_CLUSTER": "1"}
                took = throughput(cluster.seed_url, cluster_client, ns, root / f"c{i}", data, env)
                runs["cluster"].append(args.lines / took)
        finally:
            plain_client.close()
            cluster_client.close()
            cluster.stop()
            plain.stop()
    for name, values in runs.items():
        result[name] = {
            "throughput_lines_per_s": round(max(values)),
            "all_runs_lines_per_s": [round(v) for v in values],
        }
    result["cluster_vs_plain"] = round(max(runs["cluster"]) / max(runs["plain"]), 3)
    result["lines"] = args.lines
    result["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    write_result(OUT, result)


if __name__ == "__main__":
    main()
