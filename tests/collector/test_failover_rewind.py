"""A failover that lost acknowledged lines while no gateway was alive (real processes): the
collector finds its committed offsets behind the appends Redis acknowledged, records the
rewind, re-publishes, and a client holding lost lines resumes on a gateway started after the
loss with every line exactly once; a client connected after the loss is told nothing. An idle
collector (no line written after the loss) checks its offsets on reconnecting and does the same."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from relaybus.shared.store.keys import Keys
from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import append, session_texts, transcript, user_line
from tests.support.gateway_client import WsClient
from tests.support.gateway_server import GatewayProc
from tests.support.rewound_view import view
from tests.support.servers import RedisServer
from tests.support.wait import wait_for

#: Two transcripts written in turn: their lost lines are re-published file by file, so at
#: other seqs than they first had (a client resuming from its lastSeqId would miss some).
SIDS = ("5e7f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b", "6f8a2b3c-4d5e-4f6a-9b0c-1d2e3f4a5b6c")
BEFORE, LOST, AFTER = 4, 6, 3

Snapshot = list[tuple[bytes, bytes]]


def lines(k: int, start: int, stop: int) -> list[str]:
    return [f"s{k}-{i}" for i in range(start, stop)]


def snapshot(r: redis.Redis, keys: Keys) -> Snapshot:
    """Every key of the namespace, dumped (what a replica holds when replication stops). A key
    that expires between SCAN and DUMP (nil) is not in it: RESTORE of nil would fail."""
    return [
        (key, dumped)
        for key in r.scan_iter(match=f"{keys.prefix}*")
        if (dumped := r.dump(key)) is not None
    ]


def fail_over_to(r: redis.Redis, keys: Keys, kept: Snapshot) -> None:
    """The namespace becomes the snapshot, atomically, and every client is disconnected: what
    a collector sees when a replica that stopped replicating at the snapshot is promoted."""
    pipe = r.pipeline(transaction=True)
    for key in r.scan_iter(match=f"{keys.prefix}*"):
        pipe.delete(key)
    for key, dumped in kept:
        pipe.restore(key, 0, dumped)
    pipe.execute()
    r.client_kill_filter(_type="normal")


async def watch(stack: contextlib.AsyncExitStack, url: str, **hello: object) -> WsClient:
    c = await stack.enter_async_context(WsClient(url, token="full-token"))
    await c.hello([], **hello)
    return c


@pytest.mark.parametrize("written_after", [AFTER, 0], ids=["written-after", "idle"])
async def test_rewind_no_gateway_saw_is_recorded_by_the_collector(
    private_server: Callable[..., RedisServer], namespace: str, claude_dir: Path, written_after: int
) -> None:
    srv = private_server()
    keys = Keys(namespace)
    paths = [transcript(claude_dir, sid) for sid in SIDS]

    async def write(start: int, stop: int) -> None:
        for i in range(start, stop):
            for k, (sid, path) in enumerate(zip(SIDS, paths, strict=True)):
                append(path, user_line(sid, f"s{k}-{i}"))
                await asyncio.sleep(0.05)  # one append per line: the files' seqs interleave

    def published(stop: int) -> bool:
        with srv.client() as r:
            return all(
                session_texts(r, keys, sid) == lines(k, 0, stop) for k, sid in enumerate(SIDS)
            )

    env = {"RELAYBUS_BACKFILL_EVENTS": "0"}
    with CollectorProc(redis_url=srv.url, namespace=namespace, claude_dir=claude_dir, env=env):
        with GatewayProc(redis_url=srv.url, namespace=namespace) as gw_a:
            async with WsClient(gw_a.ws, token="full-token") as gone:
                token = (await gone.hello([]))["epoch"]
                await write(0, BEFORE)
                await wait_for(lambda: published(BEFORE), timeout_s=20)
                with srv.client() as r:
                    kept = snapshot(r, keys)
                    kept_seq = int(r.get(keys.seq) or 0)
                await write(BEFORE, BEFORE + LOST)
                lost = {t for k in (0, 1) for t in lines(k, BEFORE, BEFORE + LOST)}
                await gone.until(lambda _: lost <= set(view(gone)), 20)
                gone_last = max(f["seqId"] for f in gone.of_type("session_event"))
            # The only gateway is gone before the loss: nobody saw it but the collector.
        with srv.client() as r:
            fail_over_to(r, keys, kept)
        end = BEFORE + LOST + written_after
        await write(BEFORE + LOST, end)
        await wait_for(lambda: published(end), timeout_s=20)
        with srv.client() as r:
            assert int(r.get(keys.seq) or 0) >= gone_last > kept_seq  # re-published up to it
            assert r.hgetall(keys.rewinds) == {b"gen": b"1", b"1": str(kept_seq + 1).encode()}
        everything = {t for k in (0, 1) for t in lines(k, 0, end)}
        with GatewayProc(redis_url=srv.url, namespace=namespace) as gw_b:
            async with contextlib.AsyncExitStack() as stack:
                back = await watch(stack, gw_b.ws, lastSeqId=gone_last, epoch=token)
                await back.send({"type": "list_sessions"})  # answered after the resume
                await back.expect("sessions")
                await back.until(lambda _: everything <= set(view(gone, back)), 20)
                held = view(gone, back)
                for k in (0, 1):  # each line once, in order
                    assert [t for t in held if t.startswith(f"s{k}-")] == lines(k, 0, end)
                gaps = back.of_type("gap_detected")
                assert [(g["reason"], g["fromSeqId"]) for g in gaps] == [("rewound", kept_seq + 1)]
                fresh = await stack.enter_async_context(WsClient(gw_b.ws, token="full-token"))
                hello = await fresh.hello([])
                again = await watch(stack, gw_b.ws, lastSeqId=hello["seqId"], epoch=hello["epoch"])
                await again.send({"type": "list_sessions"})
                await again.expect("sessions")
                assert hello["epoch"] != token
                assert not again.of_type("gap_detected")
