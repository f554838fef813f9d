"""StreamState alone (no socket, no Redis): no duplicate and no hole across resume and watch."""

from __future__ import annotations

from relaybus.gateway.delivery.events import Event
from relaybus.gateway.delivery.replay import Gap, Merged
from relaybus.gateway.delivery.runs import Run
from relaybus.gateway.delivery.stream_state import Admit, StreamState
from relaybus.shared.wire import frames as wire_frames

SUBS = ["session_subscriptions"]


def ev(seq: int, sid: str = "s", qseq: int | None = None, kind: str = "session_event") -> Event:
    tail = f',"sessionSeq":{qseq}' if qseq is not None else ""
    return Event(seq, sid, kind, f'{{"seqId":{seq}{tail}}}'.encode(), 1)


def seqs(items: list[Event | Gap]) -> list[int | Gap]:
    return [i if isinstance(i, Gap) else i.seq for i in items]


def live_v1(position: int = 10) -> StreamState:
    """A v1 client: resolved without replay at ``position``, now live on the firehose."""
    st = StreamState(position=position, buffer_max=100)
    st.welcome()
    assert st.finish_resume(st.buffer_floor, holes=True) == []
    return st


def live_subscriber(position: int = 10, *, caps: list[str] | None = None) -> StreamState:
    st = StreamState(position=position, buffer_max=100)
    assert st.accept_hello(caps if caps is not None else SUBS, position) is False
    st.welcome()
    st.finish_resume(position, holes=False)
    return st


def test_buffers_until_the_resume_finishes_then_sends_each_event_once() -> None:
    """An event both replayed and buffered during the resume is placed once; live resumes above it."""
    st = StreamState(position=10, buffer_max=100)
    assert st.firehose
    assert [st.admit(ev(s)) for s in (11, 12, 13)] == [Admit.BUFFERED] * 3
    # The replay read the log up to 12: only 13 comes from the buffer.
    assert seqs(st.finish_resume(12, holes=False)) == [13]
    assert st.global_buffer is None and st.global_mark == 13
    assert [st.admit(ev(s)) for s in (12, 13, 14)] == [Admit.SKIP, Admit.SKIP, Admit.SEND]


def test_resume_without_replay_reports_a_hole_in_the_buffer() -> None:
    """A v1 client resolved live: the buffer above the floor is merged with its seq holes."""
    st = StreamState(position=10, buffer_max=100)
    for s in (11, 14):
        st.admit(ev(s))
    assert seqs(st.finish_resume(st.buffer_floor, holes=True)) == [11, Gap(12, 13, "trimmed"), 14]


def test_buffer_overflow_is_reported_not_stored() -> None:
    """A full buffer answers OVERFLOW (the connection closes as slow consumer)."""
    st = StreamState(position=0, buffer_max=2)
    assert [st.admit(ev(s)) for s in (1, 2, 3)] == [Admit.BUFFERED, Admit.BUFFERED, Admit.OVERFLOW]
    assert [e.seq for e in st.global_buffer or []] == [1, 2]


def test_a_gap_is_held_while_buffering_and_placed_after_the_replay() -> None:
    """A reader gap during the resume is held, then placed before the first event after it."""
    st = StreamState(position=10, buffer_max=100)
    assert st.hold_gap(Gap(11, 14, "trimmed")) is None
    st.admit(ev(15))
    assert seqs(st.finish_resume(10, holes=False)) == [Gap(11, 14, "trimmed"), 15]
    assert st.held_gaps == []


def test_a_held_gap_the_replay_covered_is_dropped() -> None:
    """The replay read past the gap itself (its own leading gap): the held one is not repeated."""
    st = StreamState(position=10, buffer_max=100)
    st.hold_gap(Gap(11, 14, "trimmed"))
    st.admit(ev(15))
    assert seqs(st.finish_resume(14, holes=False)) == [15]


