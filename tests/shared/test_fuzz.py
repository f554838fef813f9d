"""Property tests (hypothesis): the client frame parser and the transcript projection hold
their contracts on any input, random or mutated from real frames and transcript lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relaybus.gateway.protocol import ProtocolError, parse_client_frame
from relaybus.shared.transcript.projection import project_line
from relaybus.shared.wire.errors import ErrorCode
from tests.support.fuzz import json_values

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "claude-jsonl"
REAL_LINES = [
    ln for p in sorted(FIXTURES.glob("*.jsonl")) for ln in p.read_bytes().splitlines() if ln
][:400]
MAX_FRAME = 4096
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TYPES = ["hello", "list_sessions", "watch_session", "unwatch_session", "prompt", "accept_diff"]
frame_like = st.fixed_dictionaries(
    {"type": st.sampled_from(TYPES) | st.text(max_size=10)},
    optional={
        "sessionId": st.text(max_size=50) | st.integers(-(2**63), 2**63 - 1),
        "requestId": st.text(max_size=300) | st.integers(-(2**63), 2**63 - 1),
        "lastSeqId": st.integers(min_value=-5, max_value=2**63 - 1) | st.text(max_size=5),
        "capabilities": st.lists(st.text(max_size=70), max_size=70),
        "message": json_values,
    },
)


def mutate(data: bytes, cuts: list[tuple[int, int]]) -> bytes:
    """Overwrite bytes at (position, value) pairs."""
    buf = bytearray(data)
    for pos, val in cuts:
        if buf:
            buf[pos % len(buf)] = val
    return bytes(buf)


@FAST
@given(
    st.binary(max_size=200)
    | st.text(max_size=200)
    | json_values.map(orjson.dumps)
    | frame_like.map(orjson.dumps)
)
def test_any_frame_is_parsed_or_refused_with_a_code(raw: bytes | str) -> None:
    """Every input either parses to the message of its ``type`` or raises ProtocolError with a
    wire code; a refused frame's requestId is echoed only when it was a short string."""
    try:
        msg = parse_client_frame(raw, MAX_FRAME)
    except ProtocolError as exc:
        assert isinstance(exc.code, ErrorCode)
        assert exc.request_id is None or len(exc.request_id) <= 256
        return
    obj = orjson.loads(raw)
    assert msg.type == obj["type"]
    assert msg.requestId == obj.get("requestId")


@FAST
@given(frame_like, st.integers(min_value=MAX_FRAME + 1, max_value=3 * MAX_FRAME))
def test_oversized_frames_are_refused_before_parsing(frame: dict[str, Any], size: int) -> None:
    """A frame above the limit is frame_too_large, whatever it holds."""
    raw = orjson.dumps(frame)
    raw += b" " * max(0, size - len(raw))
    try:
        parse_client_frame(raw, MAX_FRAME)
    except ProtocolError as exc:
        assert exc.code is ErrorCode.FRAME_TOO_LARGE
    else:
        raise AssertionError("an oversized frame was accepted")


@FAST
@given(
    st.sampled_from(REAL_LINES),
    st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=6),
    st.integers(min_value=1024, max_value=65536),
)
def test_projection_never_raises_and_bounds_what_it_publishes(
    line: bytes, cuts: list[tuple[int, int]], data_max: int
) -> None:
    """A real line with random bytes overwritten projects without raising; a published event
    serialises, has a string type and list of blocks, and carries the raw line only up to
    ``data_max_bytes`` (a stand-in naming its size above)."""
    raw = mutate(line, cuts)
    p = project_line(raw, data_max_bytes=data_max)
    size = len(raw.rstrip(b"\r\n"))
    if not p.publish:
        assert p.event is None and p.drop_reason
        return
    assert p.event is not None
    encoded = orjson.dumps(p.event)
    assert isinstance(p.event["type"], str) and isinstance(p.event["blocks"], list)
    data = p.event.get("data")
    if size > data_max:  # a stand-in that names the size, never the raw line
        assert isinstance(data, dict) and data["bytes"] == size
    assert len(encoded) < 3 * len(raw) + 4096


@FAST
@given(json_values)
def test_projection_of_any_json_value(value: Any) -> None:
    """Any JSON value as a line: a non-object is malformed (published as neutral or dropped),
    never an exception; an unmodified real line is never malformed."""
    p = project_line(orjson.dumps(value))
    if not isinstance(value, dict):
        assert p.malformed
    assert not project_line(REAL_LINES[len(str(value)) % len(REAL_LINES)]).malformed
