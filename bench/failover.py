"""Sentinel failover with unreplicated lines, counted: what do watching clients end up with?

A primary, a replica and three Sentinels on loopback, one collector writing ``--sessions``
transcripts, two gateways with two watching clients each (hello without
session_subscriptions: every session event). Replication is cut (the replica frozen, its
link killed), ``--unreplicated`` lines per session are acknowledged by the primary and
delivered to the clients, the primary is SIGKILLed, the replica resumes, lines keep coming,
the Sentinels promote the replica. Then, per client: lines missing (and whether a
gap_detected covered them) and lines held twice; in the promoted log: lines missing or
twice; and how many log entries were lost with the primary and re-published.

Two more clients: one leaves gateway A holding the lost lines and, once the log was
re-published past them, resumes (its ``lastSeqId`` and epoch token) on a third gateway started
after the failover, which never saw them (``resumed_elsewhere``); one connects to that gateway
after the failover and resumes on gateway A (``fresh_after_failover``: any ``rewound`` it gets
is a false one).

Writes ``bench/results/failover.json``. Usage: ``python bench/failover.py --sessions 1``
and ``--sessions 3``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from rig.services import header, write_result  # noqa: E402

from relaybus.shared.store.keys import Keys  # noqa: E402
from tests.support.collector_proc import CollectorProc  # noqa: E402
from tests.support.collector_records import append, transcript, user_line  # noqa: E402
from tests.support.gateway_server import GatewayProc  # noqa: E402
from tests.support.sentinel import SentinelRig  # noqa: E402

OUT = REPO / "bench" / "results" / "failover.json"
NS = "failover"


async def watcher(
    url: str, held: list[tuple[int, str]], gaps: list[Any], **resume: Any
) -> tuple[ClientConnection, dict[str, Any]]:
    """A client seeing every session event (``resume``: its ``lastSeqId`` and ``epoch``); the
    socket and its welcome."""
    ws = await connect(f"{url}?token=t", compression=None, max_size=None)
    await ws.send(orjson.dumps({"type": "hello", "capabilities": [], **resume}).decode())
    welcome = orjson.loads(await ws.recv())

    async def read() -> None:
        with contextlib.suppress(Exception):
            async for raw in ws:
                f = orjson.loads(raw)
                if f["type"] == "gap_detected":
                    gaps.append(f)
                    if f["reason"] == "rewound":  # what we hold from there on is void
                        held[:] = [(q, t) for q, t in held if q < f["fromSeqId"]]
                elif f["type"] == "session_event":
                    blocks = f["event"].get("blocks") or []
                    text = blocks[0].get("text", "") if blocks else ""
                    if text.startswith("s"):
                        held.append((f["seqId"], text))

    asyncio.get_running_loop().create_task(read())
    return ws, welcome


async def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    rig = SentinelRig(root / "ha", down_after_ms=1000)
    claude = root / "claude"
    (claude / "projects").mkdir(parents=True)
    (claude / "sessions").mkdir()
    sids = [f"f0000000-0000-4000-8000-{i:012d}" for i in range(args.sessions)]
    paths = [transcript(claude, sid) for sid in sids]
    written: list[str] = []

    def write(phase: str, n: int) -> None:
        for k, (sid, path) in enumerate(zip(sids, paths, strict=True)):
            texts = [f"s{k}-{phase}{i}" for i in range(n)]
            append(path, b"".join(user_line(sid, t) for t in texts))
            written.extend(texts)

    write("a", 1)
    env = {"RELAYBUS_REDIS_SENTINELS": rig.sentinels, "RELAYBUS_REDIS_SOCKET_TIMEOUT_S": "1"}
    keys = Keys(NS)
    try:
        rig.start()
        with (
            CollectorProc(redis_url=rig.primary.url, namespace=NS, claude_dir=claude, env=env),
            GatewayProc(redis_url=rig.primary.url, namespace=NS, tokens="t", env=env) as ga,
            GatewayProc(redis_url=rig.primary.url, namespace=NS, tokens="t", env=env) as gb,
        ):
            held: list[list[tuple[int, str]]] = [[] for _ in range(4)]
            gaps: list[list[Any]] = [[] for _ in range(4)]
            socks = [
                (await watcher(g.ws, held[i], gaps[i]))[0] for i, g in enumerate((ga, gb, ga, gb))
            ]
            leaver_held: list[tuple[int, str]] = []
            leaver_gaps: list[Any] = []
            leaver, hello = await watcher(ga.ws, leaver_held, leaver_gaps)
            written.clear()  # the first line of each session came before the clients
            for i in range(20):
                write(f"b{i}-", 1)
                await asyncio.sleep(0.01)
            await until(lambda: all(len(h) >= len(written) for h in held))
            assert rig.replica.proc is not None
            os.kill(rig.replica.proc.pid, signal.SIGSTOP)
            with rig.primary.client() as p:
                p.client_kill_filter(_type="replica")
            write("c", args.unreplicated)
            await until(lambda: all(len(h) >= len(written) for h in [*held, leaver_held]))
            leaver_last = max(q for q, _ in leaver_held)
            await leaver.close()
            with rig.primary.client() as p:
                acknowledged = int(p.get(keys.seq) or 0)
            rig.primary.stop()
            os.kill(rig.replica.proc.pid, signal.SIGCONT)
            with rig.replica.client() as r:
                replicated = int(r.get(keys.seq) or 0)
            killed = time.monotonic()
            for i in range(30):
                write(f"d{i}-", 1)
                await asyncio.sleep(0.05)
            rig.wait_promoted(rig.replica.port)
            await until(lambda: all({t for _, t in h} >= set(written) for h in held), 20)
            settled = time.monotonic() - killed
            for ws in socks:
                await ws.close()
            with GatewayProc(redis_url=rig.replica.url, namespace=NS, tokens="t", env=env) as gc:
                back, _ = await watcher(
                    gc.ws, leaver_held, leaver_gaps, lastSeqId=leaver_last, epoch=hello["epoch"]
                )
                await until(lambda: {t for _, t in leaver_held} >= set(written), 20)
                await back.close()
                fresh_gaps: list[Any] = []
                fresh, fresh_hello = await watcher(gc.ws, [], fresh_gaps)
                await fresh.close()
            again, _ = await watcher(
                ga.ws, [], fresh_gaps, lastSeqId=fresh_hello["seqId"], epoch=fresh_hello["epoch"]
            )
            await asyncio.sleep(1)  # a rewound would come right after the welcome
            await again.close()
        with rig.replica.client() as r:
            log_texts: Counter[str] = Counter()
            log_seq: dict[str, int] = {}
            for eid, fields in r.xrange(keys.log):
                f = orjson.loads(fields[b"f"])
                blocks = f.get("event", {}).get("blocks") or []
                text = blocks[0].get("text", "") if blocks else ""
                if text.startswith("s"):
                    log_texts[text] += 1
                    log_seq[text] = int(eid.split(b"-")[0])
    finally:
        rig.stop()
    clients = []
    for h, g in zip([*held, leaver_held], [*gaps, leaver_gaps], strict=True):
        have = Counter(t for _, t in h)
        missing = [t for t in written if t not in have]
        covered = [
            t
            for t in missing
            if any(x["fromSeqId"] <= log_seq.get(t, -1) <= x["toSeqId"] for x in g)
        ]
        clients.append(
            {
                "missing": len(missing),
                "missing_announced": len(covered),
                "duplicated": sum(n - 1 for n in have.values() if n > 1),
                "gaps": dict(Counter(x["reason"] for x in g)),
            }
        )
    return {
        "sessions": args.sessions,
        "lines_written": len(written),
        "log_entries_acknowledged_not_replicated": acknowledged - replicated,
        "promoted_log": {
            "missing": sum(
                1 for t in written if t not in log_texts
            ),  # the lines after the watchers came
            "duplicated": sum(n - 1 for n in log_texts.values() if n > 1),
        },
        "clients": clients[:-1],
        "resumed_elsewhere": clients[-1] | {"last_seq_id": leaver_last},
        "fresh_after_failover": {"gaps": dict(Counter(x["reason"] for x in fresh_gaps))},
        "seconds_from_kill_to_all_delivered": round(settled, 2),
    }


async def until(check: Any, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return  # report what was held by then
        await asyncio.sleep(0.05)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sessions", type=int, default=1)
    ap.add_argument("--unreplicated", type=int, default=10, help="lines per session")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="failover-") as tmp:
        result = header("failover", "redis", load=True) | asyncio.run(run(args, Path(tmp)))
    previous = orjson.loads(OUT.read_bytes()) if OUT.exists() else {}
    runs = {**previous.get("runs", {}), f"sessions_{args.sessions}": result}
    write_result(OUT, {"benchmark": "failover", "runs": runs})


if __name__ == "__main__":
    main()
