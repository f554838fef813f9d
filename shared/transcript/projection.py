"""Claude Code transcript line -> what relaybus publishes. Pure: bytes in, a value out.

The only code (with :mod:`relaybus.shared.transcript.records`, :mod:`relaybus.shared.transcript.blocks` and
:mod:`relaybus.shared.transcript.edits`) that knows Claude Code's JSONL format. :func:`project_line` parses a
line once and returns a :class:`Projected`: whether to publish, the wire ``event``, and the
record facts the collector needs (session, cwd, time, sidechain, title candidate, turn).

Every line is classified to a key (its ``type``, refined as ``type/detail``) and looked up
in :data:`RULES`, the one table deciding what reaches clients (``drop`` is None), what is
bookkeeping (``drop`` is the metric label), which title candidate it yields and which turn
signal. A refined key missing from the table falls back to its type (not for ``system``);
a type (or system subtype) nobody knows is published as a neutral event when it has a
``message`` or a non-empty ``content``/``text``, else dropped with its own type as the
label (:func:`drop_label`). Summary of the table:

================================  =========================  ==========================
key                               published as               drop / title / turn
================================  =========================  ==========================
user/prompt                       content blocks             title 1, working
user/command (``/cmd args``)      text ``/cmd args``         title 0, working
user/bare-command (``/clear``)    text ``/cmd``              working
user/command-output               text (stdout/stderr)       idle
user/interrupt                    text                       idle
user/notification (older CLIs)    ``notification`` block     working (Claude wakes)
user/tool-result, user/other      content blocks             -
user/bash, user/bash-output       text (``! cmd``, output)   -
user/compact-summary              text, ``compactSummary``   -
user/meta, user/caveat            -                          drop ``meta``
user/warmup (2.0.x warm-up agent) -                          drop ``warmup``
assistant, assistant/terminal     content blocks             terminal: idle
system/<subtype> with content     ``content`` as text        -
system/api_error                  ``notification`` notice    -
system/turn_duration              -                          drop ``turn-duration``, idle
system/stop_hook_summary          -                          drop ``stop-hook-summary``
attachment/queued_command         ``notification`` block     -
attachment/goal_status            ``goal_status`` block      -
attachment/<other>                -                          drop ``attachment``
custom-title/agent-name/ai-title  the record, ``title``      rank 5/4/3
summary                           -                          drop, rank 2 (own leaf)
progress, file-history-snapshot,  -                          drop, label = the type
file-history-delta, queue-op.,
last-prompt, mode, permission-
mode, cost-state, api-request,
api-request-shape/-blob,
atis-latch, tools-used
(blank line)                      -                          drop ``blank``
================================  =========================  ==========================

Title ranks 0 and 1 (a command line, the first prompt) are the session's ``firstPrompt``
for the collector, never its title; a summary's candidate counts only when its
``leaf_uuid`` is a line of the same session.

The ``event`` is ``{type, blocks, data}`` plus additive fields: ``sidechain``/``agentId``
(``compaction`` for ``acompact-*`` agents) on sub-agent lines, ``uuid``, ``messageId``
(assistant; the split lines of one API message share it), ``error``/``errorCode``/
``errorStatus`` (an API failure written as a reply), ``subtype`` (system),
``compactSummary``/``collapsed``, ``title`` (title records), ``oversize``. ``data`` is the raw
line as an ``orjson.Fragment`` up to ``data_max_bytes``, else ``{type, truncated, bytes}``.
A queued task notification becomes ``{kind: "notification", source, text, summary?}``; a
prompt queued while Claude worked (``commandMode: prompt``) becomes its text blocks.

Rank 0 (below the first prompt's 1): ``/orchestrator build it`` is the first prompt only
until a real prompt arrives (``/model opus`` never is).
Sidechain (sub-agent) lines never give a turn signal or a title. Assistant ``stop_reason``
is unreliable (null on most lines in some versions), so ``system/turn_duration`` and the
collector's backstop also end turns. A ``<local-command-stdout>`` line ends the turn its
``/command`` line started (``/compact`` writes nothing else). Bytes that are not a UTF-8
JSON object are published as type ``unknown`` with ``malformed`` set.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Literal, NamedTuple

import orjson

from relaybus.shared.transcript.blocks import Cutter
from relaybus.shared.transcript.records import (
    COMPACTION_AGENT_PREFIX,
    add_extras,
    build_blocks,
    classify,
)

Turn = Literal["working", "idle"]

TITLE_MAX_CHARS = 200


class Rule(NamedTuple):
    drop: str | None = None  # None: published; else the drop reason (a metric label)
    turn: Turn | None = None
    title_rank: int | None = None
    title_field: str | None = None  # None with a rank: the title is the line's prompt text


_DROP_META = Rule(drop="meta")

RULES: dict[str, Rule] = {
    "user": Rule(),
    "user/prompt": Rule(turn="working", title_rank=1),
    "user/command": Rule(turn="working", title_rank=0),
    "user/bare-command": Rule(turn="working"),
    "user/command-output": Rule(turn="idle"),
    "user/interrupt": Rule(turn="idle"),
    "user/notification": Rule(turn="working"),
    "user/meta": _DROP_META,
    "user/caveat": _DROP_META,
    "assistant": Rule(),
    "assistant/terminal": Rule(turn="idle"),
    "system": Rule(),
    "system/turn_duration": Rule(drop="turn-duration", turn="idle"),
    "system/stop_hook_summary": Rule(drop="stop-hook-summary"),
    "system/api_error": Rule(),
    "attachment": Rule(drop="attachment"),
    "attachment/queued_command": Rule(),
    "attachment/goal_status": Rule(),
    "custom-title": Rule(title_rank=5, title_field="customTitle"),
    "agent-name": Rule(title_rank=4, title_field="agentName"),
    "ai-title": Rule(title_rank=3, title_field="aiTitle"),
    "summary": Rule(drop="summary", title_rank=2, title_field="summary"),
    "user/warmup": Rule(drop="warmup"),
    **{
        name: Rule(drop=name)
        for name in (
            "progress",
            "file-history-snapshot",
            "file-history-delta",
            "queue-operation",
            "last-prompt",
            "mode",
            "permission-mode",
            "cost-state",
            "api-request",
            "api-request-shape",
            "api-request-blob",
            "atis-latch",
            "tools-used",
        )
    },
}
_NEUTRAL = Rule()


@dataclass(frozen=True, slots=True)
class Projected:
    publish: bool  # False: bookkeeping, counted as dropped with drop_reason
    drop_reason: str | None
    event: dict[str, Any] | None  # {"type", "blocks", "data", …}; None when not published
    session_id: str | None
    cwd: str | None
    entrypoint: str | None
    timestamp_ms: int | None
    is_sidechain: bool
    agent_id: str | None
    title: tuple[int, str] | None  # (rank, text)
    turn: Turn | None
    malformed: bool
    #: a ``summary`` title candidate counts only for the session holding this line uuid
    leaf_uuid: str | None = None
    #: ``(agentId, toolUseId)``: a progress line saying which tool call runs a sub-agent
    agent_parent: tuple[str, str] | None = None


# The frozen dataclass __init__ sets each field through object.__setattr__ (~3.5 µs on the
# 2-core box, a fifth of a line's budget); calling the slot descriptors directly is 3x faster.
_SLOT_SETTERS: tuple[Callable[[object, object], None], ...] = tuple(
    Projected.__dict__[f.name].__set__ for f in fields(Projected)
)


def _projected(*values: object, _new: Any = object.__new__, _set: Any = _SLOT_SETTERS) -> Projected:
    """``Projected(*values)``, fast: see ``_SLOT_SETTERS``."""
    result: Projected = _new(Projected)
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13 = _set
    s0(result, values[0])
    s1(result, values[1])
    s2(result, values[2])
    s3(result, values[3])
    s4(result, values[4])
    s5(result, values[5])
    s6(result, values[6])
    s7(result, values[7])
    s8(result, values[8])
    s9(result, values[9])
    s10(result, values[10])
    s11(result, values[11])
    s12(result, values[12])
    s13(result, values[13])
    return result


def oversize_line(size: int) -> Projected:
    """Stand-in for a line above the collector's size cap (never read in full)."""
    data = {"type": "unknown", "truncated": True, "bytes": size}
    event = {"type": "unknown", "blocks": [], "oversize": True, "data": data}
    return Projected(True, None, event, None, None, None, None, False, None, None, None, False)


