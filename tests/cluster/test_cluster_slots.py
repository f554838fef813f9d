"""A real 3-master Redis Cluster: one namespace is one slot, namespaces spread over shards."""

from __future__ import annotations

from typing import cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from relaybus.shared.store.appendlog import AppendBatch, LogAppender, OutEvent
from relaybus.shared.store.connection import ensure_epoch
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire import frames
from tests.support.cluster import ClusterRig

NAMESPACES = [f"team-{c}" for c in "abcdef"]


async def test_namespace_append_is_single_slot(cluster: ClusterRig) -> None:
    """The Lua append and the gateway's read pipeline run per namespace without CROSSSLOT;
    every key a namespace wrote is in its one slot, and the namespaces land on several shards."""
    rc = RedisCluster(host="127.0.0.1", port=cluster.ports[0])
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
