"""Which prompts may start a conversation: only a new_conversation's reserved id (issue 27)."""

from __future__ import annotations

import uuid
from pathlib import Path

from relaybus.collector.drivers.control import Controller
from relaybus.shared.aio import now_ms
from relaybus.shared.store.connection import connect
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire import commands as c
from relaybus.shared.wire.commands import Command
from tests.conftest import make_settings
from tests.support.commands_env import RecordingHooks
from tests.support.servers import RedisServer


def _prompt(sid: str) -> Command:
    return Command(str(uuid.uuid4()), c.PROMPT, sid, "gw", now_ms() + 30_000, {"message": "hi"})


async def test_prompt_to_a_session_whose_transcript_is_gone_is_refused(
    server: RedisServer, namespace: str, claude_dir: Path, tmp_path: Path
) -> None:
    """A known session that published lines but has no transcript on disk any more is
    refused ``transcript_missing`` (naming the reason); no run starts under its id."""
    settings = make_settings(
        server.url, namespace, claude_dir, allow_prompts=True, claude_bin="/nonexistent"
    )
    client = connect(settings)
    keys = Keys(namespace)
    sid = str(uuid.uuid4())
    await client.hset(
        keys.session(sid),
        mapping={"host": "testhost", "cwd": str(tmp_path), "state": "idle", "sessionSeq": "4"},
    )
    hooks = RecordingHooks()
    controller = Controller(settings, client, hooks)
    try:
        reply = await controller.execute(_prompt(sid))
    finally:
        await controller.aclose()
        await client.aclose()
    assert (reply.ok, reply.code) == (False, "transcript_missing")
    assert reply.message is not None and "transcript" in reply.message
    assert hooks.calls == []


async def test_first_prompt_of_a_reserved_conversation_still_starts_it(
    server: RedisServer, namespace: str, claude_dir: Path, tmp_path: Path
) -> None:
    """An id reserved by new_conversation that never published a line has no transcript yet:
    its prompt goes to a run (here a missing binary: ``bridge_error``), not refused."""
    settings = make_settings(
        server.url, namespace, claude_dir, allow_prompts=True, claude_bin="/nonexistent"
    )
    client = connect(settings)
    controller = Controller(settings, client, RecordingHooks())
    try:
        made = await controller.execute(
            Command(
                str(uuid.uuid4()),
                c.NEW_CONVERSATION,
                "",
                "gw",
                now_ms() + 30_000,
                {"cwd": str(tmp_path)},
            )
        )
        reply = await controller.execute(_prompt(made.data["sessionId"]))
    finally:
        await controller.aclose()
        await client.aclose()
    assert made.ok, made
    assert (reply.ok, reply.code) == (False, "bridge_error"), reply
