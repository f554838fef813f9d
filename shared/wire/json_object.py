"""Parse a JSON object or refuse: what every reader of a stored or received JSON value needs."""

from __future__ import annotations

from typing import Any

import orjson


def json_object(raw: bytes | str | None) -> dict[str, Any] | None:
    """``raw`` parsed if it is a JSON object; ``None`` if absent, malformed or anything else."""
    if raw is None:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
