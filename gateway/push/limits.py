"""A per-gateway rate limit for ``/push/*`` (issue 22.11): token buckets in a bounded table."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

#: Buckets kept; the least recently used is dropped first (it only starts full again).
MAX_KEYS = 4096


class RateLimiter:
    """``per_min`` requests a minute per key, in bursts of up to ``per_min``."""

    def __init__(
        self,
        per_min: int,
        *,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._capacity = float(per_min)
        self._per_s = per_min / 60.0
        self._max_keys = max_keys
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, key: str) -> int:
        """0 if ``key`` may go on (one request counted), else the seconds to wait (``Retry-After``)."""
        now = self._clock()
        level, then = self._buckets.pop(key, (self._capacity, now))
        level = min(self._capacity, level + (now - then) * self._per_s)
        wait = 0
        if level >= 1.0:
            level -= 1.0
        else:
            wait = max(1, math.ceil((1.0 - level) / self._per_s))
        self._buckets[key] = (level, now)
        while len(self._buckets) > self._max_keys:
            self._buckets.popitem(last=False)
        return wait
