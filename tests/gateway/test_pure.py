"""The pure core: replay merge, gap arithmetic, frame parsing, tokens, event variants."""

from __future__ import annotations

import orjson
import pytest

from relaybus.gateway.auth import Access, AuthConfigError, TokenTable, token_from_request
from relaybus.gateway.delivery.events import Event, from_entry, ws_text_frame
from relaybus.gateway.delivery.replay import Gap, leading_gap, merge, with_held_gaps
from relaybus.gateway.protocol import (
    Hello,
    ProtocolError,
    WatchSession,
    accepted_capabilities,
    parse_client_frame,
)
from relaybus.shared.wire.errors import ErrorCode
from tests.conftest import make_settings
from tests.support.gateway_publish import event_prefix


def ev(seq: int, qseq: int | None = None, sid: str = "s") -> Event:
    tail = f',"seqId":{seq}' + (f',"sessionSeq":{qseq}' if qseq is not None else "") + "}"
    return Event(seq, sid, "session_event", event_prefix(sid, f"t{seq}", 10) + tail.encode(), 1)


def test_merge_drops_duplicates_and_orders() -> None:
    """History then buffered live: overlap dropped, result in seq order."""
    m = merge([ev(1), ev(2), ev(3)], [ev(3), ev(4)], floor=0)
    assert [e.seq for e in m.items if isinstance(e, Event)] == [1, 2, 3, 4] and m.last_seq == 4


def test_merge_floor_and_late_history() -> None:
    """Events at or below the floor are dropped; live older than history is sorted in."""
    m = merge([ev(5), ev(7)], [ev(6), ev(8)], floor=5)
    assert [e.seq for e in m.items if isinstance(e, Event)] == [6, 7, 8]


def test_merge_reports_holes() -> None:
    """A hole in the contiguous counter becomes a Gap item before the next event."""
    m = merge([ev(1), ev(2)], [ev(5)])
    assert m.items[2] == Gap(3, 4, "trimmed")
    s = merge([ev(10, 1), ev(20, 2)], [ev(40, 4)], by_session_seq=True)
    assert [type(i).__name__ for i in s.items] == ["Event", "Event", "Gap", "Event"]
    assert s.items[2] == Gap(21, 39, "hole")
    ok = merge([ev(10, 1), ev(20, 2)], [ev(30, 3)], by_session_seq=True)
    assert all(isinstance(i, Event) for i in ok.items)


def test_merge_reports_a_hole_above_the_floor() -> None:
    """A live buffer that starts above floor + 1 missed events: a Gap comes first."""
    m = merge([], [ev(8), ev(9)], floor=5)
    assert m.items[0] == Gap(6, 7, "trimmed") and m.last_seq == 9
    assert all(isinstance(i, Event) for i in merge([], [ev(6)], floor=5).items)
    assert all(isinstance(i, Event) for i in merge([], [ev(8)], floor=5, holes=False).items)


def test_held_reader_gaps_follow_the_replay() -> None:
    """A reader gap announced during a resume: dropped where the replay read the log
    itself, clipped above it, placed before the first later event, never reported twice."""

    def shape(items: list[Event | Gap]) -> list[int | Gap]:
        return [i if isinstance(i, Gap) else i.seq for i in items]

    m = merge([], [ev(12), ev(20)], floor=10, holes=False)
    items = with_held_gaps(
        m, [Gap(3, 8, "trimmed"), Gap(9, 11, "trimmed"), Gap(13, 19, "trimmed")], covered=10
    )
    assert shape(items) == [Gap(11, 11, "trimmed"), 12, Gap(13, 19, "trimmed"), 20]
    tail = with_held_gaps(merge([], [ev(12)], floor=11), [Gap(13, 15, "trimmed")], covered=11)
    assert shape(tail) == [12, Gap(13, 15, "trimmed")]
    seen = merge([], [ev(14)], floor=10)  # the merge found the hole itself
    assert with_held_gaps(seen, [Gap(11, 13, "trimmed")], covered=10) == seen.items


def test_leading_gap() -> None:
    """Trimmed past 'after' -> gap to the first retained entry; nothing retained -> gap to head."""
    assert leading_gap(5, 6, 10) is None
    assert leading_gap(5, 9, 10) == Gap(6, 8, "trimmed")
    assert leading_gap(5, None, 10) == Gap(6, 10, "trimmed")
    assert leading_gap(10, None, 10) is None


