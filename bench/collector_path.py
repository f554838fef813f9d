"""The collector's path from an inotify wake-up to the append's write, step by step, A/B.

Runs a real ``python -m relaybus.collector`` of ``--base`` (a git ref, exported) and of the
working tree, round after round, on a private Redis; ``--lines`` lines at 100 lines/s, one
line per wake-up. A ``sitecustomize`` put first on the collector's ``PYTHONPATH`` wraps a
few of its functions (nothing in relaybus is changed) to stamp ``perf_counter_ns`` at each
step of a line: the inotify read, the hand-off to the engine task, the file check, the
lines read, the projection and plan, and the request written to the socket. Prints the
p50 of each step and of the whole path per run, and the collector's CPU per line (/proc).
Usage: ``python bench/collector_path.py [--base main] [--rounds 2] [--lines 600]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rig.procs import cpu_s
from rig.trees import export

from relaybus.shared.store.keys import Keys
from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import transcript, user_line
from tests.support.servers import RedisServer, running_server

STEPS = ["wake", "woken", "engine", "check", "read", "plan0", "plan1", "write"]

#: Wraps the collector's functions to stamp each line's steps; dumps them at exit.
STEP_SITE = """
import atexit, json, os, time
_out = os.environ.get("RELAYBUS_BENCH_STEPS")
if _out:
    _rows, _cur, _pc = [], {}, time.perf_counter_ns

    def _mark(name):
        if _cur and name not in _cur:
            _cur[name] = _pc()

    def _wrap(cls, attr, before=None, after=None, is_async=False):
        orig = getattr(cls, attr)
        if is_async:
            async def f(*a, **kw):
                before and before()
                out = await orig(*a, **kw)
                after and after()
                return out
        else:
            def f(*a, **kw):
                before and before()
                out = orig(*a, **kw)
                after and after()
                return out
        setattr(cls, attr, f)

    def _install():
        import asyncio.selector_events as se
        from relaybus.collector import inotify, projector, tailer, wake, watch_inotify

        def start():
            _cur.clear()
            _cur["wake"] = _pc()

        _wrap(inotify.Inotify, "read", before=start)
        _wrap(watch_inotify._Watches, "on_readable", after=lambda: _mark("woken"))
        _wrap(wake.Wake, "take", before=lambda: _mark("engine"))
        _wrap(tailer.FileTail, "check", before=lambda: _mark("check"))
        _wrap(tailer.FileTail, "read", after=lambda: _mark("read"))
        _wrap(projector.Projector, "plan_batch", before=lambda: _mark("plan0"),
              after=lambda: _mark("plan1"))
        write = se._SelectorSocketTransport.write

        def stamped(self, data):
            if _cur and len(data) > 500:
                _cur["write"] = _pc()
                _rows.append(dict(_cur))
                _cur.clear()
            return write(self, data)

        se._SelectorSocketTransport.write = stamped

    def _dump():
        with open(_out, "w") as f:
            json.dump(_rows, f)

    _install()
    atexit.register(_dump)
"""


def run(srv: RedisServer, root: Path, tag: str, env: dict[str, str], lines: int) -> dict[str, Any]:
    claude = root / tag / "claude"
    (claude / "projects").mkdir(parents=True)
    (claude / "sessions").mkdir()
    steps = root / tag / "steps.json"
    proc = CollectorProc(
        redis_url=srv.url,
        namespace=tag,
        claude_dir=claude,
        host_id="bench",
        env={**env, "RELAYBUS_BENCH_STEPS": str(steps)},
    )
    proc.start()
    client = srv.client()
    try:
        sid = "bench-path"
        path = transcript(claude, sid)
        path.write_bytes(user_line(sid, "warm-up"))
        time.sleep(1.0)
        cpu0 = cpu_s(proc.pid)
        start = time.perf_counter()
        with open(path, "ab", buffering=0) as f:
            for i in range(lines):
                delay = start + i / 100 - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                f.write(user_line(sid, f"line-{i}"))
        field = path.relative_to(claude).as_posix()
        size = path.stat().st_size
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            v = client.hget(Keys(tag).offsets("bench"), field)
            if isinstance(v, bytes) and int(v.split(b":")[0]) >= size:
                break
            time.sleep(0.005)
        cpu = cpu_s(proc.pid) - cpu0
    finally:
        proc.stop()
        client.close()
    rows = [r for r in json.loads(steps.read_text()) if all(k in r for k in STEPS)]
    rows = rows[len(rows) // 10 :]  # the first lines warm the caches up
    out: dict[str, Any] = {
        f"{a}->{b}_us": round(statistics.median((r[b] - r[a]) / 1000 for r in rows))
        for a, b in itertools.pairwise(STEPS)
    }
    out["wake->write_us"] = round(statistics.median((r["write"] - r["wake"]) / 1000 for r in rows))
    out["lines_stamped"] = len(rows)
    out["cpu_us_per_line"] = round(cpu / lines * 1e6, 1)
    out["load_1m"] = round(os.getloadavg()[0], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="main")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--lines", type=int, default=600)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="collector-path-") as tmp:
        root = Path(tmp)
        site = root / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(STEP_SITE)
        commit = export(args.base, root / "base")
        variants = {
            f"base {commit}": {"PYTHONPATH": f"{site}:{root / 'base'}"},
            "new": {"PYTHONPATH": f"{site}:{os.environ.get('PYTHONPATH', '')}"},
        }
        with running_server(root / "srv") as srv:
            for rnd in range(args.rounds):
                for i, (name, env) in enumerate(variants.items()):
                    row = run(srv, root, f"r{rnd}v{i}", env, args.lines)
                    print(json.dumps({"variant": name, "round": rnd, **row}), flush=True)


if __name__ == "__main__":
    main()
