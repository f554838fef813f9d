"""Claude Code ``message.content`` items -> ContentBlocks (the seed's Typed Tool Blocks).

Kinds produced (an open union; clients render unknown kinds as a neutral block):

* ``text`` / ``thinking`` ``{kind, text}``. Thinking whose text was not persisted (only a
  signature) keeps its block with ``text: ""`` so clients can still show that the model
  thought; ``redacted_thinking`` becomes ``{kind: "thinking", text: "", redacted: true}``.
* ``tool`` ``{kind, toolUseId, name, input}`` from ``tool_use`` and ``server_tool_use``.
* ``tool_result`` ``{kind, toolUseId, isError, text?, numLines?, edit?, agentId?, answers?}``;
  a ``<tool_use_error>`` wrapper is removed and makes ``isError`` true. ``agentId`` names
  the sub-agent a Task/Agent call ran (its events carry the same ``agentId``); ``answers``
  maps each AskUserQuestion question to the answer given. Terminal escape sequences are
  removed from ``text``.
* ``image`` / ``document`` ``{kind, mediaType, bytes}``: the decoded size, never the data.
* any other item ``{kind: <its type>, text?}``.

Long strings are cut by a :class:`Cutter` and the block gains ``truncated: true`` and
``originalChars`` (for ``tool``: ``truncatedFields`` maps the path of each cut string in
``input`` to its original length, 0 for a container cut because it nested too deep).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from relaybus.shared.transcript.edits import edit_info

_ERROR_OPEN = "<tool_use_error>"
_ERROR_CLOSE = "</tool_use_error>"

Block = dict[str, Any]

#: ANSI escape sequences (CSI, OSC, and two-byte escapes) in command output.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape sequences (``/compact`` output holds ``ESC[2m``)."""
    return _ANSI.sub("", text) if "\x1b" in text else text


#: Tool input nested deeper than this is replaced by ``"…"`` (recorded in truncatedFields).
MAX_INPUT_DEPTH = 32
#: At most this many paths are listed in a tool block's ``truncatedFields``.
MAX_TRUNCATED_FIELDS = 16
#: At most this many AskUserQuestion answers are lifted onto a ``tool_result``.
MAX_ANSWERS = 16
MAX_ID_CHARS = 128


class Cutter:
    """Cuts strings to ``max_chars`` each and to ``4 * max_chars`` summed over one line.

    ``active`` is false when the raw line is too short to hold any string worth cutting,
    so the common case does no walking at all.
    """

    __slots__ = ("active", "max_chars", "remaining")

    def __init__(self, max_chars: int, raw_len: int) -> None:
        self.max_chars = max_chars
        self.remaining = 4 * max_chars
        self.active = raw_len > max_chars

    def cut(self, text: str) -> tuple[str, int]:
        """``(kept, original length)``; ``kept is text`` when nothing was cut."""
        n = len(text)
        limit = self.max_chars if self.max_chars < self.remaining else self.remaining
        if n <= limit:
            self.remaining -= n
            return text, n
        self.remaining -= limit
        return text[:limit], n

    def text_block(self, kind: str, text: str) -> Block:
        """``{kind, text}``, plus ``truncated`` and ``originalChars`` when cut."""
        if not self.active:
            return {"kind": kind, "text": text}
        kept, n = self.cut(text)
        if kept is text:
            return {"kind": kind, "text": text}
        return {"kind": kind, "text": kept, "truncated": True, "originalChars": n}


def content_blocks(content: Any, cutter: Cutter, result: Any = None) -> list[Block]:
    """Project ``message.content`` (a string or a list of items).

    ``result`` is the line's ``toolUseResult``; it is used only when the line holds exactly
    one ``tool_result`` (it describes that one).
    """
    if isinstance(content, str):
        return [cutter.text_block("text", content)]
    if not isinstance(content, list):
        return []
    if result is not None and sum(_is_result(item) for item in content) != 1:
        result = None
    blocks: list[Block] = []
    for item in content:
        if isinstance(item, dict):
            _item_blocks(item, cutter, result, blocks)
    return blocks


