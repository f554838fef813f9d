"""Cancelling tasks reliably.

redis-py (8.x, on Python 3.11) can swallow a cancellation that lands while a read is
inside its socket-timeout context: the command returns normally and the loop around
it goes on (reproduced with XREAD BLOCK in a cancel loop). A single ``cancel()`` then
never ends the task, and a shutdown that awaits it hangs. Re-cancel until it is done.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)


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
