"""The turn state machine: live-process status first, else the transcript, plus the backstop."""

from __future__ import annotations

from collector.turns import TurnChange, TurnTracker


def test_transcript_drives_turns_without_duplicates() -> None:
    """working on a user line, idle on a terminal line; repeats emit nothing."""
    t = TurnTracker()
    assert t.on_line("working", 10) == TurnChange("working", 10)
    assert t.on_line("working", 11) is None
    assert t.on_line(None, 12) is None
    assert t.on_line("idle", 13) == TurnChange("idle", 13)
    assert t.on_line("idle", 14) is None


def test_live_status_wins_over_the_transcript() -> None:
    """While the process file reports a status, transcript signals are ignored."""
    t = TurnTracker()
    assert t.on_live("busy", None, 5) == TurnChange("working", 5)
    assert t.on_line("idle", 6) is None
    assert t.on_live("waiting", "permission", 7) == TurnChange("waiting", 7, "permission")
    assert t.on_live("waiting", "permission", 8) is None
    assert t.on_live("idle", None, 9) == TurnChange("idle", 9)
    assert t.on_live(None, None, 10) is None  # status gone: back to the transcript
    assert t.on_line("working", 11) == TurnChange("working", 11)


def test_unknown_live_status_falls_back_to_the_transcript() -> None:
    """A status value we do not know does not override the transcript."""
    t = TurnTracker()
    assert t.on_live("compacting", None, 1) is None
    assert t.on_line("working", 2) == TurnChange("working", 2)


def test_backstop_turns_a_silent_working_idle() -> None:
    """working with no activity for the backstop becomes idle, once; activity postpones it."""
    t = TurnTracker()
    t.on_line("working", 1000)
    assert t.on_tick(1000 + 119_000, 120_000) is None
    t.on_line(None, 100_000)  # a line without a signal (e.g. a tool result) is activity
    assert t.on_tick(200_000, 120_000) is None
    assert t.on_tick(220_000, 120_000) == TurnChange("idle", 220_000)
    assert t.on_tick(400_000, 120_000) is None


def test_no_backstop_while_the_process_says_busy() -> None:
    """A live process reporting busy is trusted over the backstop."""
    t = TurnTracker()
    t.on_live("busy", None, 0)
    assert t.on_tick(10_000_000, 120_000) is None


def test_end_closes_an_open_turn() -> None:
    """A session that ends while working goes idle first; an idle one emits nothing."""
    t = TurnTracker()
    t.on_line("working", 1)
    assert t.on_end(5) == TurnChange("idle", 5)
    assert t.on_end(6) is None
