"""Fuzz a live gateway: thousands of random and mutated frames over a real WebSocket.

A real collector publishes a real transcript into a real Redis; a gateway process serves
it. One connection sends frames drawn by hypothesis (random bytes and text, random JSON,
real client frames with fields dropped, retyped, added or cut short, oversized frames),
each followed by a probe (``list_sessions`` with its own ``requestId``). Every frame must be
answered before the probe's ``sessions`` — errors with a documented code — or, above the
hard cap, close the connection; meanwhile a bystander watching the session
receives every line the collector publishes, once and in order, and is never closed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from relaybus.shared.wire.errors import ErrorCode
from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import append, transcript, user_line
from tests.support.fuzz import json_values
from tests.support.gateway_server import GatewayProc
from tests.support.servers import RedisServer
from tests.support.wait import poll

SID = "f0220000-0000-4000-8000-00000000f022"
TOKEN = "full-token"
#: The fuzzed connection reads only: a valid command would start a real `claude -p` run on
#: this machine through the collector; with this token it is refused (`forbidden`) after
#: the same parsing and validation every command goes through.
FUZZ_TOKEN = "fuzz-token"
MAX_FRAME = 64 * 1024
HARD_CAP = 16 * MAX_FRAME
#: Close codes protocol.md documents for a client's own frames: above the hard cap 1009 —
#: or 1006 when the server's close of a socket holding unread bytes of that frame sends a
#: TCP reset, which drops the close frame before the client reads it.
CLOSES_ABOVE_CAP = {1009, 1006}
ERROR_CODES = {c.value for c in ErrorCode}

VALID_FRAMES: list[dict[str, Any]] = [
    {"type": "hello", "capabilities": ["session_events"]},
    {"type": "list_sessions", "requestId": "r"},
    {"type": "watch_session", "sessionId": SID, "sinceSeqId": 0},
    {"type": "unwatch_session", "sessionId": SID},
    {"type": "prompt", "sessionId": SID, "message": "hi"},
    {"type": "interrupt_request", "sessionId": SID},
    {"type": "new_conversation", "host": "nohost", "cwd": "/tmp"},
    {"type": "accept_diff", "sessionId": SID, "requestKey": "k1"},
    {"type": "reject_diff", "sessionId": SID, "reason": "no"},
]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A real client frame with one field dropped, retyped or added, or its bytes cut."""
    frame = dict(draw(st.sampled_from(VALID_FRAMES)))
    how = draw(st.sampled_from(["drop", "retype", "add", "cut", "none"]))
    if how == "drop" and len(frame) > 1:
        frame.pop(draw(st.sampled_from(sorted(frame))))
    elif how == "retype":
        frame[draw(st.sampled_from(sorted(frame)))] = draw(json_values)
    elif how == "add":
        frame[draw(st.text(max_size=12))] = draw(json_values)
    raw = orjson.dumps(frame)
    if how == "cut":
        raw = raw[: draw(st.integers(0, len(raw) - 1))]
    return raw


class Big(int):
    """An oversized frame of this many bytes, built at send time (short in reports)."""

    def payload(self) -> bytes:
        return b'{"type":"' + b"x" * (self - 11) + b'"}'  # exactly ``self`` bytes

    def __repr__(self) -> str:
        return f"Big({int(self)})"


fuzz_frame = st.one_of(
    mutated(),
    st.binary(max_size=120),
    st.text(max_size=120).map(str.encode),
    json_values.map(orjson.dumps),
    st.integers(MAX_FRAME + 1, MAX_FRAME + 4000).map(Big),  # frame_too_large
    st.just(Big(HARD_CAP + 1)),  # above the hard cap: the connection is closed
)