def test_parse_valid_frames() -> None:
    """Known messages validate into typed models; unknown fields are ignored."""
    h = parse_client_frame(b'{"type":"hello","capabilities":["x"],"lastSeqId":4,"new":1}', 1000)
    assert isinstance(h, Hello) and h.lastSeqId == 4
    w = parse_client_frame('{"type":"watch_session","sessionId":"a","requestId":"r"}', 1000)
    assert isinstance(w, WatchSession) and w.requestId == "r" and w.sinceSeqId is None


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("{", ErrorCode.BAD_JSON),
        ("null", ErrorCode.NOT_OBJECT),
        ('{"type":null}', ErrorCode.INVALID_FIELD),
        ('{"type":"x"}', ErrorCode.UNKNOWN_TYPE),
        ('{"type":"hello","capabilities":"all"}', ErrorCode.INVALID_FIELD),
        ('{"type":"watch_session","sessionId":""}', ErrorCode.INVALID_FIELD),
        ('{"type":"watch_session","sessionId":"abc:events"}', ErrorCode.INVALID_FIELD),
        (
            '{"type":"prompt","sessionId":"--dangerously-skip-permissions","message":"x"}',
            ErrorCode.INVALID_FIELD,
        ),
        ('{"type":"new_conversation","sessionId":"a/../b"}', ErrorCode.INVALID_FIELD),
        ('{"type":"new_conversation","host":"h:x"}', ErrorCode.INVALID_FIELD),
        ('{"type":"accept_diff","requestKey":"k:1"}', ErrorCode.INVALID_FIELD),
        ('{"type":"prompt","sessionId":"a"}', ErrorCode.INVALID_FIELD),
        ('{"type":"list_sessions","p":"' + "x" * 100 + '"}', ErrorCode.FRAME_TOO_LARGE),
    ],
)
def test_parse_rejects(raw: str, code: ErrorCode) -> None:
    """Each bad input class maps to its error code."""
    with pytest.raises(ProtocolError) as info:
        parse_client_frame(raw, 100)
    assert info.value.code == code


def test_accepted_capabilities_only_known() -> None:
    """Unknown capabilities are dropped; order is the server's."""
    assert accepted_capabilities(["blocks_only", "x", "session_subscriptions"]) == [
        "session_subscriptions",
        "blocks_only",
    ]


def test_token_table() -> None:
    """'secret' is full access, 'secret:read' read-only; wrong tokens are refused."""
    t = TokenTable.from_settings(make_settings("redis://x", "n", tokens="a, b:read ,"))
    assert (t.check("a"), t.check("b"), t.check("b:read"), t.check(None)) == (
        Access.FULL,
        Access.READ,
        None,
        None,
    )
    anon = TokenTable.from_settings(
        make_settings("redis://x", "n", tokens="", allow_anonymous=True)
    )
    assert anon.check(None) is Access.FULL and anon.check("zz") is None
    with pytest.raises(AuthConfigError):
        TokenTable.from_settings(make_settings("redis://x", "n", tokens=" , "))


def test_token_sources() -> None:
    """Bearer header wins over the query parameter."""
    assert token_from_request({"authorization": "Bearer h"}, {"token": "q"}) == "h"
    assert token_from_request({"authorization": "Basic h"}, {"token": "q"}) == "q"
    assert token_from_request({}, {}) is None


def test_event_variants() -> None:
    """An entry is decoded once; blocks_only drops event.data but keeps ids and blocks."""
    e = from_entry(
        b"7-0",
        {
            b"s": b"s",
            b"k": b"session_event",
            b"t": b"5",
            b"f": event_prefix("s", "hi", 10) + b',"seqId":7,"sessionSeq":3}',
        },
    )
    assert (e.seq, e.sid, e.stamp_ms, e.session_seq) == (7, "s", 5, 3)
    assert e.text is e.text
    slim = orjson.loads(e.blocks_only_text)
    assert "data" not in slim["event"] and slim["event"]["blocks"][0]["text"] == "hi"
    assert (slim["seqId"], slim["sessionSeq"]) == (7, 3)
    assert e.blocks_only_text is e.blocks_only_text


def test_wire_frame_matches_websockets() -> None:
    """The pre-encoded frame equals what the websockets library serialises, at every length."""
    from websockets.frames import Frame, Opcode

    for n in (0, 125, 126, 65535, 65536, 70000):
        payload = b"x" * n
        expected = Frame(Opcode.TEXT, payload).serialize(mask=False, extensions=[])
        assert ws_text_frame(payload) == expected
