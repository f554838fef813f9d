"""Where each session runs (host, cwd): what a scoped connection's filter looks up.

The log reader calls :meth:`Places.ensure` before each dispatch: ``session_started`` and
``session_updated`` frames teach a session's place, and a session first seen in any other
frame is read from its hash (or its reservation) with one pipelined round trip, so the
synchronous fan-out finds every session it offers. A session whose place is unknown is
outside every restricted scope (never shown by mistake). The table is bounded.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from typing import Any

import orjson
import redis.asyncio as aioredis

from relaybus.shared.store.command_streams import session_route
from relaybus.shared.store.keys import Keys
from relaybus.shared.store.session_row import Field
from relaybus.shared.wire import frames as wire_frames
from relaybus.shared.wire.scope import Scope

#: Sessions remembered; past it the oldest half is forgotten (and read again when seen).
MAX_PLACES = 100_000
_TEACHING = frozenset({wire_frames.SESSION_STARTED, wire_frames.SESSION_UPDATED})


class Places:
    """sid -> (host, cwd), learned from the log and read from Redis on first sight."""

    def __init__(self) -> None:
        self._by_sid: dict[str, tuple[str, str]] = {}
        #: Per scope in use, the known sessions inside it, kept current by :meth:`put`: the
        #: per-offer filter is ``sid in inside`` on a plain set, the cheapest check Python
        #: has (bench/scope_bench.py). As many as distinct member scopes (tokens).
        self._inside: dict[Scope, set[str]] = {}

    def check(self, scope: Scope) -> AbstractSet[str]:
        """The sessions inside ``scope`` (live: sessions learnt later are added), shared by
        every connection with that scope; a session not in it is outside or unknown."""
        inside = self._inside.get(scope)
        if inside is None:
            inside = self._inside[scope] = {
                sid for sid, (host, cwd) in self._by_sid.items() if scope.allows(host, cwd)
            }
        return inside

    def get(self, sid: str) -> tuple[str, str] | None:
        return self._by_sid.get(sid)

    def allows(self, scope: Scope, sid: str) -> bool:
        """True when ``sid`` is known and inside ``scope``."""
        place = self._by_sid.get(sid)
        return place is not None and scope.allows(place[0], place[1])

    def put(self, sid: str, host: str, cwd: str) -> None:
        if self._by_sid.get(sid) == (host, cwd):
            return
        if sid not in self._by_sid and len(self._by_sid) >= MAX_PLACES:
            for old in list(self._by_sid)[: MAX_PLACES // 2]:
                del self._by_sid[old]
                for inside in self._inside.values():
                    inside.discard(old)
        self._by_sid[sid] = (host, cwd)
        for scope, inside in self._inside.items():
            if scope.allows(host, cwd):
                inside.add(sid)
            else:
                inside.discard(sid)

    def learn(self, kind: str, frame: bytes) -> None:
        """Take host and cwd from a ``session_started`` / ``session_updated`` frame."""
        if kind not in _TEACHING:
            return
        try:
            obj: Any = orjson.loads(frame)
        except orjson.JSONDecodeError:
            return
        if not isinstance(obj, dict):
            return
        info = obj.get("session") if kind == wire_frames.SESSION_UPDATED else obj
        sid = obj.get("sessionId")
        if not (isinstance(info, dict) and isinstance(sid, str)):
            return
        host, cwd = info.get("host"), info.get("cwd")
        known = self._by_sid.get(sid)
        if not isinstance(host, str):
            host = known[0] if known else None
        if not isinstance(cwd, str):
            cwd = known[1] if known else ""
        if isinstance(host, str):
            self.put(sid, host, cwd or "")

    async def ensure(
        self, client: aioredis.Redis, keys: Keys, seen: Iterable[tuple[str, str, bytes]]
    ) -> None:
        """Learn from ``(sid, kind, frame)`` of a batch, then read the sessions still unknown."""
        unknown: list[str] = []
        for sid, kind, frame in seen:
            self.learn(kind, frame)
            if sid and sid not in self._by_sid and sid not in unknown:
                unknown.append(sid)
        if not unknown:
            return
        pipe = client.pipeline(transaction=False)
        for sid in unknown:
            pipe.hmget(keys.session(sid), [Field.HOST, Field.CWD])
        rows = await pipe.execute()
        for sid, (host, cwd) in zip(unknown, rows, strict=True):
            if isinstance(host, bytes):
                self.put(sid, host.decode(), cwd.decode() if isinstance(cwd, bytes) else "")
            elif (route := await session_route(client, keys, sid)) is not None:
                self.put(sid, *route)  # a reserved new conversation
