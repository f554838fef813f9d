"""supervise(): a crashing task is restarted with a growing delay, which starts over once the
task ran healthily for HEALTHY_RUN_S (time injected: no long sleeps)."""

from __future__ import annotations

import asyncio

from relaybus.shared.aio import HEALTHY_RUN_S, Backoff, supervise


class CrashOnDemand:
    """A real task: each run announces itself and raises when told to."""

    def __init__(self) -> None:
        self.running = asyncio.Event()
        self.crash = asyncio.Event()
        self.runs = 0

    async def __call__(self) -> None:
        self.runs += 1
        self.running.set()
        await self.crash.wait()
        self.crash.clear()
        raise RuntimeError(f"crash {self.runs}")

    async def crash_after(self, clock: list[float], ran_s: float) -> None:
        await asyncio.wait_for(self.running.wait(), 5)
        clock[0] += ran_s
        self.running.clear()
        self.crash.set()
        await asyncio.wait_for(self.running.wait(), 5)  # restarted


async def test_backoff_starts_over_after_a_healthy_run() -> None:
    task, stop, clock = CrashOnDemand(), asyncio.Event(), [0.0]
    backoff = Backoff(first_s=0.001, max_s=1.0)
    crashes: list[str] = []
    runner = asyncio.create_task(
        supervise("t", task, stop, crashes.append, backoff=backoff, clock=lambda: clock[0])
    )
    for _ in range(4):  # quick crashes: each waits longer than the last
        await task.crash_after(clock, 1.0)
    assert backoff.n == 4
    await task.crash_after(clock, HEALTHY_RUN_S - 1)  # not long enough to count as healthy
    assert backoff.n == 5
    await task.crash_after(clock, HEALTHY_RUN_S)  # healthy: the delay starts over
    assert backoff.n == 1
    assert crashes == ["t"] * 6
    stop.set()
    runner.cancel()
    await asyncio.gather(runner, return_exceptions=True)
