"""Turn state of one session: is Claude working, idle, or waiting for the user?

A pure state machine. The live-process file's ``status`` wins while one reports it;
otherwise the transcript drives it (the projection's ``turn`` per line), with a long
backstop that turns a silent ``working`` into ``idle``. Consecutive duplicates are never
emitted.
"""

from __future__ import annotations

from dataclasses import dataclass

WORKING = "working"
IDLE = "idle"
WAITING = "waiting"

#: live-process file ``status`` -> turn state; other values are ignored (transcript decides).
LIVE_STATUS = {"busy": WORKING, "working": WORKING, "idle": IDLE, "waiting": WAITING}


@dataclass(frozen=True, slots=True)
class TurnChange:
    state: str
    since: int
    waiting_for: str | None = None


@dataclass(slots=True)
class TurnTracker:
    state: str | None = None
    since: int = 0
    waiting_for: str | None = None
    live_status: bool = False
    last_activity_ms: int = 0

    def on_line(self, turn: str | None, ts_ms: int) -> TurnChange | None:
        """A transcript line at ``ts_ms``; ``turn`` is the projection's verdict for it."""
        self.last_activity_ms = max(self.last_activity_ms, ts_ms)
        if turn is None or self.live_status:
            return None
        return self._set(turn, ts_ms, None)

    def on_prompt(self, now_ms: int) -> TurnChange | None:
        """A prompt was sent through relaybus: the turn starts now."""
        self.last_activity_ms = max(self.last_activity_ms, now_ms)
        return None if self.live_status else self._set(WORKING, now_ms, None)

    def on_live(self, status: str | None, waiting_for: str | None, now_ms: int) -> TurnChange | None:
        """The live-process file's status (``None`` when it reports none or is gone)."""
        mapped = LIVE_STATUS.get(status or "")
        if mapped is None:
            self.live_status = False
            return None
        self.live_status = True
        return self._set(mapped, now_ms, waiting_for if mapped == WAITING else None)

    def backstop_due(self, now_ms: int, backstop_ms: int) -> bool:
        """``working`` with no transcript activity for ``backstop_ms`` (and no live status)."""
        return (
            self.state == WORKING
            and not self.live_status
            and now_ms - max(self.since, self.last_activity_ms) >= backstop_ms
        )

    def on_tick(self, now_ms: int, backstop_ms: int) -> TurnChange | None:
        """The backstop: a silent ``working`` turn becomes ``idle``."""
        if not self.backstop_due(now_ms, backstop_ms):
            return None
        return self._set(IDLE, now_ms, None)

    def on_approval(self, waiting_for: str | None, now_ms: int) -> TurnChange | None:
        """A permission request is held (``waiting_for``), or none is any more (working again)."""
        if self.live_status:
            return None
        if waiting_for:
            return self._set(WAITING, now_ms, waiting_for)
        return self._set(WORKING, now_ms, None) if self.state == WAITING else None

    def on_end(self, now_ms: int) -> TurnChange | None:
        """The session ended: whatever it was doing, it is not working any more."""
        self.live_status = False
        if self.state in (None, IDLE):
            return None
        return self._set(IDLE, now_ms, None)

    def _set(self, state: str, since: int, waiting_for: str | None) -> TurnChange | None:
        if state == self.state and waiting_for == self.waiting_for:
            return None
        self.state, self.since, self.waiting_for = state, since, waiting_for
        return TurnChange(state, since, waiting_for)
