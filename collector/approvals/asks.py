"""What a held request asks beyond yes/no, and how a client's answer reaches Claude Code.

* AskUserQuestion: the hook's ``tool_input.questions`` go out as typed ``questions``; a
  client's checked ``answers`` come back to the CLI as ``behavior: allow`` with
  ``updatedInput = {questions, answers}`` (multi-select labels joined by ", ").
* ``permission_suggestions``: each one the CLI offered and we can say in words goes out as a
  suggestion with its ``text``; choosing one answers ``allow`` with ``updatedPermissions``
  set to that suggestion, unchanged.
* ExitPlanMode: the plan is read from the transcript's ``tool_use`` input (the hook's is
  ``{}``). The CLI does not honour the hook's answer for it: its "Exit plan mode?" dialog
  waits for a key, so a decision is typed into the session's tmux pane
  (``relaybus.collector.drivers.tmux.press_plan_key``) before the hook is answered, and
  a "keep planning" note typed as the next prompt once the dialog has closed; a session
  relaybus cannot type into gets ``answerable: false`` instead.
* A reject with ``interrupt`` answers ``deny`` with ``interrupt: true`` (the CLI stops the turn).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relaybus.collector.approvals import preview
from relaybus.collector.drivers import DriverError, pane_check
from relaybus.collector.drivers.live import find_live
from relaybus.collector.drivers.tmux import (
    Pane,
    TmuxDriver,
    plan_closed,
    press_plan_key,
    terminal_text,
)
from relaybus.collector.procfiles import LiveProcess
from relaybus.shared.wire import approvals

log = logging.getLogger(__name__)

QUESTION_TOOL = "AskUserQuestion"
PLAN_TOOL = "ExitPlanMode"
NOT_IN_TMUX = (
    "This plan must be approved at the terminal: relaybus cannot type into this session "
    "(it does not run in tmux)."
)
BAD_QUESTIONS = "These questions must be answered at the terminal: relaybus cannot show them."


@dataclass(slots=True)
class Asks:
    """What one request asks, as published, and what answering it needs."""

    questions: list[dict[str, Any]] | None = None
    #: The hook's own ``tool_input.questions`` (echoed back in ``updatedInput``).
    cli_questions: Any = None
    suggestions: list[dict[str, Any]] = field(default_factory=list)
    plan: str | None = None
    #: Where the plan dialog is answered (ExitPlanMode in tmux), the Claude Code process that
    #: must be in that pane when its key is typed, and the live files' directory.
    pane: Pane | None = None
    live: LiveProcess | None = None
    #: The loop time the hook asked (the dialog's keys wait for it to settle).
    held_at: float = 0.0
    sessions_dir: Path | None = None
    #: Why no client can answer this request (``None``: one can).
    unanswerable: str | None = None

    def frame(self) -> dict[str, Any]:
        """The request frame's additive fields."""
        out: dict[str, Any] = {}
        if self.questions is not None:
            out["questions"] = self.questions
        if self.suggestions:
            out["suggestions"] = self.suggestions
        if self.plan is not None:
            out["plan"] = self.plan
        if self.unanswerable is not None:
            out["answerable"] = False
            out["answerableReason"] = self.unanswerable
        return out

    def index(self) -> dict[str, Any]:
        """What the gateway checks a decision against (the approvals index entry)."""
        out: dict[str, Any] = {}
        if self.questions is not None:
            out["questions"] = self.questions
        if self.suggestions:
            out["suggestions"] = len(self.suggestions)
        if self.unanswerable is not None:
            out["answerable"] = False
        return out

    def allow(self, extra: dict[str, Any]) -> dict[str, Any]:
        """The hook's ``allow`` for a client's decision with these extras."""
        reply: dict[str, Any] = {"behavior": approvals.ALLOW}
        answers = extra.get("answers")
        if self.questions is not None and isinstance(answers, dict):
            reply["updatedInput"] = {
                "questions": self.cli_questions,
                "answers": approvals.cli_answers(answers),
            }
        index = extra.get("suggestion")
        if isinstance(index, int) and 0 <= index < len(self.suggestions):
            chosen = {k: v for k, v in self.suggestions[index].items() if k != "text"}
            reply["updatedPermissions"] = [chosen]
        return reply


async def describe(
    name: str,
    tool_input: dict[str, Any],
    request: dict[str, Any],
    *,
    sid: str,
    claude_dir: Path,
    transcript: Path | None,
    tool_use_id: str | None,
    tmux: TmuxDriver,
) -> Asks:
    """What the request from the hook (``request``) asks."""
    asks = Asks(
        suggestions=approvals.suggestions_of(request.get("permission_suggestions")),
        held_at=asyncio.get_running_loop().time(),
    )
    if name == QUESTION_TOOL:
        asks.questions = approvals.questions_of(tool_input)
        asks.cli_questions = tool_input.get("questions")
        if asks.questions is None:
            asks.unanswerable = BAD_QUESTIONS
    elif name == PLAN_TOOL:
        call = None
        if transcript is not None and tool_use_id is not None:
            call = await asyncio.to_thread(preview.call_input, transcript, tool_use_id)
        plan = (call or {}).get("plan")
        if isinstance(plan, str):
            asks.plan = plan[: approvals.MAX_PLAN_CHARS]
        live = find_live(claude_dir, sid)
        if live is not None:
            asks.pane = await tmux.find_pane(live.pid, live.tmux)
            asks.live, asks.sessions_dir = live, claude_dir / "sessions"
        if asks.pane is None:
            asks.unanswerable = NOT_IN_TMUX
    return asks


async def answer(
    asks: Asks, tmux: TmuxDriver, decision: str, message: str | None, extra: dict[str, Any]
) -> dict[str, Any]:
    """The hook's answer to a client's ``allow``/``deny``; a plan's is typed into its pane first."""
    if asks.pane is not None and asks.live is not None and asks.sessions_dir is not None:
        approve = decision == approvals.ALLOW
        try:
            await pane_check.verify(tmux, asks.pane, asks.live, asks.sessions_dir)
            await press_plan_key(tmux, asks.pane, approve, asks.held_at)
        except DriverError as exc:
            log.warning("approvals: the plan dialog in %s was not answered: %s", asks.pane, exc)
        else:
            if not approve and message and message.strip():
                task = asyncio.create_task(_note(asks, tmux, message), name="plan-note")
                _NOTES.add(task)
                task.add_done_callback(_NOTES.discard)
    if decision == approvals.ALLOW:
        return asks.allow(extra)
    reply: dict[str, Any] = {
        "behavior": approvals.DENY,
        "message": message or "Rejected from relaybus",
    }
    if extra.get("interrupt") is True:
        reply["interrupt"] = True
    return reply


#: "Keep planning" notes waiting for their dialog to close (the hook must answer first).
_NOTES: set[asyncio.Task[None]] = set()


async def _note(asks: Asks, tmux: TmuxDriver, note: str) -> None:
    assert asks.pane is not None and asks.live is not None and asks.sessions_dir is not None
    try:  # the CLI offers no note field: the note is the next prompt, once the dialog closed
        await plan_closed(tmux, asks.pane)
        await pane_check.verify(tmux, asks.pane, asks.live, asks.sessions_dir)
        await tmux.prompt(asks.pane, terminal_text(note))
    except DriverError as exc:
        log.warning("approvals: the note for %s was not typed: %s", asks.pane, exc)
