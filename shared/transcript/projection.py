"""Claude Code transcript line -> what relaybus publishes. Pure: bytes in, a value out.

The only code (with :mod:`relaybus.shared.transcript.records`, :mod:`relaybus.shared.transcript.blocks`,
:mod:`relaybus.shared.transcript.edits` and :mod:`relaybus.shared.transcript.timestamps`) that knows Claude
Code's JSONL format. :func:`project_line` parses a
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

A ``permission-mode`` line (dropped) and a prompt's ``user`` line state the session's
permission mode (``permissionMode``); the main session's is :attr:`Projected.permission_mode`.

Rank 0 (below the first prompt's 1): ``/orchestrator build it`` is the first prompt only
until a real prompt arrives (``/model opus`` never is).
Sidechain (sub-agent) lines never give a turn signal or a title. Assistant ``stop_reason``
is unreliable (null on most lines in some versions), so ``system/turn_duration`` and the
collector's backstop also end turns. A ``<local-command-stdout>`` line ends the turn its
``/command`` line started (``/compact`` writes nothing else). Bytes that are not a UTF-8
JSON object are published as type ``unknown`` with ``malformed`` set.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal, NamedTuple

import orjson

from relaybus.shared.transcript.blocks import Cutter
from relaybus.shared.transcript.records import (
    COMPACTION_AGENT_PREFIX,
    TERMINAL_STOPS,
    TITLE_FIELDS,
    add_extras,
    build_blocks,
    classify,
)
from relaybus.shared.transcript.timestamps import epoch_ms

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


class Projected(NamedTuple):
    """One projected line (a plain NamedTuple: one is built per transcript line)."""

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
    #: the session's permission mode as the line states it (:func:`permission_mode_of`)
    permission_mode: str | None = None


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
    rule = _rule(rtype, key, rec)
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
    return Projected(
        rule.drop is None,
        rule.drop,
        event,
        _str(rec.get("sessionId")),
        _str(rec.get("cwd")),
        _str(rec.get("entrypoint")),
        epoch_ms(rec.get("timestamp")),
        sidechain,
        agent_id,
        title,
        turn,
        False,
        leaf if isinstance(leaf, str) else None,
        _agent_parent(rec) if rtype == "progress" else None,
        None if sidechain else permission_mode_of(rtype, rec),
    )


#: Longest permission mode name kept (Claude Code's are 4-17 letters).
PERMISSION_MODE_MAX_CHARS = 32
#: Record types stating the session's permission mode in ``permissionMode``: the
#: ``permission-mode`` line (at a prompt and at a turn's end) and the prompt's own line.
PERMISSION_MODE_TYPES = frozenset({"permission-mode", "user"})


def permission_mode_of(rtype: str, rec: dict[str, Any]) -> str | None:
    """The ``permissionMode`` a line of type ``rtype`` states (``default``, ``acceptEdits``,
    ``plan``, ``auto``, …: an open set, kept when it is a short ASCII word), else None."""
    if rtype not in PERMISSION_MODE_TYPES:
        return None
    mode = rec.get("permissionMode")
    if (
        isinstance(mode, str)
        and 0 < len(mode) <= PERMISSION_MODE_MAX_CHARS
        and mode.isascii()
        and mode.isalpha()
    ):
        return mode
    return None


def _rule(rtype: str, key: str, rec: dict[str, Any]) -> Rule:
    rule = RULES.get(key)
    if rule is None:
        # A refined key falls back to its type, except a system subtype nobody knows: that
        # is published only when it has content, like an unknown type.
        rule = (None if rtype == "system" else RULES.get(rtype)) or _unknown_rule(key, rec)
    return rule


class Hint(NamedTuple):
    """What a line can change besides its own event, told without building the event."""

    #: a main-session turn signal, a title or first-prompt candidate, a warm-up agent's
    #: first line or a sub-agent link: :func:`project_line` gives facts the collector keeps
    stateful: bool
    has_cwd: bool
    has_entrypoint: bool
    uuid: str | None


_NO_HINT = Hint(False, False, False, None)
#: Quoted words one of which a line :func:`hint_line` finds ``stateful`` holds, as
#: JSON.stringify (or json.dumps) writes it (letters never ``\\u``-escaped) — unless it is
#: a terminal assistant line: that one holds a :data:`STOP_OPENINGS` and a terminal stop.
USER_WORD = b'"user"'
STATE_WORDS: tuple[bytes, ...] = (
    USER_WORD,
    *(f'"{w}"'.encode() for w in ("turn_duration", "agent_progress", "summary", *TITLE_FIELDS)),
    b'"permissionMode"',
)
STOP_OPENINGS = (b'"stop_reason":"', b'"stop_reason": "')
#: What follows a :data:`STOP_OPENINGS` on a terminal assistant line.
TERMINAL_VALUES = tuple(f'{stop}"'.encode() for stop in sorted(TERMINAL_STOPS))
#: How Claude Code opens a tool result's message (its first content item a tool_result).
TOOL_RESULT_OPENINGS = (
    b'"role":"user","content":[{"tool_use_id":"',
    b'"role":"user","content":[{"type":"tool_result"',
)
#: Texts beside a tool result that still make its line stateful (``records._classify_user``).
TOOL_RESULT_TURN_TEXTS = (
    b'"<command-',
    b'"<local-command-std',
    b'"<task-notification>',
    b'"[Request interrupted by user',
)


def plain_tool_result(raw: bytes) -> bool:
    """A tool result's line with no command, notification or interrupt text: its
    :data:`USER_WORD` does not make it stateful."""
    return any(o in raw for o in TOOL_RESULT_OPENINGS) and not any(
        t in raw for t in TOOL_RESULT_TURN_TEXTS
    )


def terminal_stop_at(raw: bytes, i: int) -> bool:
    """A terminal stop follows the :data:`STOP_OPENINGS` that ends at ``i``."""
    return raw.startswith(TERMINAL_VALUES, i)


def may_be_stateful(raw: bytes) -> bool:
    """False for a line certainly not :func:`hint_line`'s ``stateful``, found without
    parsing it (substring searches; ``collector.backfill_read`` does the same over a chunk)."""
    for word in STATE_WORDS:
        if word in raw and (word != USER_WORD or not plain_tool_result(raw)):
            return True
    for opening in STOP_OPENINGS:
        i = raw.find(opening)
        while i >= 0:
            if terminal_stop_at(raw, i + len(opening)):
                return True
            i = raw.find(opening, i + 1)
    return False


def hint_line(raw: bytes) -> Hint:
    """The :class:`Hint` of a line: one parse and its classification, no blocks (several
    times cheaper than :func:`project_line`, whose facts it is a superset of)."""
    try:
        rec = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _NO_HINT
    if not isinstance(rec, dict):
        return _NO_HINT
    rtype = rec.get("type")
    if not isinstance(rtype, str) or not rtype:
        rtype = "unknown"
    key, _text = classify(rtype, rec)
    rule = _rule(rtype, key, rec)
    main = rec.get("isSidechain") is not True
    stateful = (
        (main and (rule.turn is not None or rule.title_rank is not None))
        or rule.drop == "warmup"
        or (rtype == "progress" and _agent_parent(rec) is not None)
        or (main and permission_mode_of(rtype, rec) is not None)
    )
    return Hint(
        stateful,
        bool(_str(rec.get("cwd"))),
        bool(_str(rec.get("entrypoint"))),
        _str(rec.get("uuid")),
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
