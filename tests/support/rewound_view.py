"""What a client holds once it applied every ``gap_detected{rewound}`` (failover tests)."""

from __future__ import annotations

from tests.support.gateway_client import WsClient


def view(*conns: WsClient) -> list[str]:
    """The chat lines a client holds (over its connections, in order) once it applied every
    gap_detected{rewound}: what it got for seqs from fromSeqId on is void (the log's new
    entries follow)."""
    held: list[tuple[int, str]] = []
    for f in (f for c in conns for f in c.received):
        if f["type"] == "gap_detected" and f["reason"] == "rewound":
            held = [(seq, text) for seq, text in held if seq < f["fromSeqId"]]
        elif f["type"] == "session_event" and f["event"]["type"] == "user":
            blocks = f["event"].get("blocks") or []
            if blocks:
                held.append((f["seqId"], str(blocks[0].get("text", ""))))
    return [text for _, text in held]
