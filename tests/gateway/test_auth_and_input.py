"""Auth (header, query, hello; read-only vs full), bad input classes, rate limit, hard cap."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from websockets.exceptions import ConnectionClosed

from relaybus.gateway.auth import AuthConfigError, TokenTable
from relaybus.gateway.main import run
from relaybus.shared.settings import Settings
from tests.conftest import make_settings
from tests.support.gateway_client import Frame, WsClient
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import RunningGateway, running_gateway
from tests.support.servers import RedisServer


async def test_token_by_header(gw: RunningGateway) -> None:
    """Authorization: Bearer grants access."""
    async with WsClient(gw.ws, token="full-token") as c:
        assert (await c.hello())["type"] == "welcome"


async def test_token_by_query(gw: RunningGateway) -> None:
    """?token= grants access (browsers cannot set headers)."""
    async with WsClient(gw.ws, token="ro-token", query_token=True) as c:
        assert (await c.hello())["type"] == "welcome"


async def test_token_in_hello(gw: RunningGateway) -> None:
    """hello.token authenticates a connection that offered no token at connect."""
    async with WsClient(gw.ws) as c:
        assert (await c.hello(token="full-token"))["type"] == "welcome"


@pytest.mark.parametrize(
    ("token", "query", "first"),
    [
        ("wrong", False, None),
        ("wrong", True, None),
        (None, False, {"type": "hello", "capabilities": [], "token": "wrong"}),
        (None, False, {"type": "hello", "capabilities": []}),
        (None, False, {"type": "list_sessions"}),
        (None, False, "not json"),
    ],
)
async def test_unauthorized_gets_error_then_4401(
    gw: RunningGateway, token: str | None, query: bool, first: Frame | str | None
) -> None:
    """A missing or wrong token gets error{code:unauthorized} and close 4401."""
    async with WsClient(gw.ws, token=token, query_token=query) as c:
        if first is not None:
            await c.send(first)
        err = await c.expect("error")
        assert err["code"] == "unauthorized"
        assert await c.closed_code() == 4401
    assert gw.metric("relaybus_gateway_auth_failures_total") >= 1


async def test_read_only_token_cannot_command(gw: RunningGateway, pub: Publisher) -> None:
    """A read-only token may watch but gets error{forbidden} for commands; full ones are routed."""
    await pub.start_session("s1")
    async with WsClient(gw.ws, token="ro-token") as ro, WsClient(gw.ws, token="full-token") as full:
        for c in (ro, full):
            await c.hello(["session_subscriptions"])
            await c.watch("s1")
            await c.send({"type": "prompt", "requestId": "p", "message": "hi", "sessionId": "s1"})
        e_ro, e_full = await ro.expect("error"), await full.expect("error")
        assert (e_ro["code"], e_ro["requestId"]) == ("forbidden", "p")
        assert (e_full["code"], e_full["requestId"]) == ("host_offline", "p")  # no collector runs
        await full.send({"type": "list_sessions"})
        assert (await full.expect("sessions"))["type"] == "sessions"


def test_refuses_to_start_without_tokens(
    server: RedisServer, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No tokens and no allow_anonymous: the gateway refuses to start with a clear message."""
    settings = make_settings(server.url, namespace, tokens="")
    with pytest.raises(AuthConfigError):
        TokenTable.from_settings(settings)
    assert run(settings) == 2
    assert "RELAYBUS_TOKENS" in capsys.readouterr().err


async def test_anonymous_when_allowed(server: RedisServer, namespace: str) -> None:
    """allow_anonymous with no tokens serves clients without a token; a wrong token is refused."""
    settings = make_settings(server.url, namespace, tokens="", allow_anonymous=True)
    async with running_gateway(settings) as g:
        async with WsClient(g.ws) as c:
            assert (await c.hello())["type"] == "welcome"
        async with WsClient(g.ws, token="bogus") as c:
            assert await c.closed_code() == 4401


BAD_INPUTS: list[tuple[Frame | str, str, Callable[[dict[str, object]], bool]]] = [
    ("{nope", "bad_json", lambda e: "requestId" not in e),
    ("[1, 2]", "not_object", lambda e: True),
    ('"str"', "not_object", lambda e: True),
    ({"requestId": "r1"}, "invalid_field", lambda e: e["requestId"] == "r1"),
    ({"type": 7}, "invalid_field", lambda e: True),
    ({"type": "teleport", "requestId": "r2"}, "unknown_type", lambda e: e["requestId"] == "r2"),
    (
        {"type": "watch_session", "requestId": "r3"},
        "invalid_field",
        lambda e: "sessionId" in str(e["message"]),
    ),
    ({"type": "watch_session", "sessionId": 5}, "invalid_field", lambda e: True),
    (
        {"type": "watch_session", "sessionId": "s", "sinceSeqId": "9"},
        "invalid_field",
        lambda e: True,
    ),
    (
        {"type": "watch_session", "sessionId": "s", "sinceSeqId": -1},
        "invalid_field",
        lambda e: True,
    ),
    (
        {"type": "watch_session", "sessionId": "nope", "requestId": "r4"},
        "unknown_session",
        lambda e: e["requestId"] == "r4",
    ),
    ({"type": "hello", "capabilities": []}, "bad_state", lambda e: True),
    ({"type": "list_sessions", "pad": "x" * 70_000}, "frame_too_large", lambda e: True),
]


