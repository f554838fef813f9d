"""The gateway's background tasks, supervised while they run.

The policy is the collector's (:func:`relaybus.collector.service.supervise`): a task that
crashes is logged, counted in ``task_crashes_total{task}`` and restarted after a jittered
exponential delay, until ``stop`` is set. Stopping them reliably is
:func:`relaybus.shared.aio.cancel_and_wait`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from prometheus_client import Counter

from relaybus.shared.aio import Backoff, reraise_if_cancelling, sleep_unless

log = logging.getLogger(__name__)


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
            reraise_if_cancelling(exc)  # a cancel redis-py turned into an error
            crashes.labels(name).inc()
            delay = backoff.next()
            log.exception("task %s crashed; restarting in %.1f s", name, delay)
            await sleep_unless(stop, delay)
