"""Processes a bench measures: CPU and memory figures from /proc, and worker subprocesses."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any, Self

import orjson

from rig import BENCH, REPO


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_split_s(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of a process so far, apart: a change to the Python side
    of a hot path moves the first; the kernel's socket work is the second."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def status_kib(pid: int, field: str) -> int:
    """A KiB figure of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``, ...); 0 if absent."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def rss_kib(pid: int) -> int:
    return status_kib(pid, "VmRSS")


class Worker:
    """A bench worker subprocess (``script`` with ``args``): wait for READY, then for its
    JSON line."""

    script = BENCH / "gateway_workers.py"

    def __init__(self, *args: str) -> None:
        self.args = [sys.executable, str(self.script), *args]
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, timeout_s: float = 120.0) -> Self:
        self.proc = await asyncio.create_subprocess_exec(
            *self.args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=REPO,
            limit=256 * 1024 * 1024,
        )
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), timeout_s)
        if line.strip() != b"READY":
            raise RuntimeError(f"worker failed: {line!r}")
        return self

    async def result(self, timeout_s: float = 180.0) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), timeout_s)
        await self.proc.wait()
        out: dict[str, Any] = orjson.loads(line)
        return out

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write(b"\n")
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
