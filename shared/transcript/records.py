"""Claude Code records -> rule-table key, display text and blocks (used by ``projection``).

``classify`` names what a record is (``user/prompt``, ``system/turn_duration``, …) so that
:data:`relaybus.shared.transcript.projection.RULES` can decide about it; ``build_blocks`` projects a record
that is published; ``add_extras`` adds the additive event fields.
"""

from __future__ import annotations

from typing import Any

from relaybus.shared.transcript.blocks import Block, Cutter, content_blocks, strip_ansi

#: Assistant stop reasons that end a turn (``tool_use`` and ``pause_turn`` do not).
TERMINAL_STOPS = frozenset({"end_turn", "stop_sequence", "max_tokens", "refusal"})
INTERRUPT_PREFIX = "[Request interrupted by user"
#: Title records Claude Code writes (published with their raw ``data``) and their text field.
TITLE_FIELDS = {"custom-title": "customTitle", "agent-name": "agentName", "ai-title": "aiTitle"}
TITLE_EVENT_MAX_CHARS = 1000
SUMMARY_MAX_CHARS = 200
#: Text blocks an IDE or hook adds beside the typed prompt: published, never the title.
CONTEXT_PREFIXES = ("<ide_", "<system-reminder>")
#: The prompt of the sub-agents older CLIs (2.0.x) start to warm their cache: not content.
WARMUP_PROMPT = "Warmup"
#: Sub-agents whose id starts so summarise the conversation for a compaction.
COMPACTION_AGENT_PREFIX = "acompact"


def message_content(rec: dict[str, Any]) -> Any:
    message = rec.get("message")
    return message.get("content") if isinstance(message, dict) else None


def classify(rtype: str, rec: dict[str, Any]) -> tuple[str, str | None]:
    """The table key of a record, and its display text where the key implies one."""
    if rtype == "user":
        return _classify_user(rec)
    if rtype == "assistant":
        message = rec.get("message")
        stop = message.get("stop_reason") if isinstance(message, dict) else None
        terminal = isinstance(stop, str) and stop in TERMINAL_STOPS
        return ("assistant/terminal" if terminal else "assistant"), None
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
    content = message_content(rec)
    if (
        content == WARMUP_PROMPT
        and rec.get("isSidechain") is True
        and rec.get("parentUuid") is None
    ):
        return "user/warmup", None
    text: str | None = None
    has_result = False
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        other = False
        for item in content:
            if isinstance(item, dict):
                itype = item.get("type")
                if itype == "tool_result":
                    has_result = True
                elif (
                    itype == "text"
                    and text is None
                    and isinstance(item.get("text"), str)
                    and not item["text"].startswith(CONTEXT_PREFIXES)
                ):
                    text = item["text"]
                else:
                    other = True
        if text is None:
            if has_result:
                return "user/tool-result", None
            return ("user/prompt" if other else "user/other"), None
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
        if text.startswith("<task-notification>"):
            return "user/notification", text
        if text.startswith("<bash-input>"):
            return "user/bash", "! " + _untag(text)
        if text.startswith(("<bash-stdout>", "<bash-stderr>")):
            return "user/bash-output", _untag(text)
    elif text.startswith(INTERRUPT_PREFIX):
        return "user/interrupt", None
    # Text beside a tool_result (hook output, feedback) does not start a turn.
    return ("user/tool-result", None) if has_result else ("user/prompt", text)


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


def build_blocks(
    key: str, rtype: str, rec: dict[str, Any], text: str | None, cutter: Cutter
) -> list[Block]:
    """The blocks of a published record."""
    if rtype == "user" or rtype == "assistant":
        if key in _TEXT_KEYS and text is not None:
            return [cutter.text_block("text", strip_ansi(text))]
        if key == "user/notification" and text is not None:
            return [_notification(text, "task-notification", cutter)]
        return content_blocks(message_content(rec), cutter, rec.get("toolUseResult"))
    if rtype == "system":
        if key == "system/api_error":
            return [_api_error_notice(rec)]
        content = rec.get("content")
        if not isinstance(content, str) or not content:
            return []
        if content.startswith("<"):
            content = _command_text(content) if "<command-name>" in content else _untag(content)
        return [cutter.text_block("text", strip_ansi(content))]
    if key == "attachment/queued_command":
        return _queued_command(rec["attachment"], cutter)
    if key == "attachment/goal_status":
        return [_goal_status(rec["attachment"], cutter)]
    return []


