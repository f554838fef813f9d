"""A scripted fake of the Anthropic Messages API, for driving the real Claude Code CLI.

``POST /v1/messages`` answers with server-sent events shaped like the real API's:
``message_start``, ``ping``, ``content_block_start`` / ``content_block_delta`` /
``content_block_stop`` per block (``text_delta``; ``thinking_delta`` then
``signature_delta``; ``input_json_delta`` for ``tool_use``), ``message_delta`` with the
``stop_reason``, ``message_stop``.

What the "model" says is a script: one entry per *turn request* (a streaming request
that offers tools — the CLI's main loop and its sub-agents; they run one after the other,
so a plain queue lines up), e.g.::

    {"turns": [
      {"content": [{"type": "thinking", "thinking": "Read it first."},
                   {"type": "tool_use", "name": "Read", "input": {"file_path": "/w/a.txt"}}]},
      {"content": [{"type": "text", "text": "Done."}]},
      {"content": [{"type": "text", "text": "slow ..."}], "delay_s": 0.2},
      {"error": {"status": 400, "message": "prompt is too long"}},
      {"prompt": "this one fails", "error": {"status": 403, "message": "refused"}}
    ]}

A turn with ``prompt`` is keyed, not queued: it answers every turn request whose last user
message has a text containing that string (a retried or repeated request gets the same
answer again), so a scenario whose prompts come from several processes does not depend on
the order or the number of requests. The other turns form the queue, taken by the requests
no keyed turn matched.

``stop_reason`` defaults to ``tool_use`` when the turn calls a tool, else ``end_turn``;
``delay_s`` is slept between deltas (a slow stream for interrupts; a client that goes
away ends it). Side requests — ``count_tokens``, and messages requests without tools
(title and summary calls to a small model) — get a short generic answer and do not
consume the script. A turn request after the script is used up gets the text
:data:`EXHAUSTED`. Every request is logged (:attr:`FakeAnthropic.requests`).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

EXHAUSTED = "(fake API: script exhausted)"
SIDE_TEXT = "Fake side answer"
#: Deltas a text or thinking block is cut into (the real API streams many small ones).
TEXT_PIECES = 4


@dataclass
class Turn:
    """One scripted answer to a turn request."""

    content: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None
    delay_s: float = 0.0
    error: dict[str, Any] | None = None
    prompt: str | None = None

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> Turn:
        return cls(
            content=list(raw.get("content", [])),
            stop_reason=raw.get("stop_reason"),
            delay_s=float(raw.get("delay_s", 0.0)),
            error=raw.get("error"),
            prompt=raw.get("prompt"),
        )

    @property
    def final_stop(self) -> str:
        if self.stop_reason:
            return self.stop_reason
        return "tool_use" if any(b.get("type") == "tool_use" for b in self.content) else "end_turn"


def _pieces(text: str, n: int = TEXT_PIECES) -> list[str]:
    """``text`` cut into at most ``n`` consecutive pieces (at least one, maybe empty)."""
    if not text:
        return [""]
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _last_user_texts(body: dict[str, Any]) -> list[str]:
    """The texts of the last user message (whole)."""
    for msg in reversed(body.get("messages") or []):
        if msg.get("role") != "user":
            continue
        content = msg.get("content")
        if isinstance(content, str):
            return [content]
        return [str(b.get("text", "")) for b in content or [] if b.get("type") == "text"]
    return []


def _last_user(body: dict[str, Any]) -> dict[str, Any]:
    """A summary of the last user message: its texts and tool results (for assertions)."""
    for msg in reversed(body.get("messages") or []):
        if msg.get("role") != "user":
            continue
        content = msg.get("content")
        if isinstance(content, str):
            return {"texts": [content[-500:]], "tool_results": []}
        texts, results = [], []
        for block in content or []:
            if block.get("type") == "text":
                texts.append(str(block.get("text", ""))[-500:])
            elif block.get("type") == "tool_result":
                results.append(
                    {
                        "tool_use_id": block.get("tool_use_id"),
                        "is_error": bool(block.get("is_error")),
                    }
                )
        return {"texts": texts, "tool_results": results}
    return {"texts": [], "tool_results": []}


class FakeAnthropic:
    """The fake API on a loopback port, serving one script; use as a context manager."""

    def __init__(self, turns: list[dict[str, Any]], *, model: str = "claude-fake-1") -> None:
        self.turns = [Turn.parse(t) for t in turns]
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._next = 0
        self._ids = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fake-anthropic", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def turns_used(self) -> int:
        with self._lock:
            return self._next

    def start(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_fake{next(self._ids):06d}"

    def log(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(entry)

    def take_turn(self, texts: list[str]) -> tuple[int, Turn | None]:
        """The turn answering a request whose last user message has ``texts``, and its index
        in the script: the keyed turn whose ``prompt`` one of them contains, else the next
        queued one (``None``, with an index past the script, once the queue is used up)."""
        for index, turn in enumerate(self.turns):
            if turn.prompt is not None and any(turn.prompt in text for text in texts):
                return index, turn
        queue = [i for i, t in enumerate(self.turns) if t.prompt is None]
        with self._lock:
            n = self._next
            self._next += 1
        if n < len(queue):
            return queue[n], self.turns[queue[n]]
        return len(self.turns) + n - len(queue), None


def _handler(api: FakeAnthropic) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: every request is in ``api.requests`` instead."""

        def _json(self, status: int, payload: dict[str, Any]) -> None:
            raw = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.send_header("request-id", api.new_id("req"))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            api.log({"at": time.time(), "method": "GET", "path": self.path, "kind": "other"})
            self._json(
                404,
                {
                    "type": "error",
                    "error": {"type": "not_found_error", "message": "fake API: no such endpoint"},
                },
            )

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                body = {}
            entry: dict[str, Any] = {
                "at": time.time(),
                "method": "POST",
                "path": self.path,
                "model": body.get("model"),
                "stream": bool(body.get("stream")),
                "tools": [t.get("name") for t in body.get("tools") or []],
                "last_user": _last_user(body),
                "user_agent": self.headers.get("user-agent"),
            }
            path = self.path.split("?", 1)[0]
            if path == "/v1/messages/count_tokens":
                api.log({**entry, "kind": "count_tokens"})
                self._json(200, {"input_tokens": 42})
            elif path != "/v1/messages":
                api.log({**entry, "kind": "other"})
                self._json(
                    404,
                    {
                        "type": "error",
                        "error": {
                            "type": "not_found_error",
                            "message": "fake API: no such endpoint",
                        },
                    },
                )
            elif not entry["tools"]:
                api.log({**entry, "kind": "side"})
                self._answer(body, Turn(content=[{"type": "text", "text": SIDE_TEXT}]))
            else:
                index, turn = api.take_turn(_last_user_texts(body))
                api.log({**entry, "kind": "turn", "turn": index, "exhausted": turn is None})
                self._answer(body, turn or Turn(content=[{"type": "text", "text": EXHAUSTED}]))

        def _answer(self, body: dict[str, Any], turn: Turn) -> None:
            if turn.error is not None:
                status = int(turn.error.get("status", 400))
                self._json(
                    status,
                    {
                        "type": "error",
                        "error": {
                            "type": turn.error.get("type", "invalid_request_error"),
                            "message": turn.error.get("message", "fake API error"),
                        },
                    },
                )
                return
            model = body.get("model") or api.model
            if not body.get("stream"):
                self._json(200, self._message(model, turn, final=True))
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("connection", "close")
            self.send_header("request-id", api.new_id("req"))
            self.end_headers()
            self.close_connection = True
            try:
                self._stream(model, turn)
            except (BrokenPipeError, ConnectionResetError):
                api.log({"at": time.time(), "kind": "client_gone", "path": self.path})

        def _message(self, model: str, turn: Turn, *, final: bool) -> dict[str, Any]:
            content = [_final_block(api, b) for b in turn.content] if final else []
            return {
                "id": api.new_id("msg"),
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": turn.final_stop if final else None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": 120,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                    "output_tokens": 1 if not final else 30,
                    "service_tier": "standard",
                },
            }

        def _event(self, name: str, data: dict[str, Any], delay_s: float = 0.0) -> None:
            if delay_s:
                time.sleep(delay_s)
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        def _stream(self, model: str, turn: Turn) -> None:
            d = turn.delay_s
            self._event(
                "message_start",
                {"type": "message_start", "message": self._message(model, turn, final=False)},
            )
            self._event("ping", {"type": "ping"})
            for index, block in enumerate(turn.content):
                kind = block.get("type")
                if kind == "thinking":
                    start: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
                    deltas = [
                        {"type": "thinking_delta", "thinking": p}
                        for p in _pieces(str(block.get("thinking", "")))
                    ]
                    deltas.append({"type": "signature_delta", "signature": "ZmFrZS1zaWduYXR1cmU="})
                elif kind == "tool_use":
                    start = {
                        "type": "tool_use",
                        "id": block.get("id") or api.new_id("toolu"),
                        "name": block["name"],
                        "input": {},
                    }
                    deltas = [
                        {"type": "input_json_delta", "partial_json": p}
                        for p in _pieces(json.dumps(block.get("input", {})), 3)
                    ]
                else:
                    start = {"type": "text", "text": ""}
                    text = str(block.get("text", ""))
                    pieces = text.split(" ") if d else _pieces(text)
                    if d:
                        pieces = [p + " " for p in pieces[:-1]] + pieces[-1:]
                    deltas = [{"type": "text_delta", "text": p} for p in pieces]
                self._event(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": start},
                )
                for delta in deltas:
                    self._event(
                        "content_block_delta",
                        {"type": "content_block_delta", "index": index, "delta": delta},
                        d,
                    )
                self._event("content_block_stop", {"type": "content_block_stop", "index": index})
            self._event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": turn.final_stop, "stop_sequence": None},
                    "usage": {"output_tokens": 30},
                },
                d,
            )
            self._event("message_stop", {"type": "message_stop"})

    return Handler


def _final_block(api: FakeAnthropic, block: dict[str, Any]) -> dict[str, Any]:
    """A scripted block as a complete (non-streamed) content block."""
    kind = block.get("type")
    if kind == "tool_use":
        return {
            "type": "tool_use",
            "id": block.get("id") or api.new_id("toolu"),
            "name": block["name"],
            "input": block.get("input", {}),
        }
    if kind == "thinking":
        return {
            "type": "thinking",
            "thinking": block.get("thinking", ""),
            "signature": "ZmFrZS1zaWduYXR1cmU=",
        }
    return {"type": "text", "text": str(block.get("text", ""))}