def _malformed(raw: bytes) -> Projected:
    data = {"type": "unknown", "malformed": True, "bytes": len(raw)}
    event = {"type": "unknown", "blocks": [], "data": data}
    return Projected(True, None, event, None, None, None, None, False, None, None, None, True)


_BLANK = Projected(False, "blank", None, None, None, None, None, False, None, None, None, False)


def project_line(
    raw: bytes, *, data_max_bytes: int = 65536, text_max_chars: int = 16384
) -> Projected:
    """Project one JSONL line (a trailing newline is ignored)."""
    if raw.endswith(b"\n"):
        raw = raw.rstrip(b"\r\n")
    try:
        rec = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _BLANK if not raw or raw.isspace() else _malformed(raw)
    if not isinstance(rec, dict):
        return _malformed(raw)
    rtype = rec.get("type")
    if not isinstance(rtype, str) or not rtype:
        rtype = "unknown"
    key, text = classify(rtype, rec)
    rule = RULES.get(key)
    if rule is None:
        # A refined key falls back to its type, except a system subtype nobody knows: that
        # is published only when it has content, like an unknown type.
        rule = (None if rtype == "system" else RULES.get(rtype)) or _unknown_rule(key, rec)
    sidechain = rec.get("isSidechain") is True
    agent_id = _str(rec.get("agentId"))
    turn = None if sidechain else rule.turn
    title = None
    if rule.title_rank is not None and not sidechain:
        candidate = rec.get(rule.title_field) if rule.title_field else text
        if isinstance(candidate, str):
            candidate = " ".join(candidate[: 2 * TITLE_MAX_CHARS].split())[:TITLE_MAX_CHARS]
            if candidate:
                title = (rule.title_rank, candidate)
    event: dict[str, Any] | None = None
    if rule.drop is None:
        cutter = Cutter(text_max_chars, len(raw))
        event = {"type": rtype, "blocks": build_blocks(key, rtype, rec, text, cutter)}
        event["data"] = (
            orjson.Fragment(raw)
            if len(raw) <= data_max_bytes
            else {"type": rtype, "truncated": True, "bytes": len(raw)}
        )
        if sidechain:
            event["sidechain"] = True
            if agent_id is not None:
                event["agentId"] = agent_id
                if agent_id.startswith(COMPACTION_AGENT_PREFIX):
                    event["compaction"] = True
        add_extras(key, rtype, rec, event)
    leaf = rec.get("leafUuid") if title is not None and rtype == "summary" else None
    return _projected(
        rule.drop is None,
        rule.drop,
        event,
        _str(rec.get("sessionId")),
        _str(rec.get("cwd")),
        _str(rec.get("entrypoint")),
        _epoch_ms(rec.get("timestamp")),
        sidechain,
        agent_id,
        title,
        turn,
        False,
        leaf if isinstance(leaf, str) else None,
        _agent_parent(rec) if rtype == "progress" else None,
    )


