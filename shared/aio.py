"""Clock, backoff, supervision and cancellation helpers both sides share (no Redis, no I/O
of their own).

redis-py (8.x, on Python 3.11) can swallow a cancellation that lands while a read is
inside its socket-timeout context: the command returns normally, or raises a connection
error, and the loop around it goes on (reproduced with XREAD BLOCK in a cancel loop).
Loops that catch connection errors call :func:`reraise_if_cancelling`; owners stop such
tasks with :func:`cancel_and_wait`, which cancels again until the task is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

#: A supervised task that ran this long before it crashed was healthy: restart it after the
#: first delay again instead of after the one its earlier crashes built up (up to 30 s).
HEALTHY_RUN_S = 60.0


def now_ms() -> int:
    """The wall clock in whole milliseconds (what every stamp on the wire uses)."""
    return int(time.time() * 1000)


class Backoff:
    """Jittered exponential delays for retrying: the n-th is ``min(max_s, first_s * 2**n)``
    times a random factor in [0.5, 1]; :meth:`reset` after a success."""

    def __init__(self, first_s: float = 0.05, max_s: float = 5.0) -> None:
        self.first_s, self.max_s, self.n = first_s, max_s, 0

    def next(self) -> float:
        delay = min(self.max_s, self.first_s * 2**self.n)
        self.n += 1
        return float(delay * random.uniform(0.5, 1.0))

    def reset(self) -> None:
        self.n = 0


class Outage:
    """The log of one loop's outages of ``what`` (Redis, a stream): one WARNING when an outage
    starts (with its reason), each retry during it at DEBUG, one INFO when it ends (with how
    long it lasted). :meth:`failed` after each failed attempt returns the next delay of
    ``backoff``; :meth:`ok` after each success resets it."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        backoff: Backoff,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log, self.what, self.backoff, self._clock = logger, what, backoff, clock
        #: ``clock()`` when the current outage started (None: none now)
        self.since: float | None = None
        self._failures = 0

    def failed(self, exc: BaseException) -> float:
        """Log a failed attempt; the seconds to wait before the next one."""
        delay = self.backoff.next()
        reason = f"{type(exc).__name__}: {exc}"
        if self.since is None:
            self.since, self._failures = self._clock(), 1
            self._log.warning("%s unavailable (%s); retrying in %.1fs", self.what, reason, delay)
        else:
            self._failures += 1
            self._log.debug(
                "%s still unavailable (%s); retrying in %.1fs", self.what, reason, delay
            )
        return delay

    def ok(self) -> None:
        """An attempt succeeded: end the outage (if any) and start the backoff over."""
        self.backoff.reset()
        if self.since is not None:
            self._log.info(
                "%s available again after %.1f s (attempts failed: %d)",
                self.what,
                self._clock() - self.since,
                self._failures,
            )
            self.since = None


async def sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``stop`` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def supervise(
    name: str,
    factory: Callable[[], Awaitable[None]],
    stop: asyncio.Event,
    on_crash: Callable[[str], None],
    *,
    backoff: Backoff | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """The one policy for background tasks (collector and gateway): run ``factory()`` until
    it returns or ``stop``; a crash is logged, reported to ``on_crash(name)`` (the
    ``task_crashes_total{task}`` counter) and restarted after a jittered exponential delay,
    which starts over after a run of :data:`HEALTHY_RUN_S` (by ``clock``)."""
    backoff = backoff or Backoff(0.5, 30.0)
    while not stop.is_set():
        started = clock()
        try:
            await factory()
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reraise_if_cancelling(exc)  # a cancel redis-py turned into an error
            on_crash(name)
            if clock() - started >= HEALTHY_RUN_S:
                backoff.reset()
            delay = backoff.next()
            log.exception("task %s crashed; restarting in %.1f s", name, delay)
            await sleep_unless(stop, delay)


def reraise_if_cancelling(exc: BaseException) -> None:
    """Raise ``CancelledError`` (from ``exc``) when the current task is being cancelled:
    redis-py may have turned the cancellation into ``exc``, and swallowing it would make a
    shutdown wait forever."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError from exc


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