@pytest.mark.parametrize(("frame", "code", "check"), BAD_INPUTS)
async def test_bad_input_gets_error_and_stays_open(
    gw: RunningGateway,
    pub: Publisher,
    frame: Frame | str,
    code: str,
    check: Callable[[dict[str, object]], bool],
) -> None:
    """Each bad input class gets error{code} (with requestId when readable); the socket stays open."""
    await pub.start_session("s")
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello(["session_subscriptions"])
        await c.send(frame)
        err = await c.expect("error")
        assert err["code"] == code and isinstance(err["message"], str) and check(err)
        assert isinstance(err["seqId"], int)
        await c.send({"type": "list_sessions", "requestId": "after"})
        assert (await c.expect("sessions"))["requestId"] == "after"
    assert gw.metric("relaybus_gateway_bad_frames_total", {"code": code}) >= 1


async def test_unknown_future_fields_are_ignored(gw: RunningGateway, pub: Publisher) -> None:
    """Unknown fields in a known message are ignored, not refused."""
    await pub.start_session("s")
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello(["session_subscriptions"], futureFlag={"x": 1})
        assert (await c.watch("s", priority="high"))["watching"] is True


async def test_flooding_closes_4029(settings: Settings) -> None:
    """More frames per second than the documented rate limit close the connection with 4029."""
    async with (
        running_gateway(settings.model_copy(update={"rate_limit_per_s": 5})) as g,
        WsClient(g.ws, token="full-token") as c,
    ):
        await c.hello()
        try:
            for _ in range(50):
                await c.send({"type": "list_sessions"})
        except ConnectionClosed:
            pass
        assert await c.closed_code() == 4029


async def test_frame_above_hard_cap_closes_1009(gw: RunningGateway) -> None:
    """A frame above the hard cap (16 x max_frame_bytes) closes with 1009."""
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello()
        await c.send("x" * (64 * 1024 * 16 + 1))
        assert await c.closed_code() == 1009


async def test_refused_second_hello_does_not_upgrade(gw: RunningGateway) -> None:
    """A second hello carrying a full token gets bad_state and leaves the connection read-only."""
    async with WsClient(gw.ws, token="ro-token") as c:
        await c.hello()
        await c.send({"type": "hello", "capabilities": [], "token": "full-token", "requestId": "h"})
        err = await c.expect("error")
        assert (err["code"], err["requestId"]) == ("bad_state", "h")
        new = {"type": "new_conversation", "requestId": "n", "host": "testhost", "cwd": "/tmp"}
        await c.send({**new, "text": "hi"})
        err = await c.expect("error")
        assert (err["code"], err["requestId"]) == ("forbidden", "n")


@pytest.mark.parametrize(
    "cwd",
    [
        "/tmp/a\x00b",
        "/tmp/a\nb",
        "/tmp/\x1b[2J",
        "/tmp/\u202eexe",
        "relative/dir",
        "/" + "é" * 3000,
    ],
)
async def test_hostile_cwd_is_invalid_field(gw: RunningGateway, cwd: str) -> None:
    """new_conversation.cwd with NUL, a control character, a relative path or 6,000 bytes is
    refused as invalid_field at the gateway, before anything is routed."""
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello()
        new = {"type": "new_conversation", "requestId": "n", "host": "testhost", "text": "hi"}
        await c.send({**new, "cwd": cwd})
        err = await c.expect("error")
        assert (err["code"], err["requestId"]) == ("invalid_field", "n")


@pytest.mark.parametrize("host", ["test\x1b[2Jhost", "test\x00host", "test\x7f", "test\x9b"])
async def test_host_with_a_control_character_is_invalid_field(
    gw: RunningGateway, host: str
) -> None:
    """new_conversation.host with a control character is refused as invalid_field."""
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello()
        await c.send({"type": "new_conversation", "requestId": "n", "host": host, "text": "hi"})
        err = await c.expect("error")
        assert (err["code"], err["requestId"]) == ("invalid_field", "n")


async def test_prompt_with_nul_is_invalid_field(gw: RunningGateway, pub: Publisher) -> None:
    """A prompt carrying a NUL byte (never representable in an argv) is invalid_field."""
    await pub.start_session("s1")
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello()
        await c.send({"type": "prompt", "requestId": "p", "sessionId": "s1", "message": "a\x00b"})
        err = await c.expect("error")
        assert (err["code"], err["requestId"]) == ("invalid_field", "p")
