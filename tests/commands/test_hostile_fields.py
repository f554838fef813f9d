"""Client strings that reach a path or an argv, refused by the collector itself (issue 22
item 11): defence in depth behind the gateway's own check. Real Redis, real file system."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from relaybus.collector.drivers.control import Controller
from relaybus.shared.aio import now_ms
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire import commands as c
from relaybus.shared.wire.commands import Command
from tests.conftest import make_settings
from tests.support.commands_env import RecordingHooks
from tests.support.servers import RedisServer


def _command(type_: str, sid: str = "", **payload: object) -> Command:
    return Command(
        id=str(uuid.uuid4()),
        type=type_,
        session_id=sid,
        gateway_id="gw-test",
        deadline_ms=now_ms() + 30_000,
        payload=dict(payload),
    )


@pytest.mark.parametrize("cwd", ["/tmp/a\x00b", "/tmp/\x07bell", "relative", "/" + "a" * 5000])
async def test_collector_refuses_a_hostile_cwd(
    server: RedisServer, namespace: str, tmp_path: Path, cwd: str
) -> None:
    """new_conversation with a NUL, control character, relative or overlong cwd gets
    invalid_field from the collector (no traceback, no bridge_error) and reserves nothing."""
    settings = make_settings(server.url, namespace, tmp_path / "claude", allow_prompts=True)
    client = aioredis.Redis.from_url(server.url)
    controller = Controller(settings, client, RecordingHooks())
    try:
        reply = await controller.execute(_command(c.NEW_CONVERSATION, cwd=cwd))
        assert (reply.ok, reply.code) == (False, "invalid_field")
        assert await client.keys(f"{Keys(namespace).reservation('*')}") == []
    finally:
        await controller.aclose()
        await client.aclose()
