"""Which log event becomes which notification — pure, no I/O (beyond reading the shared
command rules, a packaged file, once at import).

A :class:`Notice` is what a person should see: permission requests (with Approve/Deny),
their resolution (replacing the request's notification), a session waiting for them, a
long turn done, Claude's own ``PushNotification``, and failures (an API error that stopped
a turn). Routine progress is never pushed. One tag per session collapses repeats, so a
session never stacks notifications.

One tap answers a request only when the notification shows everything it approves: a shell
command whole (it fits, on one line, as it runs) that the web card would not flag — the rules
are the card's own, read from ``static/commandRules.js`` — and files inside the project.
Anything else opens the app on the full card.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from relaybus.gateway.frames import title_and_prompt
from relaybus.shared.store.session_row import SessionRow
from relaybus.shared.wire import frames

APPROVALS, WAITING, DONE, NOTIFY, FAILURES = "approvals", "waiting", "done", "notify", "failures"
#: Decisions as the replacing notification words them.
RESOLVED_TEXT = {
    "allow": "Approved",
    "deny": "Denied",
    "timeout": "Timed out — Claude Code asks in the terminal",
    "cancelled": "No longer waiting",
    "answered_elsewhere": "Answered in the terminal",
}
BODY_MAX = 180
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")


def _load_rules() -> dict[str, Any]:
    """The shared command rules: the strict JSON object after ``export default``."""
    text = (resources.files("relaybus.gateway") / "static" / "commandRules.js").read_text("utf-8")
    rules: dict[str, Any] = json.loads(text.split("\nexport default ", 1)[1])
    return rules


_RULES = _load_rules()
# ASCII: \b and \w as in JavaScript (the patterns spell out their spaces)
_FLAGS = [(re.compile(source, re.ASCII), str(why)) for source, why in _RULES["flags"]]
_HIDDEN = re.compile(_RULES["hidden"][0])
_WRITES_WARNING = str(_RULES["writes"][0])
_WRITES = [re.compile(source, re.ASCII) for source in _RULES["writes"][1]]
_WORDS = re.compile(r"[ \t\n\r\f\v]+")  # how a shell splits words
_HARMLESS = frozenset(_RULES["harmlessTargets"])
#: Tools whose input names a file, and the key that holds it.
_FILE_TOOLS = {
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "Write": "file_path",
    "Read": "file_path",
    "NotebookEdit": "notebook_path",
}
#: Tools a notification shows whole in one line when that line fits (and nothing is flagged).
_ONE_TAP_SHOWN = {
    "Bash": "command",
    "PowerShell": "command",
    "WebFetch": "url",
    "WebSearch": "query",
}


@dataclass(frozen=True, slots=True)
class Session:
    """What a notification names: from the session hash."""

    sid: str
    host: str
    title: str
    cwd: str = ""  # the project: writes outside it are never one tap

    @classmethod
    def from_row(cls, sid: str, row: SessionRow) -> Session:
        """Titled by the listing's rule (:func:`~relaybus.gateway.frames.title_and_prompt`): a
        title Claude Code wrote, else the cwd basename, else the id's first 8 characters (as
        the web client's session header; a first prompt is not a title)."""
        title = title_and_prompt(row)[0] or os.path.basename(row.cwd) or sid[:8]
        return cls(sid, row.host, clip(title, 80), row.cwd)


@dataclass(frozen=True, slots=True)
class Notice:
    event: str  # the preference it falls under (APPROVALS, WAITING, …)
    kind: str  # approval, resolved, waiting, done, notify, failure
    sid: str
    host: str
    title: str
    body: str
    request_key: str | None = None
    expires_ms: int | None = None
    one_tap: bool = False  # Approve/Deny from the notification answer it completely

    @property
    def tag(self) -> str:
        """One per session: a newer notice replaces the older one on the device."""
        return f"relaybus:{self.sid}"

    @property
    def path(self) -> str:
        """The web client's route to the session (and its pending request)."""
        return f"#/s/{self.sid}"

    def payload(self, cap: str | None = None) -> dict[str, Any]:
        """What the service worker receives (no token: ``cap`` decides this request only, and
        only a one-tap request carries it and its actions)."""
        body: dict[str, Any] = {
            "kind": self.kind,
            "title": self.title,
            "body": self.body,
            "tag": self.tag,
            "sessionId": self.sid,
            "url": self.path,
        }
        if self.request_key:
            body["requestKey"] = self.request_key
        if self.kind == "approval" and self.one_tap and cap:
            body["cap"] = cap
            body["actions"] = [
                {"action": "approve", "title": "Approve"},
                {"action": "deny", "title": "Deny"},
            ]
        return body


