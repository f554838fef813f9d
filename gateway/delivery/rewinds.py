"""The epoch token that tells clients apart by the log's rewinds.

A gateway that finds the entries it dispatched changed after a reconnect (a Sentinel failover
lost them), or a collector that finds its committed offset behind its acknowledged appends,
records the rewind in ``{ns}:rewinds`` (:mod:`relaybus.shared.store.rewinds`) as a new
*generation* with its first changed seq. Clients hold the generation their view is consistent with inside the epoch token
they already echo: ``<epoch>`` for generation 0, ``<epoch>.<gen>`` after a rewind. A resume
with an older generation and a ``lastSeqId`` at or above a later rewind's seq is told
``gap_detected{rewound}`` on whichever gateway it lands, whether that gateway saw the lost
entries or not. The Redis ``epoch`` key itself never changes (the collectors check it).
"""

from __future__ import annotations


def token(epoch: str, gen: int) -> str:
    """The epoch token clients receive and echo: the epoch plus the rewind generation."""
    return f"{epoch}.{gen}" if gen else epoch


def parse_token(tok: str) -> tuple[str, int]:
    """``(epoch, generation)`` of a token; a plain epoch is generation 0."""
    base, dot, gen = tok.rpartition(".")
    if dot and gen.isdigit():
        return base, int(gen)
    return tok, 0
