"""Helpers for collector tests: realistic transcript lines, polling, reading the log.

Lines follow Claude Code's record shapes (see tests/data/claude-jsonl/): a real user
prompt, an assistant text reply with a terminal ``stop_reason``, a tool use, a progress
line (bookkeeping, dropped by the projection).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, cast

import orjson
import redis

from relaybus.shared.store.keys import Keys

T = TypeVar("T")
#: What ``XRANGE`` returns to a client without ``decode_responses``.
Entries = list[tuple[bytes, dict[bytes, bytes]]]
CWD = "/home/dev/project"


def _stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def record(sid: str, rtype: str, **extra: Any) -> dict[str, Any]:
    """A main-session record of type ``rtype`` with Claude Code's envelope fields."""
    rec: dict[str, Any] = {
        "parentUuid": None,
        "isSidechain": False,
        "userType": "external",
        "cwd": CWD,
        "sessionId": sid,
        "version": "2.1.39",
        "type": rtype,
        "uuid": str(uuid.uuid4()),
        "timestamp": _stamp(),
    }
    rec.update(extra)
    return rec


def assistant_message(content: list[dict[str, Any]], stop: str | None) -> dict[str, Any]:
    """The ``message`` of an assistant record holding ``content`` items."""
    return {
        "id": f"msg_{uuid.uuid4().hex[:12]}",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def line(rec: dict[str, Any]) -> bytes:
    return orjson.dumps(rec) + b"\n"


def user_line(sid: str, text: str, **extra: Any) -> bytes:
    return line(record(sid, "user", message={"role": "user", "content": text}, **extra))


def assistant_line(sid: str, text: str, *, stop: str | None = "end_turn", **extra: Any) -> bytes:
    message = assistant_message([{"type": "text", "text": text}], stop)
    return line(record(sid, "assistant", message=message, **extra))


def progress_line(sid: str) -> bytes:
    data = {"type": "hook_progress", "hookEvent": "PreToolUse", "hookName": "x", "command": "true"}
    return line(record(sid, "progress", data=data))


#: Real Claude Code transcripts (tests/data/claude-jsonl).
FIXTURES = Path(__file__).resolve().parents[1] / "data" / "claude-jsonl"


def fixture_records() -> list[dict[str, Any]]:
    """Every JSON object line of the fixture transcripts, in file order."""
    recs: list[dict[str, Any]] = []
    for p in sorted(FIXTURES.glob("*.jsonl")):
        for raw in p.read_bytes().splitlines():
            try:
                rec = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if isinstance(rec, dict):
                recs.append(rec)
    return recs


def in_session(rec: dict[str, Any], sid: str) -> bytes:
    """``rec`` as a line of session ``sid``, with a fresh uuid (so a repeat is a new line)."""
    rec = dict(rec)
    if "sessionId" in rec:
        rec["sessionId"] = sid
    if "uuid" in rec:
        rec["uuid"] = str(uuid.uuid4())
    return orjson.dumps(rec) + b"\n"


def transcript(claude_dir: Path, sid: str, project: str = "-home-dev-project") -> Path:
    """The path of a main session transcript (its folder created)."""
    d = claude_dir / "projects" / project
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{sid}.jsonl"


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def frames_of(client: redis.Redis | redis.RedisCluster, key: str) -> list[dict[str, Any]]:
    """Every frame of a stream, decoded, with the entry id checked against seqId."""
    out = []
    for entry_id, fields in cast(Entries, client.xrange(key)):
        frame = orjson.loads(fields[b"f"])
        assert entry_id == f"{frame['seqId']}-0".encode()
        out.append(frame)
    return out


def session_texts(client: redis.Redis | redis.RedisCluster, keys: Keys, sid: str) -> list[str]:
    """The first text block of every session_event of a session, in stream order."""
    texts = []
    for f in frames_of(client, keys.session_events(sid)):
        blocks = f["event"].get("blocks") or []
        texts.append(blocks[0].get("text", "") if blocks else "")
    return texts