class Bystander(threading.Thread):
    """Watches the session from its own connection and keeps the user texts it receives."""

    closed_with: int | None

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.texts, self.closed_with = url, list[str](), None
        self.ready = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        # No keepalive pings: their payload comes from `random`, which hypothesis forbids
        # while it draws examples.
        with connect(f"{self.url}?token={TOKEN}", max_size=None, ping_interval=None) as ws:
            ws.send(orjson.dumps({"type": "hello", "capabilities": []}).decode())
            ws.send(orjson.dumps({"type": "watch_session", "sessionId": SID}).decode())
            while not self.stop.is_set():
                try:
                    frame = orjson.loads(ws.recv(timeout=0.2))
                except TimeoutError:
                    continue
                except ConnectionClosed as exc:
                    self.closed_with = exc.rcvd.code if exc.rcvd else 1006
                    return
                if frame["type"] == "watch_ack":
                    self.ready.set()
                blocks = (frame.get("event") or {}).get("blocks") or [{}]
                if frame["type"] == "session_event" and frame["event"].get("type") == "user":
                    self.texts.append(str(blocks[0].get("text")))


@pytest.fixture
def live(server: RedisServer, tmp_path: Path, namespace: str) -> Iterator[Any]:
    root = tmp_path
    claude = root / "claude"
    (claude / "projects").mkdir(parents=True)
    (claude / "sessions").mkdir()
    path = transcript(claude, SID)
    append(path, user_line(SID, "live-0"))
    env = {"RELAYBUS_RATE_LIMIT_PER_S": "100000", "RELAYBUS_COMMAND_TIMEOUT_SECONDS": "1"}
    with (
        CollectorProc(redis_url=server.url, namespace=namespace, claude_dir=claude),
        GatewayProc(
            redis_url=server.url, namespace=namespace, tokens=f"{TOKEN},{FUZZ_TOKEN}:read", env=env
        ) as gw,
    ):
        by = Bystander(gw.ws)
        by.start()
        poll(lambda: by.texts == ["live-0"] or None, 30)
        state = {"gw": gw, "path": path, "by": by, "lines": 1, "frames": 0, "closes": 0}
        yield state
        by.stop.set()
        by.join(5)


def _hello(ws: ClientConnection) -> None:
    ws.send(orjson.dumps({"type": "hello", "capabilities": []}).decode())
    assert orjson.loads(ws.recv(timeout=10))["type"] == "welcome"


def _answer(ws: ClientConnection, frame: bytes, n: int) -> list[dict[str, Any]] | int:
    """Send ``frame`` then a probe; the frames that answered it, or the close code."""
    probe = f"probe-{n}"
    try:
        ws.send(frame.decode("utf-8", errors="replace") if n % 2 else frame)
        ws.send(orjson.dumps({"type": "list_sessions", "requestId": probe}).decode())
        got: list[dict[str, Any]] = []
        while True:
            reply = orjson.loads(ws.recv(timeout=15))
            if reply["type"] == "sessions" and reply.get("requestId") == probe:
                return got
            got.append(reply)
    except ConnectionClosed as exc:
        return exc.rcvd.code if exc.rcvd else 1006


def test_every_frame_is_answered_or_closed_and_the_bystander_is_unaffected(live: Any) -> None:
    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(frames=st.lists(fuzz_frame, min_size=25, max_size=60))
    def one_connection(frames: list[bytes | Big]) -> None:
        pending = [f.payload() if isinstance(f, Big) else f for f in frames]
        while pending:  # one connection until a frame closes it, then a new one
            url = f"{live['gw'].ws}?token={FUZZ_TOKEN}"
            with connect(url, max_size=None, open_timeout=10, ping_interval=None) as ws:
                _hello(ws)
                while pending:
                    frame = pending.pop(0)
                    live["frames"] += 1
                    answer = _answer(ws, frame, live["frames"])
                    if isinstance(answer, int):
                        assert len(frame) > HARD_CAP, (answer, frame[:200])
                        assert answer in CLOSES_ABOVE_CAP, answer
                        live["closes"] += 1
                        break
                    assert answer, f"no answer to {frame[:200]!r}"
                    for reply in answer:
                        if reply["type"] == "error":
                            assert reply["code"] in ERROR_CODES, reply
        append(live["path"], user_line(SID, f"live-{live['lines']}"))
        live["lines"] += 1

    one_connection()
    assert live["frames"] >= 1500, live["frames"]  # thousands of frames went through
    assert live["closes"] > 0  # frames above the hard cap were among them
    want = [f"live-{i}" for i in range(live["lines"])]
    poll(lambda: live["by"].texts == want or None, 30)
    assert live["by"].closed_with is None
