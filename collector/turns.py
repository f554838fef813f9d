"""Turn state of one session: is Claude working, idle, or waiting for the user?

A pure state machine over four inputs, recomputed after each one so that a change is
emitted once and consecutive duplicates never are:

* a permission request relaybus holds (``waiting`` with what it waits for) wins over all;
* the live-process file's ``status``: ``busy`` and ``waiting`` are trusted at once, but its
  ``idle`` only when it is not early — Claude Code 2.1.332 says ``idle`` 5–25 ms before
  ``busy`` when a run starts and, interactively, 60–140 ms before a turn's last transcript
  lines. So ``idle`` counts only after ``busy`` was seen since the last prompt, never while
  relaybus's own headless run is active, and only once the transcript ended the turn too
  (or the live file kept saying ``idle`` for :data:`LIVE_IDLE_GRACE_MS`) — a ``busy`` opens a
  turn for the transcript to end, since the interactive CLI also flips ``busy`` → ``idle`` →
  ``busy`` before a typed prompt's line and between tool calls;
* the transcript's turn signals (the projection's ``turn`` per line) — except an ``idle``
  between a prompt sent through relaybus and that prompt's own line: it ends an earlier
  turn (on resume after a crash the CLI first writes a repair answer, ``<synthetic>`` "No
  response requested.", to the prompt the crash left unanswered), not the new one;
* a long backstop that turns a silent ``working`` into ``idle``; any main-session assistant
  or tool-result line after it brings ``working`` back.

Only ``state``, ``since``, ``waiting_for`` and ``last_activity_ms`` are kept in the session
hash; the inputs live in memory (a restarted collector learns them again from the next
live-file scan and transcript lines).
"""

from __future__ import annotations

from dataclasses import dataclass

WORKING = "working"
IDLE = "idle"
WAITING = "waiting"