def clip(text: str, limit: int = BODY_MAX) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def gist(name: str, tool_input: dict[str, Any], edit: dict[str, Any] | None) -> str:
    """ "Edit parser.py +2 −1", "Bash: rm -rf dist && npm run build", "WebFetch: https://…"."""
    path = tool_input.get("file_path") or tool_input.get("notebook_path")
    if isinstance(path, str) and path:
        text = f"{name} {os.path.basename(path)}"
        if edit is not None:
            text += f" +{int(edit.get('added', 0))} −{int(edit.get('removed', 0))}"
        return clip(text)
    for key in ("command", "url", "pattern", "query", "prompt", "description"):
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            return clip(f"{name}: {value}")
    return clip(name)


def _segments(path: str) -> list[str] | None:
    out: list[str] = []
    for seg in path.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if not out:
                return None  # climbs above where it started
            out.pop()
        else:
            out.append(seg)
    return out


def outside_project(target: str, cwd: str | None) -> bool:
    """Does writing ``target`` leave the project ``cwd``? Home (``~``), variables and climbing
    out are outside; without a known (absolute) cwd every absolute path is. Same rule as
    ``outsideProject`` in commandPreview.js."""
    path = re.sub(r"^['\"]+|['\"]+$", "", target)
    if path == "" or path in _HARMLESS:
        return False
    if path.startswith(("~", "$")):
        return True
    base = _segments(cwd) if cwd and cwd.startswith("/") else None
    if path.startswith("/") and base is None:
        return True
    joined = path if path.startswith("/") else "/".join(base or []) + "/" + path
    full = _segments(joined)
    if full is None:
        return True
    return base is not None and full[: len(base)] != base


def command_warnings(command: str, cwd: str | None = None) -> list[str]:
    """The web card's warnings for a shell command run in ``cwd``, in the card's order."""
    warnings = [why for pattern, why in _FLAGS if pattern.search(command)]
    if _HIDDEN.search(command):
        warnings.insert(0, str(_RULES["hidden"][1]))
    targets = [m.group(1) for pattern in _WRITES for m in pattern.finditer(command)]
    paths = [p for t in targets for p in _WORDS.split(t) if p and not p.startswith("-")]
    if any(outside_project(p, cwd) for p in paths):
        warnings.append(_WRITES_WARNING)
    return warnings


def one_tap(name: str, tool_input: dict[str, Any], cwd: str) -> bool:
    """May Approve/Deny on the notification answer this request? Only when the notification
    shows all it approves: a file inside the project, or a command (or URL) that fits whole on
    the line, as it runs, with nothing the card would warn about."""
    if name in _FILE_TOOLS:
        path = tool_input.get(_FILE_TOOLS[name])
        return isinstance(path, str) and path != "" and not outside_project(path, cwd)
    key = _ONE_TAP_SHOWN.get(name)
    value = tool_input.get(key) if key else None
    if not isinstance(value, str) or value == "" or _HIDDEN.search(value):
        return False
    line = f"{name}: {value}"
    if clip(line) != line:
        return False
    return key != "command" or not command_warnings(value, cwd)


def _question_text(questions: list[Any]) -> str:
    first = questions[0] if questions and isinstance(questions[0], dict) else {}
    text = first.get("question") or first.get("header")
    body = f"Question: {text}" if isinstance(text, str) and text else "Claude has a question"
    return body + (f" (+{len(questions) - 1} more)" if len(questions) > 1 else "")


def _plan_text(plan: Any) -> str:
    lines = plan.splitlines() if isinstance(plan, str) else []
    first = next((s for s in (ln.strip().lstrip("#>*-").strip() for ln in lines) if s), "")
    return f"Plan ready for review: {first}" if first else "Plan ready for review"


def title_of(s: Session) -> str:
    return clip(f"{s.host} · {s.title}" if s.host else s.title, 120)


