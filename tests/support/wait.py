"""Polling for tests: wait until a condition holds, fail with what was last seen."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, overload

T = TypeVar("T")


@overload
async def wait_for(
    probe: Callable[[], Awaitable[T | None]],
    *,
    timeout_s: float = ...,
    interval_s: float = ...,
    what: str = ...,
) -> T: ...


@overload
async def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout_s: float = ...,
    interval_s: float = ...,
    what: str = ...,
) -> T: ...


# Overloads, not one union parameter: given ``Callable[[], Awaitable[T | None] | T | None]``
# mypy cannot tell which arm an async probe matches and infers T = None.
async def wait_for(
    probe: Callable[[], Awaitable[T | None] | T | None],
    *,
    timeout_s: float = 30.0,
    interval_s: float = 0.05,
    what: str = "condition",
) -> T:
    """Poll ``probe`` (plain or async) until it returns something truthy; that value.
    AssertionError after ``timeout_s``, naming ``what`` and the last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout_s}s waiting for {what} (last: {value!r})"
            )
        await asyncio.sleep(interval_s)


def poll(fn: Callable[[], T | None], timeout_s: float = 30.0, interval_s: float = 0.02) -> T:
    """Blocking :func:`wait_for` for synchronous tests: ``fn``'s first truthy value, or
    TimeoutError with the last one."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval_s)
    raise TimeoutError(f"condition not met in {timeout_s}s (last: {last!r})")