def test_a_live_client_is_told_only_the_gap_above_its_mark() -> None:
    """Live and welcomed: the part of the gap above what it already has; nothing below it."""
    st = live_v1(position=20)
    assert st.hold_gap(Gap(15, 25, "trimmed")) == Gap(21, 25, "trimmed")
    assert st.hold_gap(Gap(5, 18, "trimmed")) is None
    unwelcomed = StreamState(position=20, buffer_max=100)
    unwelcomed.finish_resume(20, holes=True)
    assert unwelcomed.hold_gap(Gap(21, 25, "trimmed")) is None


def test_hello_takes_capabilities_and_a_late_hello_buffers_again() -> None:
    """A hello sets the capabilities; on a live v1 client it buffers again above the position."""
    st = StreamState(position=0, buffer_max=100)
    assert st.accept_hello(["blocks_only", "turn_status_observe"], 0) is False
    assert st.hello_done and st.blocks_only and st.observe and not st.subscriptions
    late = live_v1(position=10)
    assert late.admit(ev(11)) is Admit.SEND  # live, not buffering
    assert late.accept_hello(SUBS, 30) is True
    assert late.subscriptions and late.global_buffer == [] and late.buffer_floor == 30
    assert late.global_mark == 30 and late.firehose
    assert late.admit(ev(31)) is Admit.BUFFERED


def test_watch_replay_then_switch_sends_each_event_once() -> None:
    """Events buffered during a watch's replay: the replayed ones dropped, the rest once, then live above the mark."""
    st = live_subscriber()
    assert st.begin_watch("a") is False and st.begin_watch("a") is True
    assert not st.firehose
    for s, q in ((11, 3), (12, 4), (13, 5)):
        assert st.admit(ev(s, "a", q)) is Admit.BUFFERED
    replayed = Merged(last_seq=12, last=ev(12, "a", 4))  # the history read covered 11..12
    tail = st.finish_watch("a", replayed)
    assert [i.seq for i in tail.items if isinstance(i, Event)] == [13]
    assert "a" not in st.watch_buffers and st.session_marks["a"] == 13
    assert [st.admit(ev(s, "a")) for s in (13, 14)] == [Admit.SKIP, Admit.SEND]


def test_watch_switch_reports_a_session_hole() -> None:
    """A sessionSeq hole between the replay and the buffer becomes a gap (reason hole)."""
    st = live_subscriber()
    st.begin_watch("a")
    st.admit(ev(20, "a", 7))
    tail = st.finish_watch("a", Merged(last_seq=12, last=ev(12, "a", 4)))
    assert seqs(tail.items) == [Gap(13, 19, "hole"), 20]


def test_unwatch_drops_the_buffer_and_the_mark() -> None:
    """Unwatch forgets the session: buffer, mark and entitlement."""
    st = live_subscriber()
    st.begin_watch("a")
    st.admit(ev(11, "a"))
    st.unwatch("a")
    assert "a" not in st.watched and "a" not in st.watch_buffers and "a" not in st.session_marks
    assert st.admit(ev(12, "a")) is Admit.SKIP


def test_abandon_watch_stops_buffering_only() -> None:
    """A failed replay stops buffering; the session stays watched (a re-watch keeps its watch)."""
    st = live_subscriber()
    st.begin_watch("a")
    st.abandon_watch("a")
    assert "a" in st.watched and "a" not in st.watch_buffers
    assert st.admit(ev(11, "a")) is Admit.SEND


def test_entitlement_by_capability() -> None:
    """turn_status needs observe, session events a watch (with subscriptions), broadcasts go to all."""
    plain = live_subscriber()
    observer = live_subscriber(caps=[*SUBS, "turn_status_observe"])
    status = ev(11, "a", kind=wire_frames.TURN_STATUS)
    assert plain.admit(status) is Admit.SKIP and observer.admit(status) is Admit.SEND
    assert plain.admit(ev(12, "a", kind=wire_frames.SESSION_STARTED)) is Admit.SEND
    assert plain.admit(ev(13, "a")) is Admit.SKIP
    assert live_v1().admit(ev(13, "a")) is Admit.SEND


