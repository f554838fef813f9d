"""Which log event becomes which notification — pure, no I/O.

A :class:`Notice` is what a person should see: permission requests (with Approve/Deny),
their resolution (replacing the request's notification), a session waiting for them, a
long turn done, Claude's own ``PushNotification``, and failures (an API error that stopped
a turn). Routine progress is never pushed. One tag per session collapses repeats, so a
session never stacks notifications.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True, slots=True)
class Session:
    """What a notification names: from the session hash."""

    sid: str
    host: str
    title: str

    @classmethod
    def from_hash(cls, sid: str, row: dict[str, str]) -> Session:
        cwd = row.get("cwd", "")
        title = row.get("title") or row.get("firstPrompt") or os.path.basename(cwd) or sid[:8]
        return cls(sid, row.get("host", ""), clip(title, 80))


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

    @property
    def tag(self) -> str:
        """One per session: a newer notice replaces the older one on the device."""
        return f"relaybus:{self.sid}"

    @property
    def path(self) -> str:
        """The web client's route to the session (and its pending request)."""
        return f"#/s/{self.sid}"

    def payload(self, cap: str | None = None) -> dict[str, Any]:
        """What the service worker receives (no token: ``cap`` decides this request only)."""
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
        if self.kind == "approval" and cap:
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


def title_of(s: Session) -> str:
    return clip(f"{s.host} · {s.title}" if s.host else s.title, 120)


def approval(frame: dict[str, Any], s: Session) -> Notice:
    tool_input = frame.get("input") if isinstance(frame.get("input"), dict) else {}
    return Notice(
        APPROVALS,
        "approval",
        s.sid,
        s.host,
        title_of(s),
        gist(str(frame.get("name", "tool")), tool_input or {}, frame.get("edit")),
        request_key=str(frame.get("requestKey")),
        expires_ms=int(frame.get("expiresAt", 0)) or None,
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
