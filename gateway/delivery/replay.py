"""Pure merge of history read from Redis with live events buffered meanwhile.

The connection subscribes to the live fan-out *before* reading history, buffering what
arrives; this module merges the two runs by seq, drops duplicates and reports holes, so
the client sees every event once, in order, whatever the timing (DESIGN §8).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from relaybus.gateway.delivery.events import Event

TRIMMED = "trimmed"
HOLE = "hole"


@dataclass(frozen=True, slots=True)
class Gap:
    """Events ``from_seq``..``to_seq`` (global seqs, inclusive) will not be delivered."""

    from_seq: int
    to_seq: int
    reason: str


@dataclass(slots=True)
class Merged:
    items: list[Event | Gap] = field(default_factory=list)
    #: Highest seq covered by the merge (history or buffer); later live events start above.
    last_seq: int = 0
    #: The event at ``last_seq`` (``prev`` for the next page), if any was merged.
    last: Event | None = None


def _seq(ev: Event) -> int | None:
    return ev.seq


def _session_seq(ev: Event) -> int | None:
    return ev.session_seq


def merge(
    history: Sequence[Event],
    live: Sequence[Event],
    *,
    floor: int = 0,
    by_session_seq: bool = False,
    holes: bool = True,
    prev: Event | None = None,
) -> Merged:
    """History (ascending) then the buffered live events above it, once each, in seq order.

    ``floor``: events at or below it were already delivered and are dropped. Holes in the
    contiguous counter (the global ``seq``, or ``sessionSeq`` when ``by_session_seq``)
    become :class:`Gap` items placed before the event after the hole (unless ``holes`` is
    false: history already filtered by entitlement is not contiguous by design). By global
    seq a hole can only be the reader's own gap (the log was trimmed past it: reason
    ``trimmed``), and a first event above ``floor + 1`` is one too: the live buffer holds
    every event the reader dispatched above its floor. ``prev``: the last event of the
    previous page of the same replay, so a hole across a page boundary is seen too.
    """
    out = Merged(last_seq=floor, last=prev)
    key: Callable[[Event], int | None] = _session_seq if by_session_seq else _seq
    last_key: int | None = floor if holes and floor > 0 and not by_session_seq else None
    if prev is not None and holes:
        last_key = key(prev)
    reason = HOLE if by_session_seq else TRIMMED
    for ev in _ordered(history, live):
        if ev.seq <= out.last_seq:
            continue
        b = key(ev)
        if last_key is not None and b is not None and b != last_key + 1:
            out.items.append(Gap(out.last_seq + 1, ev.seq - 1, reason))
        out.items.append(ev)
        out.last_seq = ev.seq
        out.last = ev
        last_key = b if holes else None
    return out


def _ordered(history: Sequence[Event], live: Sequence[Event]) -> list[Event]:
    events = [*history, *live]
    if any(events[i].seq >= events[i + 1].seq for i in range(len(events) - 1)):
        events.sort(key=lambda e: e.seq)
    return events


def with_held_gaps(merged: Merged, held: Sequence[Gap], covered: int) -> list[Event | Gap]:
    """The merged items with the reader gaps announced while the connection was buffering.

    A held gap is kept only above ``covered`` (below it the replay read the log itself) and
    where the merge did not already report it; it goes before the first event after it.
    """
    reported = [g for g in merged.items if isinstance(g, Gap)]
    pending = [
        Gap(max(g.from_seq, covered + 1), g.to_seq, g.reason)
        for g in sorted(held, key=lambda g: g.from_seq)
        if g.to_seq > covered
        and not any(r.from_seq <= g.from_seq and g.to_seq <= r.to_seq for r in reported)
    ]
    if not pending:
        return merged.items
    out: list[Event | Gap] = []
    for item in merged.items:
        if not isinstance(item, Gap):
            while pending and pending[0].to_seq < item.seq:
                out.append(pending.pop(0))
        out.append(item)
    out.extend(pending)
    return out


def leading_gap(after: int, first_seq: int | None, head: int) -> Gap | None:
    """The gap before the first retained entry when a stream was trimmed past ``after``.

    ``first_seq`` is the first entry with seq > ``after`` (``None`` when there is none);
    ``head`` the last assigned seq.
    """
    if first_seq is None:
        return Gap(after + 1, head, TRIMMED) if head > after else None
    if first_seq > after + 1:
        return Gap(after + 1, first_seq - 1, TRIMMED)
    return None