def _agent_parent(rec: dict[str, Any]) -> tuple[str, str] | None:
    """Older CLIs (2.1.x) write ``progress``/``agent_progress`` lines naming the sub-agent
    (``data.agentId``) a Task call (``parentToolUseID``) runs: the link its own file lacks."""
    data = rec.get("data")
    if not isinstance(data, dict) or data.get("type") != "agent_progress":
        return None
    agent, tool = data.get("agentId"), rec.get("parentToolUseID")
    if isinstance(agent, str) and isinstance(tool, str) and agent and 0 < len(tool) <= 256:
        return agent, tool
    return None


#: An unknown record type (or ``system`` subtype) is published when it may hold
#: something to show: a ``message``, or a non-empty ``content`` / ``text``.
_DISPLAYABLE_FIELDS = ("content", "text")
#: Drop reasons (metric labels) are the record type, cut to this length and to [a-z0-9_-].
DROP_REASON_MAX_CHARS = 40


def _unknown_rule(key: str, rec: dict[str, Any]) -> Rule:
    """A type nobody knows yet: published as a neutral event if it may hold something to
    show, else dropped with its own type as the reason (the collector bounds the labels)."""
    if isinstance(rec.get("message"), dict):
        return _NEUTRAL
    for name in _DISPLAYABLE_FIELDS:
        value = rec.get(name)
        if (isinstance(value, str) and value.strip()) or (isinstance(value, list) and value):
            return _NEUTRAL
    return Rule(drop=drop_label(key))


@lru_cache(maxsize=256)
def drop_label(name: str) -> str:
    """``name`` as a bounded metric label: lower case, [a-z0-9_-], at most 40 characters."""
    cleaned = "".join(
        c if c.isascii() and (c.isalnum() or c in "_-") else "-" for c in name.lower()
    )
    return cleaned[:DROP_REASON_MAX_CHARS] or "unknown"


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _epoch_ms(value: Any) -> int | None:
    """RFC 3339 -> epoch ms. Claude Code writes ``2026-02-12T16:02:25.227Z``: that form costs a
    cached minute lookup and one ``int``; anything else goes through ``fromisoformat``."""
    if not isinstance(value, str):
        return None
    if len(value) == 24 and value[23] == "Z" and value[19] == "." and value[16] == ":":
        minute = _minute_ms(value[:16])
        millis = value[17:19] + value[20:23]
        if minute is not None and millis.isdigit() and millis.isascii():
            return minute + int(millis)
    return _iso_ms(value)


@lru_cache(maxsize=1024)
def _minute_ms(prefix: str) -> int | None:
    return _iso_ms(prefix)


def _iso_ms(value: str) -> int | None:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)
