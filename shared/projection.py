"""Claude Code transcript line -> what relaybus publishes. Pure: bytes in, a value out.

The only code (with :mod:`shared.blocks` and :mod:`shared.edits`) that knows Claude Code's
JSONL format. :func:`project_line` parses a line once and returns a :class:`Projected`:
whether to publish, the wire ``event`` ``{type, blocks, data, …}``, and the record facts
the collector needs (session, cwd, time, sidechain, title candidate, turn signal).

Every line is classified to a key (its ``type``, refined as ``type/detail``) and looked up
in :data:`RULES`, the one table deciding what reaches clients (``drop`` is None), what is
bookkeeping (``drop`` is the metric label), which title candidate it yields and which turn
signal. A refined key missing from the table falls back to its type; an unknown type is
published as a neutral event (``blocks: []``). Summary of the table:

================================  =========================  ======================
key                               published as               drop / title / turn
================================  =========================  ======================
user/prompt                       content blocks             title 1, working
user/command (``/cmd args``)      text ``/cmd args``         title 1, working
user/bare-command (``/clear``)    text ``/cmd``              working
user/command-output               text (stdout/stderr)       idle
user/interrupt                    text                       idle
user/tool-result, user/other      content blocks             -
user/bash, user/bash-output       text                       -
user/compact-summary              text, ``compactSummary``   -
user/meta, user/caveat            -                          drop ``meta``
assistant, assistant/terminal     content blocks             terminal: idle
system/<subtype> (default)        ``content`` as text        -
system/turn_duration              -                          drop, idle
system/stop_hook_summary          -                          drop
attachment/queued_command         ``notification`` block     -
attachment/<other>                -                          drop ``attachment``
custom-title/agent-name/          -                          drop ``title``,
ai-title/summary                                             rank 5/4/3/2
progress, file-history-snapshot,  -                          drop, label = type
queue-operation, last-prompt,
mode, permission-mode, cost-state
================================  =========================  ======================

Sidechain (sub-agent) lines never give a turn signal or a title; their events carry
``sidechain: true`` and ``agentId`` when the record names it. Assistant ``stop_reason`` is
unreliable (null on most lines in some versions), so ``system/turn_duration`` and the
collector's backstop also end turns. A ``<local-command-stdout>`` line ends the turn its
``/command`` line started (``/compact`` writes nothing else). A blank line is dropped
(``blank``); bytes that are not a UTF-8 JSON object are published as type ``unknown``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

import orjson

from shared.blocks import Block, Cutter, content_blocks

Turn = Literal["working", "idle"]

#: Assistant stop reasons that end a turn (``tool_use`` and ``pause_turn`` do not).
TERMINAL_STOPS = frozenset({"end_turn", "stop_sequence", "max_tokens", "refusal"})
INTERRUPT_PREFIX = "[Request interrupted by user"
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
    "user/command": Rule(turn="working", title_rank=1),
    "user/bare-command": Rule(turn="working"),
    "user/command-output": Rule(turn="idle"),
    "user/interrupt": Rule(turn="idle"),
    "user/meta": _DROP_META,
    "user/caveat": _DROP_META,
    "assistant": Rule(),
    "assistant/terminal": Rule(turn="idle"),
    "system": Rule(),
    "system/turn_duration": Rule(drop="turn-duration", turn="idle"),
    "system/stop_hook_summary": Rule(drop="stop-hook-summary"),
    "attachment": Rule(drop="attachment"),
    "attachment/queued_command": Rule(),
    "custom-title": Rule(drop="title", title_rank=5, title_field="customTitle"),
    "agent-name": Rule(drop="title", title_rank=4, title_field="agentName"),
    "ai-title": Rule(drop="title", title_rank=3, title_field="aiTitle"),
    "summary": Rule(drop="title", title_rank=2, title_field="summary"),
    "progress": Rule(drop="progress"),
    "file-history-snapshot": Rule(drop="file-history-snapshot"),
    "queue-operation": Rule(drop="queue-operation"),
    "last-prompt": Rule(drop="last-prompt"),
    "mode": Rule(drop="mode"),
    "permission-mode": Rule(drop="permission-mode"),
    "cost-state": Rule(drop="cost-state"),
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


def title_event(title: str) -> dict[str, Any]:
    """The event published when a session's title changes."""
    data = {"type": "ai-title", "aiTitle": title}
    return {"type": "ai-title", "blocks": [], "title": title, "data": data}


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
    key, text = _classify(rtype, rec)
    rule = RULES.get(key) or RULES.get(rtype, _NEUTRAL)
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
        event = {"type": rtype, "blocks": _build(key, rtype, rec, text, cutter)}
        event["data"] = (
            orjson.Fragment(raw)
            if len(raw) <= data_max_bytes
            else {"type": rtype, "truncated": True, "bytes": len(raw)}
        )
        if sidechain:
            event["sidechain"] = True
            if agent_id is not None:
                event["agentId"] = agent_id
        _extras(key, rtype, rec, event)
    return Projected(
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
    )


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _epoch_ms(value: Any) -> int | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)


def _message_content(rec: dict[str, Any]) -> Any:
    message = rec.get("message")
    return message.get("content") if isinstance(message, dict) else None


