"""The turn state machine: live-process status first, else the transcript, plus the backstop."""

from __future__ import annotations

from relaybus.collector.turns import LIVE_IDLE_GRACE_MS, TurnChange, TurnTracker


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


def test_early_live_idle_is_ignored_while_relaybus_runs_the_prompt() -> None:
    """-p says idle 5-25 ms before busy: during relaybus's own run that idle changes nothing."""
    t = TurnTracker(state="idle")
    assert t.on_prompt(100) == TurnChange("working", 100)
    assert t.on_run(True, 100) is None
    assert t.on_live("idle", None, 110) is None
    assert t.on_live("busy", None, 120) is None
    assert t.on_line("working", 130) is None
    assert t.on_line("idle", 200) is None  # the live file still says busy
    assert t.on_live(None, None, 210) == TurnChange("idle", 210)  # file removed at exit
    assert t.on_live("idle", None, 212) is None  # re-created for a few ms
    assert t.on_run(False, 260) is None


def test_stale_live_idle_after_a_prompt_waits_for_busy() -> None:
    """A prompt typed into tmux: the live file's idle from before it is no turn end."""
    t = TurnTracker()
    t.on_live("idle", None, 0)
    assert t.on_prompt(100) == TurnChange("working", 100)
    assert t.on_live("idle", None, 150) is None
    assert t.on_tick(150 + LIVE_IDLE_GRACE_MS * 5, 120_000) is None
    assert t.on_live("busy", None, 20_000) is None


def test_interactive_idle_before_the_last_line_waits_for_it() -> None:
    """Interactive idle comes 60-140 ms before the turn's last line: idle then, once."""
    t = TurnTracker()
    assert t.on_live("busy", None, 0) == TurnChange("working", 0)
    assert t.on_line("working", 10) is None
    assert t.on_live("idle", None, 500) is None
    assert t.on_line(None, 560) is None
    assert t.on_line("idle", 600) == TurnChange("idle", 600)


def test_live_idle_without_a_transcript_end_counts_after_the_grace() -> None:
    """When no line ends the turn, the live file's idle does after LIVE_IDLE_GRACE_MS."""
    t = TurnTracker()
    t.on_live("busy", None, 0)
    t.on_line("working", 10)
    assert t.on_live("idle", None, 500) is None
    assert not t.live_idle_due(500 + LIVE_IDLE_GRACE_MS - 1)
    assert t.live_idle_due(500 + LIVE_IDLE_GRACE_MS)
    assert t.on_tick(500 + LIVE_IDLE_GRACE_MS, 120_000) == TurnChange(
        "idle", 500 + LIVE_IDLE_GRACE_MS
    )


def test_a_held_permission_request_wins_over_the_live_file() -> None:
    """waiting (approve Edit) while relaybus holds a request, whatever the live file says."""
    t = TurnTracker()
    t.on_live("busy", None, 0)
    assert t.on_approval("approve Edit", 10) == TurnChange("waiting", 10, "approve Edit")
    assert t.on_live("waiting", "permission prompt", 20) is None
    assert t.on_live("busy", None, 30) is None
    assert t.on_approval(None, 40) == TurnChange("working", 40)


def test_backstop_then_tool_result_revives_the_turn() -> None:
    """After the backstop, a main-session tool result (activity) brings working back."""
    t = TurnTracker()
    t.on_line("working", 0)
    assert t.on_tick(130_000, 120_000) == TurnChange("idle", 130_000)
    assert t.on_line(None, 140_000, activity=False) is None
    assert t.on_line(None, 150_000, activity=True) == TurnChange("working", 150_000)


def test_a_client_decision_ends_the_live_files_waiting_for_that_request() -> None:
    """The CLI's dialog stays 'waiting' ~1 s after the client decided: working, not waiting
    again; a timeout (no decision) leaves the dialog's waiting real."""
    t = TurnTracker()
    t.on_live("busy", None, 0)
    assert t.on_live("waiting", "permission prompt", 10) == TurnChange(
        "waiting", 10, "permission prompt"
    )
    assert t.on_approval("approve Edit", 20) == TurnChange("waiting", 20, "approve Edit")
    assert t.on_approval(None, 30, answered=True) == TurnChange("working", 30)
    assert t.on_live("waiting", "permission prompt", 40) is None
    assert t.on_live("busy", None, 50) is None
    assert t.on_live("waiting", "permission prompt", 60) == TurnChange(
        "waiting", 60, "permission prompt"
    )
    assert t.on_approval("approve Bash", 70) == TurnChange("waiting", 70, "approve Bash")
    assert t.on_approval(None, 80) == TurnChange("waiting", 80, "permission prompt")


def test_a_live_waiting_read_after_the_client_decided_is_stale() -> None:
    """Under load the live file's 'waiting' for the dialog is read only after the client
    decided: it is the same request, over: working stays, no second waiting."""
    t = TurnTracker()
    t.on_live("busy", None, 0)
    assert t.on_approval("approve Edit", 20) == TurnChange("waiting", 20, "approve Edit")
    assert t.on_approval(None, 30, answered=True) == TurnChange("working", 30)
    assert t.on_live("waiting", "permission prompt", 40) is None
    assert t.on_live("busy", None, 50) is None
    assert t.on_live("waiting", "permission prompt", 60) == TurnChange(
        "waiting", 60, "permission prompt"
    )


def test_interactive_idle_between_busy_flips_is_no_turn_end() -> None:
    """Typed in the terminal: busy, idle ~70 ms later (before the prompt's line), busy again;
    and busy -> idle -> busy between tool calls: one working, then idle at the turn's end."""
    t = TurnTracker(state="idle", transcript="idle")
    assert t.on_live("busy", None, 0) == TurnChange("working", 0)
    assert t.on_live("idle", None, 70) is None
    assert t.on_line("working", 80) is None
    assert t.on_live("busy", None, 270) is None
    assert t.on_live("idle", None, 500) is None  # between tool calls
    assert t.on_live("busy", None, 600) is None
    assert t.on_live("idle", None, 900) is None
    assert t.on_line("idle", 1000) == TurnChange("idle", 1000)


def test_a_turn_first_seen_waiting_opens_working() -> None:
    """busy came and went between two scans: the turn still opens working, then waits."""
    t = TurnTracker(state="idle", transcript="idle")
    assert t.on_live("waiting", "permission prompt", 5) == TurnChange("working", 5)
    assert t.settle(5) == TurnChange("waiting", 5, "permission prompt")
    assert t.settle(5) is None
    u = TurnTracker()
    assert u.on_approval("approve Edit", 7) == TurnChange("working", 7)
    assert u.settle(7) == TurnChange("waiting", 7, "approve Edit")


def test_repair_answer_before_a_prompts_line_is_no_turn_end() -> None:
    """After a crash the CLI answers the unanswered prompt ("No response requested.", idle)
    just before the new prompt's line: the turn relaybus opened stays working, no flicker."""
    t = TurnTracker()
    assert t.on_prompt(10) == TurnChange("working", 10)
    assert t.on_run(True, 10) is None
    assert t.on_line("idle", 11) is None  # the repair line
    assert t.on_line("working", 12) is None  # the prompt's own line
    assert t.on_line("idle", 13) == TurnChange("idle", 13)  # its answer ends the turn
