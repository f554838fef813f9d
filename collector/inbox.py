"""The one way other tasks change session state: changes queued for the engine task.

The engine task owns the session cache and is the collector's only writer of session
state. The command task (turn notices of ``relaybus.collector.drivers.notices``,
``load_history``) and the approvals task put a :class:`Change` into the engine's
:class:`Inbox` and wake it; the engine applies the queued changes, in order, each loop.
A change is dropped only once it applied, so a Redis outage delays it instead of losing
it.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Protocol

from relaybus.collector.session_state import SessionState
from relaybus.shared.store.appendlog import OutEvent

log = logging.getLogger(__name__)

#: Changes waiting for the engine; when full, a new one is refused (and logged).
MAX_CHANGES = 10_000


class SessionWriter(Protocol):
    """What a change may do on the engine task (``relaybus.collector.engine.Engine``)."""

    async def session(self, sid: str) -> SessionState:
        """The session's current state (clone it before changing it)."""

    async def commit(
        self,
        state: SessionState,
        events: list[OutEvent],
        hash_updates: dict[str, str],
        *,
        activity_ms: int | None = None,
    ) -> None:
        """Publish session-level events and hash updates, then make ``state`` current."""

    def keep(self, state: SessionState) -> None:
        """Make ``state`` current without publishing (what changed is known only here)."""

    async def drain_session(self, sid: str) -> None:
        """Publish what is unread in the session's transcripts."""

    async def load_history(self, sid: str) -> int:
        """Publish a registered session's history once; the number of events published."""


class Change(Protocol):
    """One queued change; :meth:`apply` runs on the engine task."""

    async def apply(self, writer: SessionWriter) -> None: ...


class Inbox:
    """The engine's queue of changes from other tasks (bounded: :data:`MAX_CHANGES`)."""

    def __init__(self, wake: Callable[[], None], max_changes: int = MAX_CHANGES) -> None:
        self._wake = wake
        self._max = max_changes
        self._changes: deque[Change] = deque()

    def put(self, change: Change) -> bool:
        """Queue ``change`` and wake the engine; False (logged) when the inbox is full."""
        if len(self._changes) >= self._max:
            log.warning("engine inbox full (%d changes): dropping %r", self._max, change)
            return False
        self._changes.append(change)
        self._wake()
        return True

    async def apply(self, writer: SessionWriter) -> None:
        """On the engine task: apply the queued changes in order (errors propagate)."""
        while self._changes:
            await self._changes[0].apply(writer)
            self._changes.popleft()