def _classify(rtype: str, rec: dict[str, Any]) -> tuple[str, str | None]:
    """The table key of a record, and its display text where the key implies one."""
    if rtype == "user":
        return _classify_user(rec)
    if rtype == "assistant":
        message = rec.get("message")
        stop = message.get("stop_reason") if isinstance(message, dict) else None
        return ("assistant/terminal" if stop in TERMINAL_STOPS else "assistant"), None
    if rtype == "system":
        subtype = rec.get("subtype")
        return (f"system/{subtype}" if isinstance(subtype, str) else rtype), None
    if rtype == "attachment":
        attachment = rec.get("attachment")
        kind = attachment.get("type") if isinstance(attachment, dict) else None
        return (f"attachment/{kind}" if isinstance(kind, str) else rtype), None
    return rtype, None


def _classify_user(rec: dict[str, Any]) -> tuple[str, str | None]:
    if rec.get("isMeta") is True:
        return "user/meta", None
    if rec.get("isCompactSummary") is True:
        return "user/compact-summary", None
    content = _message_content(rec)
    text: str | None = None
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        other = False
        for item in content:
            if isinstance(item, dict):
                itype = item.get("type")
                if itype == "text" and isinstance(item.get("text"), str):
                    text = item["text"]
                    break
                if itype != "tool_result":
                    other = True
        if text is None:
            return ("user/prompt" if other else "user/tool-result"), None
    if text is None:
        return "user/other", None
    if text.startswith("<"):
        if text.startswith(("<command-name>", "<command-message>")):
            command = _command_text(text)
            return ("user/command" if " " in command else "user/bare-command"), command
        if text.startswith(("<local-command-stdout>", "<local-command-stderr>")):
            return "user/command-output", _untag(text)
        if text.startswith("<local-command-caveat>"):
            return "user/caveat", None
        if text.startswith("<bash-input>"):
            return "user/bash", "! " + _untag(text)
        if text.startswith(("<bash-stdout>", "<bash-stderr>")):
            return "user/bash-output", _untag(text)
    elif text.startswith(INTERRUPT_PREFIX):
        return "user/interrupt", None
    return "user/prompt", text


def _tag(text: str, name: str) -> str | None:
    start = text.find(f"<{name}>")
    if start < 0:
        return None
    start += len(name) + 2
    end = text.find(f"</{name}>", start)
    return text[start:] if end < 0 else text[start:end]


def _command_text(text: str) -> str:
    """``<command-name>/x</command-name>…<command-args>a</command-args>`` -> ``/x a``."""
    name = (_tag(text, "command-name") or _tag(text, "command-message") or "").strip()
    args = (_tag(text, "command-args") or "").strip()
    return f"{name} {args}" if args else name


def _untag(text: str) -> str:
    """The contents of the leading ``<tag>…</tag>`` wrappers, joined by newlines."""
    parts: list[str] = []
    rest = text.strip()
    while rest.startswith("<"):
        close = rest.find(">")
        if close < 0:
            break
        name = rest[1:close]
        end = rest.find(f"</{name}>", close)
        if end < 0:
            parts.append(rest[close + 1 :])
            rest = ""
            break
        inner = rest[close + 1 : end].strip()
        if inner:
            parts.append(inner)
        rest = rest[end + len(name) + 3 :].lstrip()
    if rest:
        parts.append(rest)
    return "\n".join(parts)


def _build(
    key: str, rtype: str, rec: dict[str, Any], text: str | None, cutter: Cutter
) -> list[Block]:
    """The blocks of a published record."""
    if rtype == "user" or rtype == "assistant":
        if key in _TEXT_KEYS and text is not None:
            return [cutter.text_block("text", text)]
        return content_blocks(_message_content(rec), cutter, rec.get("toolUseResult"))
    if rtype == "system":
        content = rec.get("content")
        if not isinstance(content, str) or not content:
            return []
        if content.startswith("<"):
            content = _command_text(content) if "<command-name>" in content else _untag(content)
        return [cutter.text_block("text", content)]
    if key == "attachment/queued_command":
        return _queued_command(rec["attachment"], cutter)
    return []


_TEXT_KEYS = frozenset(
    {"user/command", "user/bare-command", "user/command-output", "user/bash", "user/bash-output"}
)


def _queued_command(attachment: dict[str, Any], cutter: Cutter) -> list[Block]:
    """A task/monitor notification -> a ``notification`` block; a queued prompt -> its blocks."""
    mode = attachment.get("commandMode")
    prompt = attachment.get("prompt")
    if mode == "prompt":
        return content_blocks(prompt, cutter)
    if isinstance(prompt, list):
        parts = [p["text"] for p in prompt if _has_text(p)]
        prompt = "\n".join(parts)
    if not isinstance(prompt, str):
        prompt = ""
    block = cutter.text_block("notification", prompt)
    block["source"] = mode if isinstance(mode, str) else "queued-command"
    summary = _tag(prompt, "summary")
    if summary is not None:
        block["summary"] = summary.strip()[:TITLE_MAX_CHARS]
    return [block]


def _has_text(item: Any) -> bool:
    return isinstance(item, dict) and isinstance(item.get("text"), str)


def _extras(key: str, rtype: str, rec: dict[str, Any], event: dict[str, Any]) -> None:
    """Additive event fields a client may use without knowing the format."""
    uuid = rec.get("uuid")
    if isinstance(uuid, str):
        event["uuid"] = uuid
    if rtype == "assistant":
        message = rec.get("message")
        if isinstance(message, dict) and isinstance(message.get("id"), str):
            event["messageId"] = message["id"]
    elif rtype == "system":
        subtype = rec.get("subtype")
        if isinstance(subtype, str):
            event["subtype"] = subtype
    elif key == "user/compact-summary":
        event["compactSummary"] = True
