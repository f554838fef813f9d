"""A real 3-master Redis Cluster: one namespace is one slot, namespaces spread over shards."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import cast

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from relaybus.shared.store.appendlog import AppendBatch, LogAppender, OutEvent
from relaybus.shared.store.connection import ensure_epoch
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire import frames
from tests.support.procs import stop_process
from tests.support.servers import free_port, server_binaries

NAMESPACES = [f"team-{c}" for c in "abcdef"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[int]]:
    """Three masters on loopback, slots assigned by ``redis-cli --cluster create``."""
    root = tmp_path_factory.mktemp("cluster")
    cli = shutil.which("redis-cli")
    assert cli is not None
    ports = [free_port() for _ in range(3)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for port in ports:
            d = root / str(port)
            d.mkdir()
            # The bus port is given: the default (port + 10000) may be taken or above 65535.
            argv = [server_binaries()["redis"], "--port", str(port), "--bind", "127.0.0.1"]
            argv += ["--cluster-enabled", "yes", "--cluster-port", str(free_port())]
            argv += ["--save", "", "--dir", str(d), "--logfile", str(d / "log")]
            procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL))
        for port, proc in zip(ports, procs, strict=True):
            wait_ping(cli, port, proc)
        create = [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports)]
        create += ["--cluster-replicas", "0", "--cluster-yes"]
        subprocess.run(create, check=True, capture_output=True, timeout=60)
        yield ports
    finally:
        for proc in procs:
            stop_process(proc, 5)


def wait_ping(cli: str, port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and proc.poll() is None:
        out = subprocess.run([cli, "-p", str(port), "ping"], capture_output=True, timeout=5)
        if out.stdout.strip() == b"PONG":
            return
        time.sleep(0.05)
    raise TimeoutError(f"no redis on {port} (exit code {proc.poll()})")


async def test_namespace_append_is_single_slot(cluster: list[int]) -> None:
    """The Lua append and the gateway's read pipeline run per namespace without CROSSSLOT;
    every key a namespace wrote is in its one slot, and the namespaces land on several shards."""
    rc = RedisCluster(host="127.0.0.1", port=cluster[0])
    # relaybus's store code is typed for the plain client; the cluster client has the same
    # commands and routes each to the slot's node.
    as_plain = cast(aioredis.Redis, rc)
    owners = set()
    try:
        for ns in NAMESPACES:
            keys = Keys(ns)
            epoch = await ensure_epoch(as_plain, keys)
            app = LogAppender(
                as_plain, keys, "h1", log_maxlen=100, session_maxlen=100, session_ttl_s=60
            )
            prefix = frames.session_event("s1", {"type": "user", "blocks": []})
            event = OutEvent(frames.SESSION_EVENT, prefix, session_stream=True)
            done = await app.append(
                AppendBatch("s1", [event], "f.jsonl", "", "9:1:1", {"title": "t"}, 5),
                epoch=epoch,
                stamp_ms=1,
            )
            assert (done.first_seq, done.last_seq) == (1, 1)
            pipe = rc.pipeline(transaction=False)
            pipe.xread({keys.log: "0-0"}, count=10)
            pipe.get(keys.epoch)
            pipe.get(keys.seq)
            read, got_epoch, head = await pipe.execute()
            assert len(read[0][1]) == 1 and got_epoch == epoch.encode() and head == b"1"
            slot = rc.keyslot(keys.log)
            node = rc.get_node_from_key(keys.log)
            assert node is not None
            owners.add(node.port)
            # seq, log, epoch, sessions, session hash + stream, offsets: all in this slot
            assert await rc.execute_command("CLUSTER COUNTKEYSINSLOT", slot, target_nodes=node) == 7
    finally:
        await rc.aclose()
    assert len(owners) >= 2
