"""The gateway's background tasks: supervised while they run, cancelled reliably at the end.

The policy is the collector's (:func:`relaybus.collector.service.supervise`): a task that
crashes is logged, counted in ``task_crashes_total{task}`` and restarted after a jittered
exponential delay, until ``stop`` is set. Written here until ``shared/aio.py`` holds one
copy for both sides.

redis-py (8.x, on Python 3.11) can swallow a cancellation that lands while a read is
inside its socket-timeout context: the command returns normally and the loop around
it goes on (reproduced with XREAD BLOCK in a cancel loop). A single ``cancel()`` then
never ends the task, and a shutdown that awaits it hangs: :func:`cancel_and_wait`
re-cancels until it is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable

from prometheus_client import Counter

log = logging.getLogger(__name__)


class Backoff:
    """Jittered exponential delays for restarting."""

    def __init__(self, first_s: float = 0.05, max_s: float = 5.0) -> None:
        self.first_s, self.max_s, self.n = first_s, max_s, 0

    def next(self) -> float:
        delay = min(self.max_s, self.first_s * 2**self.n)
        self.n += 1
        return float(delay * random.uniform(0.5, 1.0))


async def sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def supervise(
    name: str,
    factory: Callable[[], Awaitable[None]],
    stop: asyncio.Event,
    crashes: Counter,
) -> None:
    """Run a task until it returns or ``stop``; a crash is logged, counted and restarted."""
    backoff = Backoff(0.5, 30.0)
    while not stop.is_set():
        try:
            await factory()
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise asyncio.CancelledError from exc  # a cancel redis-py turned into an error
            crashes.labels(name).inc()
            delay = backoff.next()
            log.exception("task %s crashed; restarting in %.1f s", name, delay)
            await sleep_unless(stop, delay)


async def cancel_and_wait(
    task: asyncio.Task[None], *, step_s: float = 0.5, tries: int = 40
) -> None:
    """Cancel ``task`` (again every ``step_s`` while it keeps running) and wait for it."""
    for _ in range(tries):
        if task.done():
            break
        task.cancel()
        await asyncio.wait({task}, timeout=step_s)
    if not task.done():
        log.error("task %s ignored %d cancellations", task.get_name(), tries)
        return
    if not task.cancelled() and task.exception() is not None:
        log.error("task %s failed", task.get_name(), exc_info=task.exception())
