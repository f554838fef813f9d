"""Credentials the Sentinels (or, through them, the data nodes) refuse are a refusal in one
line naming the variable to fix, not an outage retried forever (real Sentinels)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from relaybus.shared.store.connection import RedisRefused, probe
from tests.conftest import make_settings
from tests.shared.test_cli import clean_env, one_line, run_cli
from tests.support.sentinel import SERVICE, SentinelRig

SENTINEL_PW, NODE_PW = "sentinel-secret", "node-secret"


async def refusal(rig: SentinelRig, url: str = "redis://127.0.0.1:1/0", **kw: Any) -> str:
    settings = make_settings(url, "ns", redis_sentinels=rig.sentinels, **kw)
    with pytest.raises(RedisRefused) as caught:
        await probe(settings)
    return str(caught.value)


async def test_refused_sentinel_and_node_credentials_are_one_line(
    tmp_path: Path, claude_dir: Path
) -> None:
    rig = SentinelRig(tmp_path / "ha")
    try:
        rig.start()
        for s in rig.watchers:
            with s.client() as c:
                c.execute_command("ACL", "SETUSER", "default", "resetpass", f">{SENTINEL_PW}")
        for srv in (rig.primary, rig.replica):
            with srv.client() as c:
                c.config_set("requirepass", NODE_PW)
        for s in rig.watchers:
            with redis.Redis(port=s.port, password=SENTINEL_PW) as c:
                c.execute_command("SENTINEL", "SET", SERVICE, "auth-pass", NODE_PW)
        line = await refusal(rig)
        assert line.endswith("require a password: set RELAYBUS_REDIS_SENTINEL_PASSWORD")
        line = await refusal(rig, redis_sentinel_password="wrong-pw")
        assert "refused the password (or user) in RELAYBUS_REDIS_SENTINEL_PASSWORD" in line
        assert "wrong-pw" not in line
        # Sentinels accept; the primary they name refuses the URL's password.
        line = await refusal(
            rig, "redis://:wrong-pw@127.0.0.1:1/0", redis_sentinel_password=SENTINEL_PW
        )
        assert "refused the password (or user) in RELAYBUS_REDIS_URL" in line
        assert "wrong-pw" not in line
        settings = make_settings(
            f"redis://:{NODE_PW}@127.0.0.1:1/0",
            "ns",
            redis_sentinels=rig.sentinels,
            redis_sentinel_password=SENTINEL_PW,
        )
        assert await probe(settings) is None
        # A process started with the wrong Sentinel password says so and exits.
        env = clean_env(
            tmp_path,
            RELAYBUS_REDIS_URL=f"redis://:{NODE_PW}@127.0.0.1:1/0",
            RELAYBUS_REDIS_SENTINELS=rig.sentinels,
            RELAYBUS_REDIS_SENTINEL_PASSWORD="wrong-pw",
            RELAYBUS_CLAUDE_DIR=str(claude_dir),
        )
        out = run_cli("gateway", env=env)
        assert out.returncode == 1
        assert "RELAYBUS_REDIS_SENTINEL_PASSWORD" in one_line(out)
        assert "wrong-pw" not in out.stderr + out.stdout
    finally:
        rig.stop()
