"""The session states the engine works from, loaded from the session hashes on first use.

Owned by the engine (``relaybus.collector.engine``): a state is cached only after Redis
accepted the batch that produced it; after a connection error the cache is dropped and
reloaded from the hashes, so a batch whose reply was lost is neither repeated nor
forgotten.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import redis.asyncio as aioredis

from relaybus.collector.session_state import SessionState
from relaybus.shared.store.keys import Keys
from relaybus.shared.store.session_row import Field, SessionRow


class SessionCache:
    def __init__(self, client: aioredis.Redis, keys: Keys, host: str) -> None:
        self._client = client
        self._keys = keys
        self._host = host
        self._states: dict[str, SessionState] = {}

    async def get(self, sid: str) -> SessionState:
        """The cached state of a session, loaded from its hash on first use."""
        st = self._states.get(sid)
        if st is None:
            # bytes keys and values: the collector's client does not decode responses
            h: Any = await self._client.hgetall(self._keys.session(sid))
            st = SessionState.from_row(sid, SessionRow.parse(h)) if h else SessionState(sid)
            self._states[sid] = st
        return st

    def put(self, state: SessionState) -> None:
        self._states[state.sid] = state

    def drop(self, sid: str) -> None:
        """Forget one session: reloaded from its hash when needed again."""
        self._states.pop(sid, None)

    def clear(self) -> None:
        """Forget every session (after a connection error, the hashes are the truth)."""
        self._states.clear()

    def states(self) -> Iterator[SessionState]:
        """The cached states (a snapshot: the cache may change while it is iterated)."""
        return iter(list(self._states.values()))

    async def load_live(self) -> int:
        """Cache this host's sessions the hashes say are live (to end them when due)."""
        members = await self._client.zrange(self._keys.sessions, 0, -1)
        sids = [m.decode() if isinstance(m, bytes) else str(m) for m in members]
        pipe = self._client.pipeline(transaction=False)
        for sid in sids:
            pipe.hmget(self._keys.session(sid), [Field.HOST, Field.LIVE])
        found = 0
        for sid, (host, live) in zip(sids, await pipe.execute(), strict=True):
            if host == self._host.encode() and live == b"1" and sid not in self._states:
                await self.get(sid)
                found += 1
        return found