def test_run_start_skips_what_the_client_has() -> None:
    """A run: None while its session buffers, else the first index above the marks."""
    run = Run([ev(s, "a") for s in (11, 12, 13)])
    st = live_subscriber()
    assert st.run_start(run) == 3  # not watched
    st.begin_watch("a")
    assert st.run_start(run) is None
    st.finish_watch("a", Merged(last_seq=12))
    assert st.run_start(run) == 2
    v1 = live_v1(position=11)
    assert v1.run_start(run) == 1


def test_rewind_lowers_marks_and_drops_what_changed() -> None:
    """A rewind to 12: marks at most 12, buffered events and held gaps above it dropped."""
    st = live_subscriber(position=15)
    st.begin_watch("a")
    st.admit(ev(16, "a"))
    st.begin_watch("b")
    st.finish_watch("b", Merged(last_seq=14))
    st.rewind(12)
    assert st.global_mark == 12 and st.buffer_floor == 12 and st.session_marks == {"b": 12}
    assert st.watch_buffers["a"] == []
    assert st.admit(ev(13, "b")) is Admit.SEND
    buffering = StreamState(position=10, buffer_max=100)
    buffering.admit(ev(11))
    buffering.admit(ev(13))
    buffering.hold_gap(Gap(14, 16, "trimmed"))
    buffering.hold_gap(Gap(11, 11, "trimmed"))
    buffering.rewind(12)
    assert [e.seq for e in buffering.global_buffer or []] == [11]
    assert buffering.held_gaps == [Gap(11, 11, "trimmed")]


def test_rewind_mark_only_lowers_the_global_mark() -> None:
    """A resume told of a rewind re-reads from there: the global mark drops, nothing else."""
    st = StreamState(position=20, buffer_max=100)
    st.begin_resume(20)
    st.rewind_mark(7)
    assert st.global_mark == 7 and st.buffer_floor == 20
    st.rewind_mark(9)
    assert st.global_mark == 7


def test_reset_epoch_voids_every_mark_and_buffer() -> None:
    """Redis lost its data: marks to 0, buffers and held gaps emptied, watches kept."""
    st = live_subscriber(position=30)
    st.begin_watch("a")
    st.admit(ev(31, "a"))
    st.begin_watch("b")
    st.finish_watch("b", Merged(last_seq=29))
    st.reset_epoch()
    assert st.global_mark == 0 and st.buffer_floor == 0 and st.session_marks == {}
    assert st.watch_buffers == {"a": []} and st.watched == {"a", "b"}
    assert st.admit(ev(1, "b")) is Admit.SEND
    buffering = StreamState(position=5, buffer_max=100)
    buffering.admit(ev(6))
    buffering.hold_gap(Gap(7, 8, "trimmed"))
    buffering.reset_epoch()
    assert buffering.global_buffer == [] and buffering.held_gaps == []


def test_url_resume_point() -> None:
    """The URL's lastSeqId and epoch are kept for a v1 resume."""
    st = StreamState(position=0, buffer_max=1)
    st.set_url_resume(42, "e1")
    assert (st.url_last_seq, st.url_epoch) == (42, "e1")


def test_a_replay_page_stops_where_the_buffer_starts() -> None:
    """before_buffer: the page below the first buffered event, whether it reached it, None once unbuffered."""
    page = [ev(s, "a") for s in (11, 12, 13, 14)]
    st = StreamState(position=10, buffer_max=100)
    assert st.before_buffer(page) == (page, False)  # nothing buffered yet
    st.admit(ev(13))
    cut = st.before_buffer(page)
    assert cut is not None and [e.seq for e in cut[0]] == [11, 12] and cut[1] is True
    st.finish_resume(12, holes=False)
    assert st.before_buffer(page) is None
    st.begin_watch("a")
    st.admit(ev(12, "a"))
    watched = st.before_buffer(page, "a")
    assert watched is not None and [e.seq for e in watched[0]] == [11] and watched[1] is True
    assert st.before_buffer(page, "b") is None
