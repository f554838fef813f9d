"""What becomes a notification, and for which device (pure)."""

from __future__ import annotations

from relaybus.gateway.push import policy
from relaybus.gateway.push.policy import Session
from relaybus.gateway.push.store import DEFAULT_EVENTS, Prefs, Subscription

S = Session("sid-1", "laptop", "fix the parser")


def test_gist_names_the_tool_and_what_it_touches() -> None:
    """Edits name the file and the line counts; commands and URLs are shown, clipped."""
    edit = {"added": 2, "removed": 1}
    assert policy.gist("Edit", {"file_path": "/w/src/parser.py"}, edit) == "Edit parser.py +2 −1"
    assert policy.gist("Bash", {"command": "rm -rf dist && npm run build"}, None) == (
        "Bash: rm -rf dist && npm run build"
    )
    long = policy.gist("Bash", {"command": "x" * 500}, None)
    assert len(long) == policy.BODY_MAX and long.endswith("…")
    assert policy.gist("Mystery", {}, None) == "Mystery"


def test_a_request_carries_approve_and_deny_only_with_its_capability() -> None:
    """The payload has actions and the cap only for a request; never a token."""
    n = policy.approval(
        {"requestKey": "k1", "name": "Bash", "input": {"command": "ls"}, "expiresAt": 5}, S
    )
    assert (n.title, n.body, n.tag) == ("laptop · fix the parser", "Bash: ls", "relaybus:sid-1")
    assert "actions" not in n.payload(None)
    p = n.payload("cap-1")
    assert p["cap"] == "cap-1" and [a["action"] for a in p["actions"]] == ["approve", "deny"]
    r = policy.resolved({"requestKey": "k1", "decision": "answered_elsewhere"}, S)
    assert (r.kind, r.body, r.tag) == ("resolved", "Answered in the terminal", n.tag)


def test_waiting_on_a_pushed_request_is_not_pushed_twice() -> None:
    """The 'waiting' turn of a held request is covered by the request's own notification."""
    assert policy.waiting({"state": "waiting", "waitingFor": "approve Edit"}, S) is None
    w = policy.waiting({"state": "waiting", "waitingFor": "answer a question"}, S)
    assert w is not None and (w.title, w.body) == ("Waiting: fix the parser", "answer a question")


def test_claude_notifications_and_api_errors_are_pushed_routine_events_are_not() -> None:
    """PushNotification calls and API-error replies make notices; text and sidechains do not."""
    call = {
        "type": "assistant",
        "blocks": [
            {"kind": "tool", "name": "PushNotification", "input": {"message": "Tests pass"}}
        ],
    }
    [n] = policy.from_event(call, S)
    assert (n.event, n.body) == (policy.NOTIFY, "Tests pass")
    error = {"type": "assistant", "error": True, "blocks": [{"kind": "text", "text": "Overloaded"}]}
    [f] = policy.from_event(error, S)
    assert (f.event, f.title, f.body) == (policy.FAILURES, "Failed: fix the parser", "Overloaded")
    assert (
        policy.from_event({"type": "assistant", "blocks": [{"kind": "text", "text": "hi"}]}, S)
        == []
    )
    assert policy.from_event({**call, "sidechain": True}, S) == []
    assert policy.last_text(error) is None


def test_done_says_the_last_sentence() -> None:
    """'Done' carries the last sentence of Claude's answer."""
    text = policy.last_text(
        {
            "type": "assistant",
            "blocks": [{"kind": "text", "text": "I fixed it. All 12 tests pass."}],
        }
    )
    assert policy.done(S, text).body == "All 12 tests pass."
    assert policy.done(S, None).body == "Turn finished"


def test_prefs_pick_events_machines_and_muted_sessions() -> None:
    """Defaults leave failures out; machines and mutes filter; junk is dropped, not fatal."""
    assert Prefs.parse(None).events == DEFAULT_EVENTS
    p = Prefs.parse({"events": ["approvals", "bogus", 3], "hosts": ["laptop"], "muted": ["m"]})
    assert p.events == ("approvals",)
    assert p.wants("approvals", "laptop", "sid-1")
    assert not p.wants("approvals", "server", "sid-1")
    assert not p.wants("approvals", "laptop", "m")
    assert not p.wants("waiting", "laptop", "sid-1")
    sub = Subscription("https://push.example/x", "k", "a", "fp", True, p)
    again = Subscription.loads(sub.dumps())
    assert again == sub and Subscription.loads(b"{}") is None
