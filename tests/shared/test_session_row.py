"""The session hash's one typed view, and the one turn-change encoding."""

from __future__ import annotations

import orjson

from relaybus.shared.aio import Backoff
from relaybus.shared.store.session_row import Field, SessionRow, turn_update


def test_parse_reads_every_field_typed() -> None:
    """Strings, numbers, flags and absent fields parse to their typed values."""
    raw = {
        b"host": b"box",
        b"cwd": b"/w",
        b"title": b"T",
        b"titleRank": b"3",
        b"startedAt": b"17",
        b"lastSeqId": b"42",
        b"sessionSeq": b"7",
        b"state": b"working",
        b"since": b"99",
        b"waitingFor": b"",
        b"live": b"1",
        b"hasContent": b"0",
        b"historyLoaded": b"0",
        b"pid": b"oops",
    }
    row = SessionRow.parse(raw)
    assert (row.host, row.cwd, row.title, row.title_rank) == ("box", "/w", "T", 3)
    assert (row.started_at, row.last_seq_id, row.session_seq) == (17, 42, 7)
    assert (row.state, row.since, row.waiting_for) == ("working", 99, None)
    assert (row.live, row.ended, row.has_content, row.history_loaded) == (True, False, False, False)
    assert row.pid is None and row.first_prompt_rank is None and row.last_activity == 0


def test_absent_flags_are_none() -> None:
    """A hash from before a flag existed leaves it unknown, not false."""
    row = SessionRow.parse({})
    assert row.has_content is None and row.history_loaded is None and row.state is None


def test_turn_update_is_event_and_fields() -> None:
    """One turn change gives its turn_status prefix and the hash fields, waitingFor cleared."""
    event, fields = turn_update("s1", "waiting", 5, "permission")
    frame = orjson.loads(event.prefix + b"}")
    assert event.kind == "turn_status" and not event.session_stream
    assert frame == {
        "type": "turn_status",
        "sessionId": "s1",
        "state": "waiting",
        "since": 5,
        "waitingFor": "permission",
    }
    assert fields[Field.WAITING_FOR] == "permission"
    assert turn_update("s1", "idle", 6, None)[1] == {
        Field.STATE: "idle",
        Field.SINCE: "6",
        Field.WAITING_FOR: "",
    }


def test_backoff_doubles_up_to_its_cap_and_resets() -> None:
    """Delays double from first_s, stay within [half, full] of the step, cap at max_s."""
    backoff = Backoff(first_s=0.1, max_s=0.4)
    steps = [backoff.next() for _ in range(5)]
    for delay, full in zip(steps, [0.1, 0.2, 0.4, 0.4, 0.4], strict=True):
        assert full / 2 <= delay <= full
    backoff.reset()
    assert backoff.next() <= 0.1
