"""What collectors and gateways agree on for remote approvals: keys and records.

Key names are :class:`relaybus.shared.store.keys.Keys`; what they hold:

* ``{ns}:session:<sid>:watchers`` — hash gatewayId -> ``"<count>:<expiresAtMs>"``: clients
  with a full-access token watching the session through that gateway. A gateway rewrites
  its field when its count changes and refreshes it well before it expires, so the field
  of a dead gateway stops counting once its stamp passes (and the key expires with it).
* ``{ns}:session:<sid>:approvals`` — hash requestKey -> JSON ``{host, name, expiresAt,
  questions?, suggestions?, answerable?}``: the requests a collector holds for the session
  (clients may omit the key when there is exactly one); ``questions`` (the request's, as
  published), ``suggestions`` (how many were published) and ``answerable: false`` are what
  the gateway checks a client's ``answers`` / ``suggestion`` against.
* ``{ns}:approval:<requestKey>`` — the decision, claimed once with ``SET NX``: JSON
  ``{decision, message?, answers?, suggestion?, interrupt?}``. Whoever sets it first decides (a client's allow/deny, or the
  collector's timeout/cancel); everyone later is told ``already_resolved``.
* ``{ns}:session:<sid>:approval_resolved`` — JSON ``{requestKey, decision, resolvedAt}`` of
  the session's last request to end, set by the collector as it drops the request from
  ``approvals``, expiring after the approval timeout: a decision without a ``requestKey``
  that finds nothing pending is ``already_resolved`` while it exists (the client was late),
  ``no_pending_request`` otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from relaybus.shared.wire.json_object import json_object

#: Command type (gateway -> ``{ns}:cmd:<host>``) delivering a decision to the holding collector.
PERMISSION_DECISION = "permission_decision"

# Decisions: how a held request ended (``permission_resolved.decision``, an open union).
ALLOW = "allow"
DENY = "deny"
#: Nobody answered within the approval timeout (a decision, not ``ErrorCode.TIMEOUT``).
TIMED_OUT = "timeout"
CANCELLED = "cancelled"
#: The terminal answered first (the tool's result is in the transcript, or Claude Code's own
#: dialog closed): the request is over, relaybus decided nothing.
ANSWERED_ELSEWHERE = "answered_elsewhere"
CLIENT_DECISIONS = frozenset({ALLOW, DENY})

#: Watcher fields count for this long by default (``RELAYBUS_WATCHERS_TTL_S``) and are
#: refreshed every third of it.
WATCHERS_TTL_S = 15
#: A decision is remembered this long after the request expired (late answers: already_resolved).
DECISION_GRACE_S = 600


def resolved_record(request_key: str, decision: str, resolved_ms: int) -> bytes:
    return orjson.dumps(
        {"requestKey": request_key, "decision": decision, "resolvedAt": resolved_ms}
    )


def parse_resolved(raw: bytes | str | None) -> tuple[str, str] | None:
    """(requestKey, decision) of a :func:`resolved_record`, ``None`` if absent or malformed."""
    body = json_object(raw)
    if body is None:
        return None
    key, decision = body.get("requestKey"), body.get("decision")
    return (key, decision) if isinstance(key, str) and isinstance(decision, str) else None


def watcher_value(count: int, expires_ms: int) -> str:
    return f"{count}:{expires_ms}"


def live_watchers(fields: Mapping[Any, Any], now_ms: int) -> int:
    """Clients counted by gateways whose stamp has not passed."""
    total = 0
    for raw in fields.values():
        text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else str(raw)
        count, _, expires = text.partition(":")
        if count.isdigit() and expires.isdigit() and int(expires) > now_ms:
            total += int(count)
    return total


def decision_record(
    decision: str, message: str | None = None, extra: Mapping[str, Any] | None = None
) -> bytes:
    """``extra``: a client's ``answers`` / ``suggestion`` / ``interrupt`` (:func:`decision_extra`)."""
    body: dict[str, Any] = {**(extra or {}), "decision": decision}
    if message:
        body["message"] = message
    return orjson.dumps(body)


