"""A backfill projects its window and only the stateful lines before it, with the outcome of
a full read (real transcripts from tests/data/claude-jsonl, a real server)."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import orjson
import pytest
from prometheus_client import CollectorRegistry

from relaybus.collector import backfill, backfill_read
from relaybus.collector.batch_plan import BatchPlan
from relaybus.collector.metrics import CollectorMetrics
from relaybus.collector.projector import Projector
from relaybus.collector.session_state import SessionState
from relaybus.collector.tailer import probe
from relaybus.shared.transcript import projection
from tests.conftest import FIXTURES, make_settings
from tests.support.collector_records import (
    append,
    assistant_line,
    fixture_records,
    in_session,
    line,
    progress_line,
    record,
    transcript,
    user_line,
)
from tests.support.collector_rig import RigFactory

SID = "5e551011-0000-4000-8000-00000000b16f"


def big_transcript(path: Path, repeats: int) -> None:
    """The fixtures ``repeats`` times under one session (fresh uuids), a custom title early
    and a last prompt without its answer: title and turn come from both ends."""
    recs = fixture_records()
    with open(path, "wb") as f:
        f.write(user_line(SID, "the very first prompt"))
        f.write(line({"type": "custom-title", "customTitle": "named early", "sessionId": SID}))
        for _ in range(repeats):
            for rec in recs:
                f.write(in_session(rec, SID))
        f.write(user_line(SID, "still working on it"))


def test_every_stateful_fixture_line_is_found_by_the_search(tmp_path: Path) -> None:
    """The substring searches (per line and per chunk) find every line project_line gives
    state facts for: a superset, so skipping the others changes nothing."""
    path = tmp_path / "all.jsonl"
    path.write_bytes(b"".join(p.read_bytes() for p in sorted(FIXTURES.glob("*.jsonl"))))
    pr = probe(path)
    assert pr is not None and pr.identity is not None
    known = SessionState(SID, cwd="/known", entrypoint="cli")  # no head lines wanted
    scan = backfill_read._Scan(path, pr.identity, pr.size, 1 << 20, known)
    found = {ln.end for ln in scan.lines()}
    stateful, offset = 0, 0
    for raw in path.read_bytes().splitlines(keepends=True):
        offset += len(raw)
        p = projection.project_line(raw)
        if (
            (not p.is_sidechain and (p.turn is not None or p.title is not None))
            or p.drop_reason == "warmup"
            or p.agent_parent is not None
        ):
            stateful += 1
            assert projection.may_be_stateful(raw), raw[:200]
            assert projection.hint_line(raw.rstrip(b"\n")).stateful, raw[:200]
            assert offset in found, raw[:200]
    assert stateful > 50
    assert len(found) < scan.read / 4  # most lines are never split off


class _Reader:
    """A transcript read as a backfill reads it, whole or collapsed, into ``state``."""

    def __init__(self, path: Path, state: SessionState, events: int) -> None:
        settings = make_settings("redis://127.0.0.1:1/0", "ns", backfill_events=events)
        self.projector = Projector(settings, CollectorMetrics(CollectorRegistry()))
        pr = probe(path)
        assert pr is not None and pr.identity is not None
        self.path, self.ident, self.state = path, pr.identity, state
        self.end = backfill.last_line_end(path, pr.size)

    def new_plan(self) -> BatchPlan:
        return self.projector.plan(self.state, collapse=True)

    def whole(self) -> backfill_read.Read:
        return backfill_read._whole(
            self.projector, self.new_plan(), self.path, self.ident, self.end
        )

    def collapse(self, abandon: threading.Event | None = None) -> backfill_read.Read:
        return backfill_read.collapse(
            self.projector, self.new_plan, self.path, self.ident, self.end, abandon=abandon
        )


def test_collapse_equals_a_full_read_and_projects_a_fraction(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    big_transcript(path, repeats=2)
    reader = _Reader(path, SessionState(SID), 40)
    whole, split, end = reader.whole(), reader.collapse(), reader.end
    assert split.window > 0 and split.end == whole.end == end
    assert split.projected < whole.projected / 3  # most lines were only searched
    assert [(e.kind, e.prefix) for e in split.plan.events] == [
        (e.kind, e.prefix) for e in whole.plan.events
    ]
    assert split.plan.hash == whole.plan.hash
    assert split.plan.state.title == "named early"
    assert split.plan.state.first_prompt == "the very first prompt"
    assert split.plan.state.turn.state == "working"


async def test_engine_backfill_of_a_big_file_publishes_what_a_full_read_would(
    make_rig: RigFactory, claude_dir: Path
) -> None:
    path = transcript(claude_dir, SID)
    big_transcript(path, repeats=2)
    rig = make_rig(backfill_events=30)
    await rig.engine.start()
    frames = await rig.events(SID)
    projector = Projector(rig.settings, CollectorMetrics(CollectorRegistry()))
    pr = probe(path)
    assert pr is not None and pr.identity is not None
    end = backfill.last_line_end(path, pr.size)
    whole = backfill_read._whole(
        projector, projector.plan(SessionState(SID), collapse=True), path, pr.identity, end
    )
    expected = [
        orjson.loads(e.prefix + b"}")["event"]
        for e in whole.plan.events
        if e.kind == "session_event"
    ]
    assert len(frames) == 30 and [f["event"] for f in frames] == expected
    row = await rig.client.hgetall(rig.keys.session(SID))
    assert row[b"title"] == b"named early"
    assert row[b"firstPrompt"] == b"the very first prompt"
    assert row[b"state"] == b"working"
    committed = await rig.client.hget(
        rig.keys.offsets("testhost"), path.relative_to(claude_dir).as_posix()
    )
    assert isinstance(committed, bytes) and int(committed.split(b":")[0]) == end
    total = path.read_bytes().count(b"\n")
    assert rig.metric("relaybus_collector_lines_read_total") < total / 3
    # From here on every new line is published once.
    append(path, line(record(SID, "user", message={"role": "user", "content": "next"})))
    await rig.engine.sync_path(path)
    frames = await rig.events(SID)
    assert len(frames) == 31 and frames[-1]["event"]["blocks"][0]["text"] == "next"


def _both(path: Path, state: SessionState, events: int) -> tuple[backfill_read.Read, ...]:
    reader = _Reader(path, state, events)
    whole, split, end = reader.whole(), reader.collapse(), reader.end
    assert [(e.kind, e.prefix) for e in split.plan.events] == [
        (e.kind, e.prefix) for e in whole.plan.events
    ]
    assert split.plan.hash == whole.plan.hash and split.end == whole.end == end
    return whole, split


def _pairs(n: int) -> bytes:
    return b"".join(user_line(SID, f"q{i}") + assistant_line(SID, f"a{i}") for i in range(n))


def test_a_summary_and_its_leaf_before_the_window(tmp_path: Path) -> None:
    leaf = str(uuid.uuid4())
    path = tmp_path / "s.jsonl"
    summary = {"type": "summary", "summary": "Summed up", "leafUuid": leaf}
    path.write_bytes(line(summary) + user_line(SID, "first", uuid=leaf) + _pairs(200))
    _whole, split = _both(path, SessionState(SID), 20)
    assert split.window > 0 and split.plan.state.title == "Summed up"


def test_a_first_prompt_longer_than_a_chunk(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    big = "x" * (backfill_read.BATCH_BYTES + 1000)
    path.write_bytes(user_line(SID, big) + _pairs(200))
    _whole, split = _both(path, SessionState(SID), 20)
    assert split.window > 0 and (split.plan.state.first_prompt or "").startswith("xxx")


def test_a_backstopped_turn_is_read_whole(tmp_path: Path) -> None:
    """After the backstop any activity line revives the turn: every line counts."""
    path = tmp_path / "b.jsonl"
    path.write_bytes(_pairs(200))
    state = SessionState(SID)
    state.turn.backstopped = True
    _whole, split = _both(path, state, 20)
    assert split.window == 0


def test_a_window_with_nothing_to_show_is_read_whole(tmp_path: Path) -> None:
    """Only /goal status lines at the end: whether the session has content is told by a
    line before them that changes no other state (an answer in the middle of a turn)."""
    goal = {"type": "goal_status", "goal": "g", "status": "active"}
    att = record(SID, "attachment", attachment=goal)
    path = tmp_path / "g.jsonl"
    middle = assistant_line(SID, "working on it", stop=None)
    path.write_bytes(progress_line(SID) + middle + b"".join(line(att) for _ in range(100)))
    _whole, split = _both(path, SessionState(SID), 20)
    assert split.window == 0 and split.plan.state.has_content


class _SetAfter(threading.Event):
    """An event that reads as set from its ``n + 1``-th look on, counting the looks."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.looks = n, 0

    def is_set(self) -> bool:
        self.looks += 1
        return self.looks > self.n


@pytest.mark.parametrize("backstopped", [False, True], ids=["split", "whole"])
def test_an_abandoned_read_stops_at_its_next_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backstopped: bool
) -> None:
    """The collector stopping sets ``abandon``: the read (in its thread) raises Abandoned at
    the next batch or chunk, wherever it is, instead of reading the file to its end."""
    monkeypatch.setattr(backfill_read, "BATCH_LINES", 100)  # small batches: a small file
    monkeypatch.setattr(backfill_read, "BATCH_BYTES", 16 * 1024)  # reads in many of them
    path = tmp_path / "a.jsonl"
    path.write_bytes(_pairs(1_000))
    state = SessionState(SID)
    state.turn.backstopped = backstopped
    reader = _Reader(path, state, 20)
    never = _SetAfter(10**9)
    done = reader.collapse(never)
    assert done.end == reader.end and (done.window > 0) is not backstopped
    assert never.looks > 4
    for n in (0, never.looks // 2, never.looks - 1):
        with pytest.raises(backfill_read.Abandoned):
            reader.collapse(_SetAfter(n))
