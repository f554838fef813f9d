"""Map a transcript path to the session it belongs to.

Layout (``<claude>`` = ``settings.claude_dir``):

* ``<claude>/projects/<enc>/<sid>.jsonl`` — a main session transcript;
* ``<claude>/projects/<enc>/<sid>/subagents/agent-<id>.jsonl`` — a sub-agent of ``<sid>``;
* ``<claude>/projects/<enc>/agent-<id>.jsonl`` — a legacy sub-agent sibling whose parent
  session is only known from its records' ``sessionId``.

Sub-agent lines belong to the parent session's stream; they never form sessions of their own.
A session or agent id outside Claude Code's id shape (``relaybus.shared.wire.ids``) is not a transcript:
its name could splice Redis keys (``<sid>:events``) or read as a command-line option.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from relaybus.collector.tailer import open_regular
from relaybus.shared.wire.ids import valid_session_id
from relaybus.shared.wire.json_object import json_object

AGENT_PREFIX = "agent-"
SUFFIX = ".jsonl"
META_SUFFIX = ".meta.json"
#: A sub-agent's ``.meta.json`` is a few hundred bytes; never read a big one.
META_MAX_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class TranscriptPath:
    """Where a transcript's lines go. ``session_id`` is ``None`` until read from the records."""

    key: str
    session_id: str | None
    agent_id: str | None


@lru_cache(maxsize=4096)  # every wake-up classifies its paths again: ~20 µs of pathlib each
def classify(claude_dir: Path, path: Path) -> TranscriptPath | None:
    """The session/agent of a transcript path, or ``None`` when it is not a transcript."""
    try:
        rel = path.relative_to(claude_dir)
    except ValueError:
        return None
    parts = rel.parts
    if len(parts) < 3 or parts[0] != "projects" or not path.name.endswith(SUFFIX):
        return None
    key = rel.as_posix()
    stem = path.name[: -len(SUFFIX)]
    if not stem:
        return None
    if len(parts) == 3:
        if stem.startswith(AGENT_PREFIX):
            agent = stem[len(AGENT_PREFIX) :]
            return TranscriptPath(key, None, agent) if valid_session_id(agent) else None
        return TranscriptPath(key, stem, None) if valid_session_id(stem) else None
    if len(parts) == 5 and parts[3] == "subagents" and stem.startswith(AGENT_PREFIX):
        agent = stem[len(AGENT_PREFIX) :]
        if valid_session_id(parts[2]) and valid_session_id(agent):
            return TranscriptPath(key, parts[2], agent)
    return None


def parent_tool_use_id(path: Path) -> str | None:
    """The Task/Agent ``toolUseId`` that started the sub-agent transcript ``path``: current
    CLIs write it to ``agent-<id>.meta.json`` beside the transcript (``None`` when absent)."""
    meta = path.with_name(path.name[: -len(SUFFIX)] + META_SUFFIX)
    try:
        with open_regular(meta) as f:  # never a FIFO or a symlink planted there
            raw = f.read(META_MAX_BYTES + 1)
    except OSError:
        return None
    rec = json_object(raw) if len(raw) <= META_MAX_BYTES else None
    value = rec.get("toolUseId") if rec is not None else None
    return value if isinstance(value, str) and 0 < len(value) <= 256 else None