def decision_extra(raw: bytes | str | None) -> dict[str, Any]:
    """What a client's decision adds to allow/deny (``answers``, ``suggestion``, ``interrupt``),
    as the gateway checked it; ``{}`` when absent or malformed."""
    body = json_object(raw)
    if body is None:
        return {}
    extra: dict[str, Any] = {}
    if isinstance(body.get("answers"), dict):
        extra["answers"] = body["answers"]
    if type(body.get("suggestion")) is int:
        extra["suggestion"] = body["suggestion"]
    if body.get("interrupt") is True:
        extra["interrupt"] = True
    return extra


#: Longest ``decidedBy`` member name and device label kept.
DECIDED_BY_MAX = 64


def decided_by(raw: bytes | str | None) -> dict[str, Any] | None:
    """Who decided (``{member, device, at}``) as the gateway recorded it with the decision;
    ``None`` when absent or malformed."""
    try:
        body = orjson.loads(raw) if raw is not None else None
    except orjson.JSONDecodeError:
        return None
    by = body.get("decidedBy") if isinstance(body, dict) else None
    if not isinstance(by, dict):
        return None
    member, device, at = by.get("member"), by.get("device"), by.get("at")
    if not (isinstance(member, str) and isinstance(device, str) and type(at) is int):
        return None
    return {"member": member[:DECIDED_BY_MAX], "device": device[:DECIDED_BY_MAX], "at": at}


def parse_decision(raw: bytes | str | None) -> tuple[str, str | None] | None:
    body = json_object(raw)
    if body is None or not isinstance(body.get("decision"), str):
        return None
    message = body.get("message")
    return body["decision"], message if isinstance(message, str) else None


# --- what Claude asks beyond yes/no (questions, "always allow", plans) ------------------

#: Bounds on what a request carries (the CLI asks 1–4 questions of 2–4 options).
MAX_QUESTIONS = 8
MAX_OPTIONS = 8
MAX_QUESTION_CHARS = 1000
MAX_HEADER_CHARS = 100
MAX_LABEL_CHARS = 200
MAX_DESCRIPTION_CHARS = 2000
#: An "Other" answer typed on the phone.
MAX_FREE_TEXT_CHARS = 2000
MAX_SUGGESTIONS = 8
#: One suggestion as JSON; larger ones are left out.
MAX_SUGGESTION_BYTES = 4096
MAX_PLAN_CHARS = 100_000
#: The CLI's own separator for a multi-select answer (its AskUserQuestion output schema).
MULTI_SEPARATOR = ", "

#: Where the CLI writes a suggested rule (``destination``), in words.
_DESTINATIONS = {
    "localSettings": "in this project",
    "projectSettings": "in this project (shared settings)",
    "userSettings": "in all projects",
    "session": "for this session",
    "cliArg": "for this run",
}
_MODES = {
    "acceptEdits": "accept edits",
    "default": "default (ask each time)",
    "plan": "plan",
    "bypassPermissions": "bypass permissions",
    "dontAsk": "don't ask",
    "auto": "auto",
}


def _short(value: Any, limit: int) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= limit else None


