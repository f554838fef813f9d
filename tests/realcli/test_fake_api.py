"""The scripted fake Messages API speaks the real API's stream format (no CLI needed)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.fake_anthropic import EXHAUSTED, SIDE_TEXT, FakeAnthropic

TOOLS = [{"name": "Read", "input_schema": {"type": "object"}}]


def _events(resp: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for chunk in resp.text.split("\n\n"):
        if not chunk.strip():
            continue
        head, data = chunk.split("\n", 1)
        assert head.startswith("event: ") and data.startswith("data: ")
        out.append((head[7:], json.loads(data[6:])))
    return out


def _post(api: FakeAnthropic, **body: Any) -> httpx.Response:
    body.setdefault("model", "claude-x")
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return httpx.post(f"{api.url}/v1/messages?beta=true", json=body, timeout=10)


@pytest.fixture
def api() -> Iterator[FakeAnthropic]:
    script: list[dict[str, Any]] = [
        {
            "content": [
                {"type": "thinking", "thinking": "Let me think about it."},
                {"type": "text", "text": "Reading the file now."},
                {"type": "tool_use", "name": "Read", "input": {"file_path": "/w/a.txt"}},
            ]
        },
        {"error": {"status": 403, "type": "permission_error", "message": "nope"}},
    ]
    with FakeAnthropic(script) as fake:
        yield fake


def test_a_scripted_turn_streams_like_the_real_api(api: FakeAnthropic) -> None:
    """message_start, ping, start/delta/stop per block (thinking+signature, text, tool input
    as JSON pieces), message_delta with stop_reason tool_use, message_stop."""
    resp = _post(api, stream=True, tools=TOOLS)
    assert resp.status_code == 200 and resp.headers["content-type"] == "text/event-stream"
    events = _events(resp)
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == [
        "message_delta",
        "message_stop",
    ]
    assert events[0][1]["message"]["model"] == "claude-x"
    blocks: dict[int, dict[str, Any]] = {}
    for name, data in events:
        if name == "content_block_start":
            blocks[data["index"]] = {**data["content_block"], "deltas": []}
        elif name == "content_block_delta":
            blocks[data["index"]]["deltas"].append(data["delta"])
    thinking, text, tool = blocks[0], blocks[1], blocks[2]
    assert (
        "".join(d["thinking"] for d in thinking["deltas"] if d["type"] == "thinking_delta")
        == "Let me think about it."
    )
    assert thinking["deltas"][-1]["type"] == "signature_delta"
    assert "".join(d["text"] for d in text["deltas"]) == "Reading the file now."
    assert (tool["type"], tool["name"]) == ("tool_use", "Read")
    assert json.loads("".join(d["partial_json"] for d in tool["deltas"])) == {
        "file_path": "/w/a.txt"
    }
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert names.count("content_block_stop") == 3


def test_errors_side_requests_and_an_exhausted_script(api: FakeAnthropic) -> None:
    """Tool-less and count_tokens requests do not consume the script; an error turn is an HTTP
    error; after the script a turn gets the exhausted text; every request is logged."""
    side = _post(api, stream=False)
    assert side.json()["content"] == [{"type": "text", "text": SIDE_TEXT}]
    count = httpx.post(f"{api.url}/v1/messages/count_tokens", json={}, timeout=10)
    assert count.json() == {"input_tokens": 42}
    assert api.turns_used == 0
    _post(api, stream=True, tools=TOOLS)
    error = _post(api, stream=True, tools=TOOLS)
    assert error.status_code == 403 and error.json()["error"]["type"] == "permission_error"
    last = _events(_post(api, stream=True, tools=TOOLS))
    texts = [d["delta"]["text"] for n, d in last if n == "content_block_delta"]
    assert "".join(texts) == EXHAUSTED and last[-2][1]["delta"]["stop_reason"] == "end_turn"
    kinds = [(q["kind"], q.get("turn")) for q in api.requests]
    assert kinds == [("side", None), ("count_tokens", None), ("turn", 0), ("turn", 1), ("turn", 2)]


def test_a_keyed_turn_answers_its_prompt_whatever_the_order() -> None:
    """A turn with ``prompt`` answers each request whose last user text contains it (again on
    a repeat) and leaves the queue to the others."""
    script: list[dict[str, Any]] = [
        {
            "prompt": "this one fails",
            "error": {"status": 403, "type": "permission_error", "message": "refused"},
        },
        {"content": [{"type": "text", "text": "Queued answer."}]},
    ]
    with FakeAnthropic(script) as fake:

        def ask(text: str) -> httpx.Response:
            return _post(
                fake,
                stream=True,
                tools=TOOLS,
                messages=[{"role": "user", "content": [{"type": "text", "text": f"<ctx/>{text}"}]}],
            )

        assert ask("please, this one fails").status_code == 403
        first = _events(ask("first question"))
        assert (
            "".join(d["delta"]["text"] for n, d in first if n == "content_block_delta")
            == "Queued answer."
        )
        assert ask("this one fails again").status_code == 403
        assert (
            "".join(
                d["delta"]["text"] for n, d in _events(ask("more")) if n == "content_block_delta"
            )
            == EXHAUSTED
        )
    assert [q["turn"] for q in fake.requests] == [0, 1, 0, 2]