def _is_result(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "tool_result"


def _item_blocks(item: dict[str, Any], cutter: Cutter, result: Any, out: list[Block]) -> None:
    kind = item.get("type")
    if kind == "text":
        text = item.get("text")
        out.append(cutter.text_block("text", text if isinstance(text, str) else ""))
    elif kind == "tool_result":
        tool_result_blocks(item, result, cutter, out)
    elif kind == "tool_use" or kind == "server_tool_use":
        out.append(tool_block(item, cutter))
    elif kind == "thinking":
        text = item.get("thinking")
        out.append(cutter.text_block("thinking", text if isinstance(text, str) else ""))
    elif kind == "redacted_thinking":
        out.append({"kind": "thinking", "text": "", "redacted": True})
    elif kind == "image" or kind == "document":
        out.append(media_block(kind, item))
    elif isinstance(kind, str) and kind.endswith("_tool_result") and "tool_use_id" in item:
        tool_result_blocks(item, None, cutter, out)  # e.g. web_search_tool_result
    else:
        block: Block = {"kind": kind if isinstance(kind, str) else "unknown"}
        text = item.get("text")
        if isinstance(text, str):
            block.update(cutter.text_block("text", text), kind=block["kind"])
        out.append(block)


def tool_block(item: dict[str, Any], cutter: Cutter) -> Block:
    raw_input = item.get("input")
    tool_input: dict[str, Any] = raw_input if isinstance(raw_input, dict) else {}
    block: Block = {
        "kind": "tool",
        "toolUseId": _str(item.get("id")),
        "name": _str(item.get("name")),
        "input": tool_input,
    }
    if cutter.active or not _encodable(tool_input):
        cut: dict[str, int] = {}
        block["input"] = _cut_value(tool_input, "", 0, cutter, cut)
        if cut:
            block["truncated"] = True
            block["truncatedFields"] = cut
    return block


def _encodable(value: Any) -> bool:
    """Whether orjson can encode ``value``: it refuses input nested past 254 levels, which a
    parsed line may hold (it parses up to 1024), and the collector must encode every event."""
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        return False
    return True


def _cut_value(value: Any, path: str, depth: int, cutter: Cutter, cut: dict[str, int]) -> Any:
    """``value`` with long strings and deep nesting cut; containers are copied only when
    something inside changed. ``cut`` maps the first paths cut to their original length
    (0 for a container cut for depth)."""
    if isinstance(value, str):
        kept, n = cutter.cut(value) if cutter.active else (value, 0)
        if kept is not value and len(cut) < MAX_TRUNCATED_FIELDS:
            cut[path or "."] = n
        return kept
    if not isinstance(value, dict | list):
        return value
    if depth >= MAX_INPUT_DEPTH:
        if len(cut) < MAX_TRUNCATED_FIELDS:
            cut[path or "."] = 0
        return "…"
    depth += 1
    if isinstance(value, dict):
        new_dict = {
            k: _cut_value(v, f"{path}.{k}" if path else str(k), depth, cutter, cut)
            for k, v in value.items()
        }
        return value if all(new_dict[k] is value[k] for k in value) else new_dict
    new_list = [
        _cut_value(v, f"{path}.{i}" if path else str(i), depth, cutter, cut)
        for i, v in enumerate(value)
    ]
    return value if all(a is b for a, b in zip(new_list, value, strict=True)) else new_list


def tool_result_blocks(item: dict[str, Any], result: Any, cutter: Cutter, out: list[Block]) -> None:
    """A ``tool_result`` block, followed by ``image`` blocks for images in its content."""
    is_error = item.get("is_error") is True
    content = item.get("content")
    text: str | None = None
    images: list[Block] = []
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if not isinstance(part, dict):
                continue
            ptype = part.get("type")
            if ptype == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif ptype == "image" or ptype == "document":
                images.append(media_block(ptype, part))
        if parts:
            text = "\n".join(parts)
    if text is None and isinstance(result, str):
        text = result
    if text is not None:
        text = strip_ansi(text)  # command output (Bash) may hold colour codes
    block: Block = {
        "kind": "tool_result",
        "toolUseId": _str(item.get("tool_use_id")),
        "isError": is_error,
    }
    if text is not None:
        if text.startswith(_ERROR_OPEN):
            block["isError"] = True
            text = text[len(_ERROR_OPEN) :]
            if text.endswith(_ERROR_CLOSE):
                text = text[: -len(_ERROR_CLOSE)]
        block.update(cutter.text_block("text", text), kind="tool_result")
    if isinstance(result, dict):
        _result_details(result, cutter.max_chars, block)
    out.append(block)
    out.extend(images)


def _result_details(result: dict[str, Any], max_chars: int, block: Block) -> None:
    """Lift ``numLines`` (Read's ``file.numLines``, Grep's ``numLines``), the edit, a
    sub-agent's ``agentId`` (Task/Agent) and AskUserQuestion's ``answers``."""
    agent_id = result.get("agentId")
    if isinstance(agent_id, str) and agent_id:
        block["agentId"] = agent_id[:MAX_ID_CHARS]
    answers = result.get("answers")
    if isinstance(answers, dict) and answers:
        block["answers"] = {
            str(question)[:max_chars]: answer[:max_chars]
            for question, answer in list(answers.items())[:MAX_ANSWERS]
            if isinstance(answer, str)
        }
    file = result.get("file")
    num_lines = file.get("numLines") if isinstance(file, dict) else result.get("numLines")
    if isinstance(num_lines, int) and not isinstance(num_lines, bool):
        block["numLines"] = num_lines
    if "structuredPatch" in result:
        edit = edit_info(result, max_chars)
        if edit is not None:
            block["edit"] = edit


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def media_block(kind: str, item: dict[str, Any]) -> Block:
    """``{kind, mediaType, bytes}``: base64 data is measured (decoded size), never copied."""
    block: Block = {"kind": kind, "mediaType": None, "bytes": None}
    source = item.get("source")
    if isinstance(source, dict):
        media_type = source.get("media_type")
        if isinstance(media_type, str):
            block["mediaType"] = media_type
        data = source.get("data")
        if isinstance(data, str):
            if source.get("type") == "base64":
                pad = 2 if data.endswith("==") else 1 if data.endswith("=") else 0
                block["bytes"] = len(data) * 3 // 4 - pad
            else:
                block["bytes"] = len(data)
        url = source.get("url")
        if isinstance(url, str) and len(url) <= 2048:
            block["url"] = url
    return block
