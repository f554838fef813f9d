"""Assertions on a scenario's report (run outside the namespace, on plain JSON).

The issue's "Done when": every line once; each prompt exactly one ``working`` then
``idle``; no session ``live`` two seconds after its process exited; a terminal-answered
permission resolved on the client within a second; every failed command answered.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any

from relaybus.shared.transcript.projection import project_line

Report = dict[str, Any]
Frame = dict[str, Any]


def _key(event_or_record: dict[str, Any] | None, raw: Any) -> str:
    """A published line's identity: its ``uuid``, else a hash of the whole record."""
    uuid = (event_or_record or {}).get("uuid")
    if isinstance(uuid, str) and uuid:
        return uuid
    return hashlib.sha1(json.dumps(raw, sort_keys=True).encode()).hexdigest()


def published_lines(report: Report, sid: str) -> Counter[str]:
    """The lines of ``sid``'s transcript and its sub-agent files that the projection publishes."""
    keys: Counter[str] = Counter()
    for name, lines in report["transcripts"].items():
        if f"{sid}.jsonl" not in name and f"/{sid}/subagents/" not in name:
            continue
        for line in lines:
            p = project_line(line.encode())
            if p.publish and p.event is not None:
                keys[_key(p.event, json.loads(line))] += 1
    return keys


def events(frames: list[Frame], sid: str) -> list[Frame]:
    return [f for f in frames if f["type"] == "session_event" and f["sessionId"] == sid]


def received_lines(frames: list[Frame], sid: str) -> Counter[str]:
    return Counter(_key(f["event"], f["event"].get("data")) for f in events(frames, sid))


def assert_every_line_once(report: Report, sid: str, client: str = "watcher") -> None:
    """Each published transcript line reached the client exactly once; none twice.

    (Lines without a ``uuid`` are known by their content; identical ones count together.)
    """
    want = published_lines(report, sid)
    got = received_lines(report["clients"][client], sid)
    assert want, f"no published lines for {sid}"
    missing = [k for k, n in want.items() if got[k] < n]
    twice = {k: n for k, n in got.items() if n > max(1, want[k])}
    assert not missing, (
        f"{len(missing)} of {len(want)} lines never reached the client: {missing[:5]}"
    )
    assert not twice, f"lines delivered more than once: {twice}"


def states(frames: list[Frame], sid: str) -> list[str]:
    """The ``turn_status`` states a client was told for ``sid``, in order."""
    return [f["state"] for f in frames if f["type"] == "turn_status" and f["sessionId"] == sid]


def collapsed(values: list[str]) -> list[str]:
    """``values`` without consecutive repeats (``waiting`` may be re-announced with a new reason)."""
    return [v for i, v in enumerate(values) if i == 0 or values[i - 1] != v]


def of_type(frames: list[Frame], type_: str, sid: str | None = None) -> list[Frame]:
    return [f for f in frames if f["type"] == type_ and (sid is None or f.get("sessionId") == sid)]


def assert_not_live_after(
    report: Report,
    sid: str,
    exited_at: float,
    *,
    until: float = float("inf"),
    client: str = "observer",
) -> None:
    """``session_ended`` reached the client within 2 s of the process's exit, nothing started
    it again before ``until`` (the next run), and the listing taken 2 s after the exit says
    ``live: false``."""
    frames = report["clients"][client]
    ended = [f for f in of_type(frames, "session_ended", sid) if f["_at"] >= exited_at - 1]
    assert ended, f"no session_ended for {sid} after its process exited"
    assert ended[0]["_at"] - exited_at < 2.0, (
        f"session_ended {ended[0]['_at'] - exited_at:.2f}s after exit"
    )
    restarted = [
        f for f in of_type(frames, "session_started", sid) if ended[0]["_at"] < f["_at"] < until
    ]
    assert not restarted, "session_started again after its process had exited"
    listing = [
        x
        for x in report["notes"].get("listings", [])
        if x["sid"] == sid and x["exited"] == exited_at
    ]
    assert listing, "the scenario took no listing after the exit"
    info = next(s for s in listing[0]["sessions"] if s["id"] == sid)
    assert info["live"] is False, f"session still live 2 s after exit: {info}"


def tool_results(frames: list[Frame], sid: str) -> list[dict[str, Any]]:
    return [
        b for f in events(frames, sid) for b in f["event"]["blocks"] if b["kind"] == "tool_result"
    ]


def tools(frames: list[Frame], sid: str) -> list[dict[str, Any]]:
    return [b for f in events(frames, sid) for b in f["event"]["blocks"] if b["kind"] == "tool"]


def texts(frames: list[Frame], sid: str) -> list[str]:
    return [
        b["text"] for f in events(frames, sid) for b in f["event"]["blocks"] if b["kind"] == "text"
    ]