#: live-process file ``status`` -> turn state; other values are ignored (transcript decides).
LIVE_STATUS = {"busy": WORKING, "working": WORKING, "idle": IDLE, "waiting": WAITING}
#: The live file's ``idle`` ends a turn the transcript has not ended after this long.
LIVE_IDLE_GRACE_MS = 2_000


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
    last_activity_ms: int = 0
    #: The live file's status mapped to a turn state (None: no file, or no known status).
    live: str | None = None
    live_waiting_for: str | None = None
    #: When the live file's current run of ``idle`` began.
    live_idle_since: int | None = None
    #: ``busy`` (or ``waiting``) seen in the live file since the last prompt.
    busy_seen: bool = True
    #: The transcript's last turn signal.
    transcript: str | None = None
    #: Relaybus's own headless run of this session is running.
    run_active: bool = False
    #: What a permission request relaybus holds waits for.
    approval: str | None = None
    #: A client answered the request: the live file's ``waiting`` (Claude Code's own dialog
    #: for the same request, closing — read before or, under load, after the answer) is over
    #: until the file says anything else.
    live_waiting_stale: bool = False
    #: The backstop ended the turn; a main-session assistant/tool-result line revives it.
    backstopped: bool = False
    #: A prompt was sent through relaybus and its line is not in the transcript yet.
    prompt_due: bool = False

    def copy(self) -> TurnTracker:
        """An independent copy (``copy.copy`` of a slotted dataclass costs several times more)."""
        return TurnTracker(
            self.state,
            self.since,
            self.waiting_for,
            self.last_activity_ms,
            self.live,
            self.live_waiting_for,
            self.live_idle_since,
            self.busy_seen,
            self.transcript,
            self.run_active,
            self.approval,
            self.live_waiting_stale,
            self.backstopped,
            self.prompt_due,
        )

    # --- inputs ---------------------------------------------------------------------------

    def on_line(self, turn: str | None, ts_ms: int, *, activity: bool = False) -> TurnChange | None:
        """A main-session transcript line at ``ts_ms``; ``turn`` is its turn signal.

        ``activity``: the line is an assistant or tool-result line (Claude is at work).
        """
        self.last_activity_ms = max(self.last_activity_ms, ts_ms)
        if turn == IDLE and self.prompt_due:
            turn = None  # an earlier turn's end (a repair line), written before the prompt's
        if turn == WORKING:
            self.prompt_due = False
            self.busy_seen = self.live in (WORKING, WAITING) or (
                self.busy_seen and self.live is None
            )
            self.backstopped = False
        if turn is None and activity and self.backstopped:
            turn = WORKING
        if turn is not None:
            self.transcript = turn
            if turn == IDLE:
                self.backstopped = False
        return self._update(ts_ms)

    def on_activity(self, ts_ms: int) -> None:
        """A line that tells nothing about the turn (bookkeeping, a sub-agent's line)."""
        self.last_activity_ms = max(self.last_activity_ms, ts_ms)

    def on_prompt(self, now_ms: int) -> TurnChange | None:
        """A prompt was sent through relaybus: the turn starts now."""
        self.last_activity_ms = max(self.last_activity_ms, now_ms)
        self.transcript = WORKING
        self.busy_seen = False
        self.backstopped = False
        self.prompt_due = True
        return self._update(now_ms)

    def on_run(self, active: bool, now_ms: int) -> TurnChange | None:
        """Relaybus's headless run started, or ended (its process is gone: the turn is over)."""
        self.run_active = active
        if not active:
            self.prompt_due = False
            self.live = None
            self.live_idle_since = None
            if self.transcript == WORKING:
                self.transcript = IDLE
        return self._update(now_ms)

    def on_live(
        self, status: str | None, waiting_for: str | None, now_ms: int
    ) -> TurnChange | None:
        """The live-process file's status (``None`` when it reports none or is gone)."""
        mapped = LIVE_STATUS.get(status or "")
        if mapped == IDLE:
            if self.live != IDLE:
                self.live_idle_since = now_ms
        else:
            self.live_idle_since = None
        if mapped in (WORKING, WAITING):
            self.busy_seen = True
            self.backstopped = False
            # A turn began (typed in the terminal, its lines not written yet): only the
            # transcript ends it, or the live file's idle held for the grace.
        if mapped == WORKING:
            self.transcript = WORKING
        if mapped != WAITING:
            self.live_waiting_stale = False
        self.live = mapped
        self.live_waiting_for = waiting_for if mapped == WAITING else None
        return self._update(now_ms)

    def on_approval(
        self, waiting_for: str | None, now_ms: int, *, answered: bool = False
    ) -> TurnChange | None:
        """A permission request is held (``waiting_for``), or none is any more (``answered``:
        a client decided it, so the live file's ``waiting`` for it is over — also when that
        ``waiting`` is read only after the decision, until the file says anything else)."""
        if not waiting_for and self.approval and answered:
            self.live_waiting_stale = True
        self.approval = waiting_for or None
        return self._update(now_ms)

    def backstop_due(self, now_ms: int, backstop_ms: int) -> bool:
        """``working`` with no transcript activity for ``backstop_ms``, nothing vouching for it."""
        return (
            self.state == WORKING
            and self.live != WORKING
            and not self.run_active
            and now_ms - max(self.since, self.last_activity_ms) >= backstop_ms
        )

    def live_idle_due(self, now_ms: int) -> bool:
        """The live file's ``idle`` has waited long enough for the transcript to agree."""
        return (
            self.state == WORKING
            and self.live_idle_since is not None
            and now_ms - self.live_idle_since >= LIVE_IDLE_GRACE_MS
        )

    def on_tick(self, now_ms: int, backstop_ms: int) -> TurnChange | None:
        """Timers: the backstop, and a live ``idle`` the transcript never confirmed."""
        if self.backstop_due(now_ms, backstop_ms):
            self.transcript = IDLE
            self.backstopped = True
        return self._update(now_ms)

    def on_end(self, now_ms: int) -> TurnChange | None:
        """The session ended: whatever it was doing, it is not working any more."""
        self.live = self.live_waiting_for = self.live_idle_since = self.approval = None
        self.live_waiting_stale = False
        self.run_active = False
        self.backstopped = False
        self.prompt_due = False
        self.transcript = IDLE if self.state not in (None, IDLE) else self.transcript
        return self._update(now_ms)

    # --- the state they make ------------------------------------------------------------------

    def _desired(self, now_ms: int) -> tuple[str | None, str | None]:
        if self.approval:
            return WAITING, self.approval
        if self.live == WAITING and not self.live_waiting_stale:
            return WAITING, self.live_waiting_for
        if self.live in (WORKING, WAITING):
            return WORKING, None
        tx = self.transcript
        if self.live == IDLE and self.busy_seen and not self.run_active:
            held = self.live_idle_since is not None and (
                now_ms - self.live_idle_since >= LIVE_IDLE_GRACE_MS
            )
            if tx != WORKING or held:
                return IDLE, None
        if tx is None:  # no signal yet: keep the state, but nothing holds a ``waiting`` any more
            return (WORKING, None) if self.state == WAITING else (self.state, None)
        return tx, None

    def settle(self, now_ms: int) -> TurnChange | None:
        """The change still due after the last one (``waiting`` right after its opening
        ``working``); callers ask once more after any change."""
        return self._update(now_ms)

    def _update(self, now_ms: int) -> TurnChange | None:
        state, waiting_for = self._desired(now_ms)
        if state is None or (state == self.state and waiting_for == self.waiting_for):
            return None
        if state == WAITING and self.state not in (WORKING, WAITING):
            state, waiting_for = WORKING, None  # a turn opens working, even one seen first waiting
        self.state, self.since, self.waiting_for = state, now_ms, waiting_for
        return TurnChange(state, now_ms, waiting_for)
