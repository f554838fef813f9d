"""Commands end to end on a real 3-master cluster: prompt and new_conversation
through in-process gateways to real collector processes, all given only the seed node.

The tests are those of tests/commands/test_end_to_end.py; the fixtures below (the ones that
module defines for a plain server) put the collectors and gateways on the cluster. They
cover the command stream's consumer group (blocking XREADGROUP, XAUTOCLAIM), the reply
stream, and the single-slot transactions (MULTI/EXEC) of the reply and the reservation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from relaybus.shared.settings import Settings
from relaybus.shared.store.connection import connect
from tests.commands.conftest import claude_bin
from tests.commands.test_end_to_end import (
    Host,
    test_new_conversation_then_first_prompt,
    test_prompt_to_second_host_through_another_gateway,
)
from tests.support.collector_proc import CollectorProc
from tests.support.gateway_server import RunningGateway, running_gateway

__all__ = [
    "claude_bin",
    "test_new_conversation_then_first_prompt",
    "test_prompt_to_second_host_through_another_gateway",
]


@pytest.fixture
def hosts(settings: Settings, tmp_path: Path, claude_bin: Path) -> Iterator[Callable[..., Host]]:
    """Collector processes on the cluster, one claude dir each; all stopped at teardown."""
    made: list[Host] = []

    def make(name: str = "hostA") -> Host:
        claude_dir, workdir = tmp_path / name / "claude", tmp_path / name / "work"
        (claude_dir / "projects").mkdir(parents=True)
        (claude_dir / "sessions").mkdir()
        workdir.mkdir()
        env = {
            "RELAYBUS_REDIS_CLUSTER": "1",
            "RELAYBUS_ALLOW_PROMPTS": "true",
            "RELAYBUS_CLAUDE_BIN": str(claude_bin),
            "RELAYBUS_HEARTBEAT_TTL_S": "3",
        }
        proc = CollectorProc(
            redis_url=settings.redis_url.get_secret_value(),
            namespace=settings.namespace,
            claude_dir=claude_dir,
            host_id=name,
            env=env,
        )
        made.append(Host(name, claude_dir, workdir, proc))
        proc.start()
        return made[-1]

    yield make
    for host in made:
        host.proc.stop()


@pytest.fixture
async def gateways(settings: Settings) -> AsyncIterator[Callable[..., Any]]:
    async with AsyncExitStack() as stack:

        async def make(timeout_s: float = 20) -> RunningGateway:
            update = {"command_timeout_seconds": timeout_s}
            return await stack.enter_async_context(
                running_gateway(settings.model_copy(update=update))
            )

        yield make


@pytest.fixture
async def admin(settings: Settings) -> AsyncIterator[aioredis.Redis]:
    client = connect(settings)
    yield client
    await client.aclose()
