"""Chaos run: kill everything at random while lines flow, then check every client's log.

Real processes on loopback: Redis with AOF, two collectors (hosts ``a`` and ``b``, one
transcript each), two gateways behind the shipped nginx (deploy/nginx.conf). Writers append
uniquely numbered user lines (and now and then a garbage line) at ``--rate`` lines/s per
host; ``--clients`` WebSocket clients watch the whole log (hello without
session_subscriptions: every session event) and resume after any disconnect with
``lastSeqId`` + ``epoch`` — through nginx, or (one in five) straight to a random gateway.
Some clients stall (stop reading for a few seconds); one sends garbage frames. Every
``--interval-s`` a random component is hit: SIGKILL + restart of a collector or a gateway,
SIGKILL + restart of Redis (from its AOF), SIGSTOP/SIGCONT of a collector or a gateway, an
nginx reload (SIGHUP: new workers, old ones drain).

At the end every client must hold every line exactly once and in file order, or have been
sent a ``gap_detected`` covering the seq of each line it lacks; the Redis log must hold
every line of the files exactly once. Figures go to ``bench/results/chaos.json``.

Usage: ``python bench/chaos.py --minutes 10 --clients 50`` (the defaults); smaller runs
``--minutes 2 --clients 20``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import random
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import redis
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from rig.services import header, scratch, write_result  # noqa: E402

from relaybus.shared.store.keys import Keys  # noqa: E402
from tests.support.collector_proc import CollectorProc  # noqa: E402
from tests.support.collector_records import append, transcript, user_line  # noqa: E402
from tests.support.deploy_procs import Nginx  # noqa: E402
from tests.support.gateway_server import GatewayProc  # noqa: E402
from tests.support.procs import ManagedProcess  # noqa: E402
from tests.support.servers import RedisServer  # noqa: E402

OUT = REPO / "bench" / "results" / "chaos.json"
NS = "chaos"
TOKEN = "chaos"
HOSTS = ("a", "b")
SIDS = {"a": "c0a0a0a0-0000-4000-8000-00000000000a", "b": "c0b0b0b0-0000-4000-8000-00000000000b"}


@dataclass
class Client:
    """One watching client: what it received, by seq, and the gaps it was told about."""

    name: str
    stall: bool
    last_seq: int = 0
    epoch: str | None = None
    texts: list[tuple[int, str]] = field(default_factory=list)
    gaps: list[tuple[int, int, str]] = field(default_factory=list)
    reconnects: int = 0
    caught_up_s: float | None = None
    #: Where it is connected now (None between connections) and when its last frame came.
    via: str | None = None
    last_frame_at: float = 0.0
    last_error: str = ""


def line_text(frame: dict[str, Any]) -> str | None:
    blocks = frame.get("event", {}).get("blocks") or []
    text = blocks[0].get("text") if blocks else None
    return text if isinstance(text, str) and text[:2] in ("a-", "b-") else None


async def run_client(c: Client, entries: list[str], stop: asyncio.Event) -> None:
    """Watch and resume; ``entries[0]`` is nginx, the others the gateways themselves."""
    rng = random.Random(c.name)
    while not stop.is_set():
        url = entries[0] if rng.random() < 0.8 else rng.choice(entries[1:])
        try:
            async with connect(
                f"{url}?token={TOKEN}", open_timeout=5, compression=None, max_size=None
            ) as ws:
                c.via = url
                hello: dict[str, Any] = {"type": "hello", "capabilities": []}
                if c.epoch is not None:
                    hello.update(lastSeqId=c.last_seq, epoch=c.epoch)
                await ws.send(orjson.dumps(hello).decode())
                while not stop.is_set():
                    if c.stall and rng.random() < 0.002:
                        await asyncio.sleep(rng.uniform(2, 6))  # a phone in a tunnel
                    frame = orjson.loads(await asyncio.wait_for(ws.recv(), 2))
                    c.last_frame_at = time.monotonic()
                    kind = frame["type"]
                    if kind == "welcome":
                        c.epoch = frame["epoch"]
                    elif kind == "gap_detected":
                        c.gaps.append((frame["fromSeqId"], frame["toSeqId"], frame["reason"]))
                        if frame["reason"] == "rewound":  # what it holds from there is void
                            c.texts = [(q, t) for q, t in c.texts if q < frame["fromSeqId"]]
                        if frame["reason"] == "epoch":
                            c.epoch = frame.get("epoch", c.epoch)
                    elif kind == "session_event":
                        text = line_text(frame)
                        if text is not None:
                            c.texts.append((frame["seqId"], text))
                    if kind in ("session_event", "session_started", "session_ended", "turn_status"):
                        c.last_seq = max(c.last_seq, frame["seqId"])
        except TimeoutError:
            c.via, c.last_error = None, "quiet 2 s"
            continue  # quiet for 2 s: just read again on a fresh connection
        except (ConnectionClosed, InvalidHandshake, OSError) as exc:
            c.last_error = repr(exc)[:200]
        c.via = None
        c.reconnects += 1
        await asyncio.sleep(rng.uniform(0.05, 0.5))


async def garbage_client(entries: list[str], stop: asyncio.Event, out: Counter[str]) -> None:
    """Random frames on one connection: each is answered with an error or closes it."""
    rng = random.Random(7)
    junk = [
        b"\x00\xff",
        b"{",
        b"[]",
        b'{"type":"nope"}',
        b'{"type":"watch_session"}',
        b"x" * 70_000,
    ]
    while not stop.is_set():
        try:
            async with connect(f"{rng.choice(entries)}?token={TOKEN}", open_timeout=5) as ws:
                await ws.send(orjson.dumps({"type": "hello", "capabilities": []}).decode())
                while not stop.is_set():
                    frame = rng.choice(junk)
                    await ws.send(frame.decode(errors="replace") if rng.random() < 0.5 else frame)
                    out["sent"] += 1
                    reply = orjson.loads(await asyncio.wait_for(ws.recv(), 5))
                    while reply["type"] != "error":
                        reply = orjson.loads(await asyncio.wait_for(ws.recv(), 5))
                    out["errors"] += 1
                    await asyncio.sleep(0.2)
        except (ConnectionClosed, InvalidHandshake, OSError, TimeoutError) as exc:
            out["closed" if isinstance(exc, ConnectionClosed) else "unreachable"] += 1
            await asyncio.sleep(0.3)


async def writer(
    host: str, path: Path, rate: float, stop: asyncio.Event, written: list[str]
) -> None:
    sid, i, garbage = SIDS[host], 0, random.Random(host)
    while not stop.is_set():
        chunk = b""
        for _ in range(max(1, int(rate / 20))):
            text = f"{host}-{i}"
            chunk += user_line(sid, text)
            written.append(text)
            i += 1
        if garbage.random() < 0.05:
            chunk += b'{"type": "user", "broken\n'
        await asyncio.to_thread(append, path, chunk)
        await asyncio.sleep(0.05)


class Chaos:
    def __init__(
        self,
        srv: RedisServer,
        collectors: list[CollectorProc],
        gateways: list[GatewayProc],
        nginx: Nginx,
        rng: random.Random,
    ) -> None:
        self.srv, self.collectors, self.gateways, self.rng = srv, collectors, gateways, rng
        self.nginx = nginx
        self.done: Counter[str] = Counter()

    async def hit(self) -> None:
        action = self.rng.choice(
            ["kill_collector", "kill_gateway", "restart_redis", "stop_collector", "stop_gateway",
             "reload_nginx"]
        )  # fmt: skip
        if action == "reload_nginx":
            assert self.nginx.proc is not None
            self.nginx.proc.send_signal(signal.SIGHUP)
        elif action == "kill_collector":
            c = self.rng.choice(self.collectors)
            c.kill()
            await asyncio.sleep(self.rng.uniform(0.1, 1.0))
            c.start(wait_ready_s=0)
        elif action == "kill_gateway":
            g = self.rng.choice(self.gateways)
            g.kill()
            await asyncio.sleep(self.rng.uniform(0.1, 1.0))
            respawn_gateway(g)
        elif action == "restart_redis":
            self.srv.stop()
            await asyncio.sleep(self.rng.uniform(0.1, 1.0))
            await asyncio.to_thread(self.srv.start)
        else:
            p: ManagedProcess = self.rng.choice(
                self.collectors if action == "stop_collector" else self.gateways
            )
            os.kill(p.pid, signal.SIGSTOP)
            await asyncio.sleep(self.rng.uniform(0.5, 3.0))
            os.kill(p.pid, signal.SIGCONT)
        self.done[action] += 1


def respawn_gateway(g: GatewayProc) -> None:
    g.spawn([sys.executable, "-m", "relaybus.gateway"], cwd=REPO, env=g.env)


def check(
    clients: list[Client], written: dict[str, list[str]], log_seq: dict[str, list[int]]
) -> dict[str, Any]:
    """Per client: duplicates, order, and every missing line covered by a gap it was sent."""
    lost = dup = announced = out_of_order = 0
    for c in clients:
        seen = Counter(t for _, t in c.texts)
        dup += sum(n - 1 for n in seen.values() if n > 1)
        for host in HOSTS:
            order = [int(t.split("-")[1]) for _, t in c.texts if t.startswith(f"{host}-")]
            out_of_order += sum(1 for x, y in itertools.pairwise(order) if y <= x)
        for lines in written.values():
            for text in lines:
                if text in seen:
                    continue
                seqs = log_seq.get(text, [])
                if seqs and any(lo <= seqs[0] <= hi for lo, hi, _ in c.gaps):
                    announced += 1
                else:
                    lost += 1
    return {
        "lost": lost,
        "duplicated": dup,
        "out_of_order": out_of_order,
        "announced_in_gaps": announced,
    }


def diagnose(c: Client, written: dict[str, list[str]], log_seq: dict[str, list[int]]) -> Any:
    """What a client that did not catch up lacks, and where it was at the end."""
    held = {t for _, t in c.texts}
    missing = sorted(s for lines in written.values() for t in lines if t not in held
                     for s in log_seq.get(t, [-1])[:1])  # fmt: skip
    return {
        "client": c.name,
        "stall": c.stall,
        "last_seq": c.last_seq,
        "held": len(c.texts),
        "missing_seqs": [missing[0], missing[-1], len(missing)] if missing else [],
        "via": c.via,
        "quiet_s": round(time.monotonic() - c.last_frame_at, 1),
        "reconnects": c.reconnects,
        "last_error": c.last_error,
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    with scratch() as s:
        srv = RedisServer(s.kind, s.srv.binary, s.root / "aof", appendonly=True)
        srv.start()
        paths: dict[str, Path] = {}
        collectors = []
        for host in HOSTS:
            claude = s.root / f"claude-{host}"
            (claude / "projects").mkdir(parents=True)
            (claude / "sessions").mkdir()
            paths[host] = transcript(claude, SIDS[host])
            paths[host].write_bytes(user_line(SIDS[host], f"{host}-start"))
            collectors.append(
                CollectorProc(
                    redis_url=srv.url,
                    namespace=NS,
                    claude_dir=claude,
                    host_id=host,
                    env={"RELAYBUS_REDIS_SOCKET_TIMEOUT_S": "1"},
                ).start()
            )
        env = {"RELAYBUS_RATE_LIMIT_PER_S": "1000", "RELAYBUS_REDIS_SOCKET_TIMEOUT_S": "1"}
        gateways = [
            GatewayProc(redis_url=srv.url, namespace=NS, tokens=TOKEN, env=env).start()
            for _ in range(2)
        ]
        nginx = Nginx(s.root / "nginx", [g.port for g in gateways])
        nginx.start()
        entries = [f"ws://127.0.0.1:{nginx.port}/ws"] + [g.ws for g in gateways]
        stop_writing, stop_clients = asyncio.Event(), asyncio.Event()
        written: dict[str, list[str]] = {h: [] for h in HOSTS}
        clients = [Client(f"c{i}", stall=i % 10 == 9) for i in range(args.clients)]
        junk: Counter[str] = Counter()
        tasks = [asyncio.create_task(run_client(c, entries, stop_clients)) for c in clients]
        tasks.append(asyncio.create_task(garbage_client(entries, stop_clients, junk)))
        await asyncio.sleep(2)
        tasks += [
            asyncio.create_task(writer(h, paths[h], args.rate, stop_writing, written[h]))
            for h in HOSTS
        ]
        chaos = Chaos(srv, collectors, gateways, nginx, rng)
        started = time.monotonic()
        try:
            while time.monotonic() - started < args.minutes * 60:
                await asyncio.sleep(rng.uniform(0.5, 1.5) * args.interval_s)
                await chaos.hit()
            stop_writing.set()
            ended = time.monotonic()
            wanted = {t for lines in written.values() for t in lines}
            pending = list(clients)
            while pending and time.monotonic() - ended < args.settle_s:
                for c in list(pending):
                    if wanted <= {t for _, t in c.texts}:
                        c.caught_up_s = time.monotonic() - ended
                        pending.remove(c)
                await asyncio.sleep(0.25)
        finally:
            stop_writing.set()
            stop_clients.set()
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            nginx.stop()
            for g in gateways:
                g.kill()
            for cp in collectors:
                cp.stop()
        keys = Keys(NS)
        log_seq: dict[str, list[int]] = {}
        with redis.Redis(port=srv.port) as r:
            for eid, fields in r.xrange(keys.log):
                text = line_text(orjson.loads(fields[b"f"]))
                if text is not None:
                    log_seq.setdefault(text, []).append(int(eid.split(b"-")[0]))
        srv.stop()
    every = [t for lines in written.values() for t in lines]
    result = check(clients, written, log_seq)
    catch_up = [c.caught_up_s for c in clients if c.caught_up_s is not None]
    return {
        "not_caught_up": [diagnose(c, written, log_seq) for c in clients if c.caught_up_s is None],
        "minutes": args.minutes,
        "clients": args.clients,
        "lines_written": len(every),
        "lines_checked": len(every) * len(clients),
        "redis_log": {
            "missing": sum(1 for t in every if t not in log_seq),
            "duplicated": sum(len(v) - 1 for v in log_seq.values() if len(v) > 1),
        },
        "clients_result": result,
        "clients_not_caught_up": len(clients) - len(catch_up),
        "gaps_announced": sum(len(c.gaps) for c in clients),
        "gap_reasons": dict(Counter(g[2] for c in clients for g in c.gaps)),
        "worst_catch_up_s": round(max(catch_up), 2) if catch_up else None,
        "reconnects": sum(c.reconnects for c in clients),
        "kills_and_stops": dict(chaos.done),
        "garbage_frames": dict(junk),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--rate", type=float, default=40, help="lines/s per host")
    ap.add_argument("--interval-s", type=float, default=4, help="mean time between hits")
    ap.add_argument("--settle-s", type=float, default=60, help="catch-up allowed at the end")
    ap.add_argument("--seed", type=int, default=16)
    args = ap.parse_args()
    result = header("chaos", "redis", load=True) | asyncio.run(main_async(args))
    result["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    write_result(OUT, result)
    bad = result["clients_result"]
    if bad["lost"] or bad["duplicated"] or bad["out_of_order"] or any(result["redis_log"].values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