def _api_error_notice(rec: dict[str, Any]) -> Block:
    """A retried API error -> ``{kind: notification, source: api_error, text, status?, attempt?,
    maxRetries?}`` with a readable text: "API error 529 — retrying, 1/10"."""
    error = rec.get("error")
    status = error.get("status") if isinstance(error, dict) else None
    attempt, retries = rec.get("retryAttempt"), rec.get("maxRetries")
    text = "API error"
    block: Block = {"kind": "notification", "source": "api_error"}
    if _is_int(status):
        text += f" {status}"
        block["status"] = status
    if _is_int(attempt):
        block["attempt"] = attempt
        text += f" — retrying, {attempt}/{retries}" if _is_int(retries) else f" — retry {attempt}"
        if _is_int(retries):
            block["maxRetries"] = retries
    elif isinstance(error, dict) and isinstance(error.get("message"), str):
        text += ": " + error["message"][:SUMMARY_MAX_CHARS]
    block["text"] = text
    return block


def _goal_status(attachment: dict[str, Any], cutter: Cutter) -> Block:
    """A ``/goal`` check -> ``{kind: goal_status, text, condition?, met, reason?}``."""
    condition = attachment.get("condition")
    reason = attachment.get("reason")
    met = attachment.get("met") is True
    if attachment.get("sentinel") is True and not met:
        head = "Goal set"
    else:
        head = "Goal met" if met else "Goal not met yet"
    text = f"{head}: {condition}" if isinstance(condition, str) and condition else head
    if isinstance(reason, str) and reason:
        text += f" — {reason}"
    block = cutter.text_block("goal_status", text)
    block["met"] = met
    if isinstance(condition, str):
        block["condition"] = condition[: SUMMARY_MAX_CHARS * 10]
    if isinstance(reason, str):
        block["reason"] = reason[: SUMMARY_MAX_CHARS * 10]
    return block


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
        prompt = "\n".join(p["text"] for p in prompt if _has_text(p))
    source = mode if isinstance(mode, str) else "queued-command"
    return [_notification(prompt if isinstance(prompt, str) else "", source, cutter)]


def _notification(text: str, source: str, cutter: Cutter) -> Block:
    """``{kind: notification, source, text, summary?}``; summary from a ``<summary>`` tag."""
    block = cutter.text_block("notification", text)
    block["source"] = source
    summary = _tag(text, "summary")
    if summary is not None:
        block["summary"] = summary.strip()[:SUMMARY_MAX_CHARS]
    return block


def _has_text(item: Any) -> bool:
    return isinstance(item, dict) and isinstance(item.get("text"), str)


def add_extras(key: str, rtype: str, rec: dict[str, Any], event: dict[str, Any]) -> None:
    """Additive event fields a client may use without knowing the format."""
    uuid = rec.get("uuid")
    if isinstance(uuid, str):
        event["uuid"] = uuid
    if rtype == "assistant":
        message = rec.get("message")
        if isinstance(message, dict) and isinstance(message.get("id"), str):
            event["messageId"] = message["id"]
        error = rec.get("error")
        if rec.get("isApiErrorMessage") is True or isinstance(error, str):
            event["error"] = True  # an API failure Claude Code wrote as a reply: not a bubble
            if isinstance(error, str):
                event["errorCode"] = error[:64]
            status = rec.get("apiErrorStatus")
            if _is_int(status):
                event["errorStatus"] = status
    elif rtype == "system":
        subtype = rec.get("subtype")
        if isinstance(subtype, str):
            event["subtype"] = subtype
    elif key == "user/compact-summary":
        event["compactSummary"] = True
        event["collapsed"] = True
    elif rtype in TITLE_FIELDS:
        title = rec.get(TITLE_FIELDS[rtype])
        if isinstance(title, str):
            event["title"] = title[:TITLE_EVENT_MAX_CHARS]
