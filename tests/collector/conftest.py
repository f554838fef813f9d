"""Fixtures of the collector tests: engines on a real Redis, closed after each test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_settings
from tests.support.collector_rig import Rig, RigFactory
from tests.support.servers import RedisServer


@pytest.fixture
async def make_rig(
    server: RedisServer, namespace: str, claude_dir: Path
) -> AsyncIterator[RigFactory]:
    """Build engine rigs with settings overrides; every rig is closed at teardown."""
    rigs: list[Rig] = []

    def make(**overrides: Any) -> Rig:
        rig = Rig.build(make_settings(server.url, namespace, claude_dir, **overrides))
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        await rig.close()
