"""Replay what the real Claude Code CLI 2.1.332 wrote, with its real timing, into a claude dir.

``tests/data/claude-cli-2.1.332/print-tools/timeline-live-file-vs-transcript.jsonl`` is a
2 ms poll of one ``-p`` run and one ``--resume`` run interrupted by SIGINT: every version
of ``sessions/<pid>.json`` and every transcript line (as a record-type descriptor), with
times. :func:`replay` writes the same sequence: live-process files (their ``pid`` replaced
by a real stand-in process per CLI run, killed at ``cli-exit``), and transcript lines
rebuilt from the descriptors in Claude Code's record shapes, in the main transcript or the
sub-agent's file. Gaps longer than ``max_gap_s`` are shortened.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

DATA = Path(__file__).resolve().parents[1] / "data" / "claude-cli-2.1.332"
TIMELINE = DATA / "print-tools" / "timeline-live-file-vs-transcript.jsonl"
CWD = "/home/dev/proj"
PROJECT = "-home-dev-proj"

_KINDS = re.compile(r"^(user|assistant):(\[[^\]]*\]|str):")
_STOP = re.compile(r":stop=(\w+):")
_ID = re.compile(r'"(?:id|tool_use_id)": "(toolu_\w+)"')
_NAME = re.compile(r'"name": "(\w+)"')


def _stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def timeline() -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in TIMELINE.read_bytes().splitlines() if x.strip()]


def timeline_session_id() -> str:
    for ev in timeline():
        if ev["what"] == "sessions-file" and ev["path"].endswith(".json"):
            return str(orjson.loads(ev["content"])["sessionId"])
    raise AssertionError("no live-process file in the timeline")


def record_of(rec: str, sid: str, *, agent_id: str | None) -> dict[str, Any]:
    """A transcript record shaped like Claude Code's, rebuilt from a timeline descriptor."""
    base: dict[str, Any] = {
        "parentUuid": None,
        "isSidechain": agent_id is not None,
        "userType": "external",
        "cwd": CWD,
        "sessionId": sid,
        "version": "2.1.332",
        "entrypoint": "sdk-cli",
        "uuid": str(uuid.uuid4()),
        "timestamp": _stamp(),
    }
    if agent_id is not None:
        base["agentId"] = agent_id
    m = _KINDS.match(rec)
    if m is None:
        if rec.startswith("attachment/"):
            return {**base, "type": "attachment", "attachment": {"type": rec.split("/", 1)[1]}}
        return {"type": rec, "sessionId": sid}  # bookkeeping: no envelope
    role, kinds = m.group(1), m.group(2)
    if kinds == "str":
        text = rec.split(":str:", 1)[1].strip("'")
        return {**base, "type": "user", "message": {"role": "user", "content": text}}
    names = orjson.loads(kinds.replace("'", '"'))
    ids, tool_names = _ID.findall(rec), _NAME.findall(rec)
    content: list[dict[str, Any]] = []
    for kind in names:
        if kind == "thinking":
            content.append({"type": "thinking", "thinking": "thinking", "signature": "sig"})
        elif kind == "text":
            text = "[Request interrupted by user]" if "[Request interrupted" in rec else "text"
            content.append({"type": "text", "text": text})
        elif kind == "tool_use":
            name = tool_names[0] if tool_names else "Read"
            content.append(
                {"type": "tool_use", "id": ids[0] if ids else "toolu_x", "name": name, "input": {}}
            )
        elif kind == "tool_result":
            content.append(
                {
                    "type": "tool_result",
                    "tool_use_id": ids[0] if ids else "toolu_x",
                    "content": "ok",
                }
            )
    if role == "user":
        return {**base, "type": "user", "message": {"role": "user", "content": content}}
    stop = _STOP.search(rec)
    stop_reason = None if stop is None or stop.group(1) == "None" else stop.group(1)
    message = {
        "id": f"msg_{uuid.uuid4().hex[:12]}",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    return {**base, "type": "assistant", "message": message}


@dataclass
class Replay:
    """Where a replay writes, and the stand-in processes of its CLI runs."""

    claude_dir: Path
    sid: str = field(default_factory=timeline_session_id)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    #: (event, monotonic time written) for each CLI exit, for timing assertions.
    exits: list[float] = field(default_factory=list)

    @property
    def main(self) -> Path:
        return self.claude_dir / "projects" / PROJECT / f"{self.sid}.jsonl"

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait(10)

    def run(
        self, *, max_gap_s: float = 0.5, on_event: Callable[[dict[str, Any]], None] | None = None
    ) -> None:
        """Write the timeline's events with their timing (gaps capped at ``max_gap_s``)."""
        sessions = self.claude_dir / "sessions"
        sessions.mkdir(parents=True, exist_ok=True)
        self.main.parent.mkdir(parents=True, exist_ok=True)
        pids: dict[int, int] = {}
        last_t: float | None = None
        for ev in timeline():
            if last_t is not None:
                time.sleep(min(max(ev["t"] - last_t, 0.0), max_gap_s))
            last_t = ev["t"]
            what = ev["what"]
            if what in ("cli-start", "cli2-start"):
                proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
                self.procs.append(proc)
            elif what == "sessions-file" and ev["path"].endswith(".json"):
                body = orjson.loads(ev["content"])
                real = pids.setdefault(int(body["pid"]), self.procs[-1].pid)
                body["pid"] = real
                tmp = sessions / f".{real}.tmp"
                tmp.write_bytes(orjson.dumps(body))
                tmp.rename(sessions / f"{real}.json")
            elif what == "sessions-file-removed" and ev["path"].endswith(".json"):
                real = pids[int(ev["path"].split(".")[0])]
                (sessions / f"{real}.json").unlink(missing_ok=True)
            elif what == "line":
                self._line(ev)
            elif what in ("cli-exit", "cli2-exit"):
                proc = self.procs[-1]
                proc.kill()
                proc.wait(10)
                self.exits.append(time.monotonic())
            if on_event is not None:
                on_event(ev)

    def _line(self, ev: dict[str, Any]) -> None:
        name = ev["file"]
        if "/subagents/" in name:
            agent = name.rsplit("/", 1)[1].removesuffix(".jsonl")
            path = self.main.parent / self.sid / "subagents" / f"{agent}.jsonl"
            rec = record_of(ev["rec"], self.sid, agent_id=agent.removeprefix("agent-"))
        else:
            path = self.main
            rec = record_of(ev["rec"], self.sid, agent_id=None)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as f:
            f.write(orjson.dumps(rec) + b"\n")


def write_transcript_live(src: Path, dest: Path, *, max_gap_s: float = 0.2) -> int:
    """Append ``src``'s lines to ``dest`` with their recorded spacing (gaps capped), each
    line's ``timestamp`` moved to now; returns the number of lines written."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    last: datetime | None = None
    n = 0
    for raw in src.read_bytes().splitlines():
        if not raw.strip():
            continue
        rec = orjson.loads(raw)
        stamp = rec.get("timestamp") if isinstance(rec, dict) else None
        if isinstance(stamp, str):
            at = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
            if last is not None:
                time.sleep(min(max((at - last).total_seconds(), 0.0), max_gap_s))
            last = at
            rec["timestamp"] = _stamp()
            raw = orjson.dumps(rec)
        with open(dest, "ab") as f:
            f.write(raw + b"\n")
        n += 1
    return n