def questions_of(tool_input: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """AskUserQuestion's questions as typed data, ``None`` unless every one is well-formed and
    within bounds (answers are keyed by the exact question text: nothing is cut)."""
    raw = tool_input.get("questions")
    if not isinstance(raw, list) or not 0 < len(raw) <= MAX_QUESTIONS:
        return None
    out: list[dict[str, Any]] = []
    for q in raw:
        if not isinstance(q, dict):
            return None
        text, options = _short(q.get("question"), MAX_QUESTION_CHARS), q.get("options")
        if text is None or not isinstance(options, list) or not 0 < len(options) <= MAX_OPTIONS:
            return None
        opts = []
        for o in options:
            label = _short(o.get("label"), MAX_LABEL_CHARS) if isinstance(o, dict) else None
            if label is None:
                return None
            desc = o.get("description")
            opts.append(
                {
                    "label": label,
                    "description": desc[:MAX_DESCRIPTION_CHARS] if isinstance(desc, str) else "",
                }
            )
        header = q.get("header")
        out.append(
            {
                "question": text,
                "header": header[:MAX_HEADER_CHARS] if isinstance(header, str) else "",
                "multiSelect": q.get("multiSelect") is True,
                "options": opts,
            }
        )
    if len({q["question"] for q in out}) != len(out):
        return None  # answers are keyed by the question: two alike cannot be told apart
    return out


def _code(text: str) -> str:
    quoted = text.replace("`", "'")
    return f"`{quoted}`"


def suggestion_text(s: Mapping[str, Any]) -> str | None:
    """One of the CLI's ``permission_suggestions`` in words, ``None`` for a shape not known."""
    kind, where = s.get("type"), _DESTINATIONS.get(str(s.get("destination")))
    if where is None:
        return None
    if kind in ("addRules", "replaceRules"):
        rules, behavior = s.get("rules"), s.get("behavior")
        verb = {"allow": "Always allow", "deny": "Always deny", "ask": "Always ask for"}.get(
            str(behavior)
        )
        if verb is None or not isinstance(rules, list) or not rules:
            return None
        names = []
        for rule in rules:
            if not isinstance(rule, dict) or not isinstance(rule.get("toolName"), str):
                return None
            content = rule.get("ruleContent")
            names.append(_code(content) if isinstance(content, str) else rule["toolName"])
        return f"{verb} {', '.join(names)} {where}"
    if kind == "addDirectories":
        dirs = s.get("directories")
        if not isinstance(dirs, list) or not dirs or not all(isinstance(d, str) for d in dirs):
            return None
        return f"Allow access to {', '.join(_code(d) for d in dirs)} {where}"
    if kind == "setMode":
        mode = _MODES.get(str(s.get("mode")))
        return None if mode is None else f"Switch to {mode} mode {where}"
    return None


def suggestions_of(raw: Any) -> list[dict[str, Any]]:
    """The CLI's suggestions it can be told in words, in its order, each as given plus ``text``
    (the rest are left out: never a rule in words that says something else)."""
    if not isinstance(raw, list):
        return []
    out: list[dict[str, Any]] = []
    for s in raw:
        if len(out) >= MAX_SUGGESTIONS:
            break
        if not isinstance(s, dict) or "text" in s:
            continue
        text = suggestion_text(s)
        if text is not None and len(orjson.dumps(s)) <= MAX_SUGGESTION_BYTES:
            out.append({**s, "text": text})
    return out


def check_answers(questions: list[dict[str, Any]], answers: Any) -> str | None:
    """Why ``answers`` does not answer ``questions`` (``None``: it does).

    ``{"<question>": "<label>" | ["<label>", …] | "<free text>"}``: only known questions,
    every question answered, a list only for a multi-select one (of its own labels, no
    repeats), and a string that is no label is the "Other" answer, bounded."""
    if not isinstance(answers, dict):
        return "answers must be an object: question -> answer"
    known = {q["question"]: q for q in questions}
    for text, value in answers.items():
        q = known.get(text)
        if q is None:
            return "answers names a question this request does not ask"
        labels = {o["label"] for o in q["options"]}
        if isinstance(value, list):
            if not q["multiSelect"]:
                return f"question {text[:80]!r} takes one answer, not a list"
            if not value or len(set(value)) != len(value) or not all(v in labels for v in value):
                return f"answer to {text[:80]!r}: a list of its own labels, each once"
        elif not isinstance(value, str) or not value.strip():
            return f"answer to {text[:80]!r} must be a label, a list of labels or text"
        elif value not in labels and len(value) > MAX_FREE_TEXT_CHARS:
            return f"a typed answer is at most {MAX_FREE_TEXT_CHARS} characters"
    missing = [t for t in known if t not in answers]
    if missing:
        return f"question {missing[0][:80]!r} is not answered"
    return None


def cli_answers(answers: Mapping[str, Any]) -> dict[str, str]:
    """Checked answers as the CLI takes them: one string per question, a multi-select's
    labels joined by :data:`MULTI_SEPARATOR`."""
    return {
        q: MULTI_SEPARATOR.join(a) if isinstance(a, list) else str(a) for q, a in answers.items()
    }
