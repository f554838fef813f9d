"""The test servers' helpers: which kind runs by default, and that a running server stops."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.servers import preferred_kind, running_server


def test_redis_is_preferred_to_valkey() -> None:
    assert preferred_kind({"redis": "/r", "valkey": "/v"}) == "redis"
    assert preferred_kind({"valkey": "/v"}) == "valkey"


def test_running_server_stops_even_when_the_block_fails(tmp_path: Path) -> None:
    procs = []
    with pytest.raises(KeyError), running_server(tmp_path / "srv") as srv:
        assert srv.proc is not None
        procs.append(srv.proc)
        client = srv.client()
        assert client.ping()
        client.close()
        raise KeyError("boom")
    assert srv.proc is None and procs[0].poll() is not None
