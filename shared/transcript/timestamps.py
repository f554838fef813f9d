"""Transcript timestamps (RFC 3339, as Claude Code writes them) to epoch milliseconds."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache
from typing import Any


def epoch_ms(value: Any) -> int | None:
    """RFC 3339 -> epoch ms. Claude Code writes ``2026-02-12T16:02:25.227Z``: that form costs a
    cached minute lookup and one ``int``; anything else goes through ``fromisoformat``."""
    if not isinstance(value, str):
        return None
    if len(value) == 24 and value[23] == "Z" and value[19] == "." and value[16] == ":":
        minute = _minute_ms(value[:16])
        millis = value[17:19] + value[20:23]
        if minute is not None and millis.isdigit() and millis.isascii():
            return minute + int(millis)
    return _iso_ms(value)


@lru_cache(maxsize=1024)
def _minute_ms(prefix: str) -> int | None:
    return _iso_ms(prefix)


def _iso_ms(value: str) -> int | None:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)