def approval(frame: dict[str, Any], s: Session) -> Notice:
    """A held request. A question always opens the app on its card; a plan offers one tap
    unless it must be answered at the terminal; a tool only when it is shown whole."""
    raw_input = frame.get("input")
    tool_input: dict[str, Any] = raw_input if isinstance(raw_input, dict) else {}
    name = str(frame.get("name", "tool"))
    questions = frame.get("questions")
    if name == "AskUserQuestion" or (isinstance(questions, list) and questions):
        body, tap = _question_text(questions if isinstance(questions, list) else []), False
    elif name == "ExitPlanMode" or isinstance(frame.get("plan"), str):
        body, tap = _plan_text(frame.get("plan")), True
    else:
        body, tap = gist(name, tool_input, frame.get("edit")), one_tap(name, tool_input, s.cwd)
    return Notice(
        APPROVALS,
        "approval",
        s.sid,
        s.host,
        title_of(s),
        clip(body),
        request_key=str(frame.get("requestKey")),
        expires_ms=int(frame.get("expiresAt", 0)) or None,
        one_tap=tap and frame.get("answerable") is not False,
    )


def resolved(frame: dict[str, Any], s: Session) -> Notice:
    decision = str(frame.get("decision", ""))
    return Notice(
        APPROVALS,
        "resolved",
        s.sid,
        s.host,
        title_of(s),
        RESOLVED_TEXT.get(decision, decision or "Resolved"),
        request_key=str(frame.get("requestKey")),
    )


def waiting(frame: dict[str, Any], s: Session) -> Notice | None:
    """A session waiting for its person, unless it waits on a request relaybus pushes itself."""
    why = frame.get("waitingFor")
    if isinstance(why, str) and why.startswith("approve "):
        return None
    text = clip(why) if isinstance(why, str) and why else "Claude is waiting for you"
    return Notice(WAITING, "waiting", s.sid, s.host, f"Waiting: {s.title}", text)


def done(s: Session, last_text: str | None) -> Notice:
    return Notice(
        DONE, "done", s.sid, s.host, f"Done: {s.title}", last_sentence(last_text) or "Turn finished"
    )


def last_sentence(text: str | None) -> str:
    if not text:
        return ""
    parts = [p.strip() for p in _SENTENCE.findall(text) if p.strip()]
    return clip(parts[-1]) if parts else ""


def from_event(event: dict[str, Any], s: Session) -> list[Notice]:
    """Claude's ``PushNotification`` calls and API errors in one ``session_event``."""
    out: list[Notice] = []
    if event.get("sidechain"):
        return out
    for block in event.get("blocks", ()):
        if not isinstance(block, dict):
            continue
        if block.get("kind") == "tool" and block.get("name") == "PushNotification":
            data = block.get("input") if isinstance(block.get("input"), dict) else {}
            text = next(
                (
                    v
                    for k in ("message", "text", "body", "title")
                    if isinstance(v := (data or {}).get(k), str) and v
                ),
                "Claude asked to notify you",
            )
            out.append(Notice(NOTIFY, "notify", s.sid, s.host, title_of(s), clip(text)))
    if event.get("type") == "assistant" and event.get("error") is True:
        texts = [b.get("text") for b in event.get("blocks", ()) if isinstance(b, dict)]
        why = next((t for t in texts if isinstance(t, str) and t), "An API error stopped the turn")
        out.append(Notice(FAILURES, "failure", s.sid, s.host, f"Failed: {s.title}", clip(why)))
    return out


def last_text(event: dict[str, Any]) -> str | None:
    """The text of an assistant event (for "Done"), ``None`` for anything else."""
    if event.get("type") != "assistant" or event.get("sidechain") or event.get("error"):
        return None
    texts = [
        b.get("text")
        for b in event.get("blocks", ())
        if isinstance(b, dict) and b.get("kind") == "text"
    ]
    joined = "\n".join(t for t in texts if isinstance(t, str) and t)
    return joined or None


#: Log kinds the worker looks at; every other entry is acknowledged unread.
KINDS = frozenset(
    {
        frames.PERMISSION_REQUEST,
        frames.PERMISSION_RESOLVED,
        frames.TURN_STATUS,
        frames.SESSION_EVENT,
    }
)
