"""Fuzz a running collector: random valid-ish and corrupt JSONL into a live transcript.

A real collector process tails a transcript in a real directory and publishes into a real
Redis. Hypothesis draws batches of lines — well-formed user lines with unique texts, real
fixture lines with a field dropped, retyped or cut short, random bytes, invalid UTF-8, JSON
that is not an object — and writes each batch in random pieces (a line may arrive in two
writes). The collector must not crash, and every well-formed line must be published
exactly once, in file order.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relaybus.shared.store.keys import Keys
from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import append, frames_of, transcript, user_line
from tests.support.fuzz import json_values
from tests.support.servers import RedisServer
from tests.support.wait import poll

SID = "f0230000-0000-4000-8000-00000000f023"
FIXTURES = Path(__file__).resolve().parents[1] / "data" / "claude-jsonl"
REAL = [
    orjson.loads(ln)
    for p in sorted(FIXTURES.glob("*.jsonl"))
    for ln in p.read_bytes().splitlines()[:60]
    if ln.strip()
]


@st.composite
def mutated_record(draw: st.DrawFn) -> bytes:
    """A real transcript record with a field dropped or retyped, or its bytes cut."""
    rec = dict(draw(st.sampled_from(REAL)))
    rec["sessionId"] = SID
    how = draw(st.sampled_from(["drop", "retype", "cut", "deep"]))
    if how == "drop":
        rec.pop(draw(st.sampled_from(sorted(rec))))
    elif how == "retype":
        rec[draw(st.sampled_from(sorted(rec)))] = draw(json_values)
    elif how == "deep" and isinstance(rec.get("message"), dict):
        rec["message"] = dict(rec["message"]) | {"content": draw(json_values)}
    raw = orjson.dumps(rec)
    if how == "cut":
        raw = raw[: draw(st.integers(0, len(raw) - 1))]
    return raw


noise = st.one_of(
    mutated_record(),
    st.binary(max_size=200),
    st.binary(min_size=1, max_size=40).map(lambda b: b"\xff\xfe" + b),  # not UTF-8
    json_values.map(orjson.dumps),
    st.text(max_size=100).map(str.encode),
).map(lambda raw: raw.replace(b"\n", b" ").replace(b"\r", b" ") + b"\n")

#: A batch: noise lines and, marked True, a slot for the next well-formed line.
batch = st.lists(st.one_of(noise, st.just(True)), min_size=10, max_size=50)


@pytest.fixture
def live(server: RedisServer, tmp_path: Path, namespace: str) -> Iterator[Any]:
    claude = tmp_path / "claude"
    (claude / "projects").mkdir(parents=True)
    (claude / "sessions").mkdir()
    path = transcript(claude, SID)
    append(path, user_line(SID, "ok-0"))
    with CollectorProc(redis_url=server.url, namespace=namespace, claude_dir=claude) as proc:
        state = {
            "proc": proc,
            "path": path,
            "ok": 1,
            "lines": 1,
            "client": server.client(),
            "keys": Keys(namespace),
        }
        poll(lambda: _published(state) == ["ok-0"] or None, 30)
        yield state


def _published(live: Any) -> list[str]:
    """The texts of the well-formed ``ok-N`` user lines in the log, in log order."""
    out = []
    for frame in frames_of(live["client"], live["keys"].log):
        event = frame.get("event") or {}
        blocks = event.get("blocks") or [{}]
        text = blocks[0].get("text")
        if event.get("type") == "user" and isinstance(text, str) and text.startswith("ok-"):
            out.append(text)
    return out


def test_every_well_formed_line_is_published_once_and_nothing_crashes(live: Any) -> None:
    @settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
    @given(lines=batch, cuts=st.lists(st.integers(1, 4000), max_size=3))
    def one_batch(lines: list[bytes | bool], cuts: list[int]) -> None:
        data = b""
        for item in [*lines, True]:  # every batch ends with a well-formed line
            if item is True:
                data += user_line(SID, f"ok-{live['ok']}")
                live["ok"] += 1
            else:
                assert isinstance(item, bytes)
                data += item
            live["lines"] += 1
        written = 0
        for cut in sorted({c % len(data) for c in cuts} | {len(data)}):  # writes end mid-line
            if cut > written:
                append(live["path"], data[written:cut])
                written = cut
        want = [f"ok-{i}" for i in range(live["ok"])]
        got = poll(lambda: ((p := _published(live))[-1:] == want[-1:] and p) or None, 30)
        assert got == want
        assert live["proc"].alive()

    one_batch()
    assert live["lines"] >= 1000, live["lines"]  # 100 batches of 11+ lines went through
    assert live["proc"].alive()
    assert "Traceback" not in live["proc"].log_path.read_text(errors="replace")
