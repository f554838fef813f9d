"""The systemd user unit and the launchd agent that run collectors on other machines."""

from __future__ import annotations

import configparser
import os
import plistlib
import re
import signal
import subprocess
import sys
from pathlib import Path

import redis

from relaybus.shared.store.keys import Keys
from tests.support.deploy_files import DEPLOY
from tests.support.servers import RedisServer
from tests.support.wait import poll

UNIT = DEPLOY / "systemd" / "relaybus-collector.service"
PLIST = DEPLOY / "launchd" / "dev.relaybus.collector.plist"
ENV_FILE = ".config/relaybus/collector.env"


def test_systemd_unit_runs_the_collector_from_the_shared_env_file() -> None:
    """The user unit runs `relaybus collector` with ~/.config/relaybus/collector.env,
    restarts it, stops it with SIGTERM and starts with the user's session."""
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    unit.read_string(UNIT.read_text())
    service = unit["Service"]
    assert service["ExecStart"] == "%h/.local/bin/relaybus collector"
    assert service["EnvironmentFile"] == f"%h/{ENV_FILE}"
    assert service["Restart"] == "always"
    assert service["KillSignal"] == "SIGTERM"
    assert int(service["TimeoutStopSec"]) >= 15  # the collector's own shutdown bound fits
    assert unit["Install"]["WantedBy"] == "default.target"  # a user unit, not multi-user
    assert "network-online.target" in unit["Unit"]["After"]


def test_env_file_example_is_plain_key_value_lines() -> None:
    """collector.env.example parses the same for systemd and sh: KEY=value or KEY="value"."""
    for line in (DEPLOY / "collector.env.example").read_text().splitlines():
        if line and not line.startswith("#"):
            assert re.fullmatch(r'RELAYBUS_[A-Z_]+=("[^"$`\\]*"|[^\s"\'&;$`\\]*)', line), line


def test_launchd_agent_runs_a_collector_with_the_env_file(
    tmp_path: Path, server: RedisServer, namespace: str, claude_dir: Path
) -> None:
    """The plist's command, run as launchd would (HOME set, nothing else), reads
    ~/.config/relaybus/collector.env, starts a collector that joins the bus, and exits 0
    on SIGTERM."""
    agent = plistlib.loads(PLIST.read_bytes())
    assert agent["Label"] == PLIST.stem
    assert agent["KeepAlive"] is True and agent["RunAtLoad"] is True
    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "relaybus").symlink_to(Path(sys.executable).parent / "relaybus")
    example = (DEPLOY / "collector.env.example").read_text()
    env_text = re.sub(
        r"^RELAYBUS_REDIS_URL=.*$", f'RELAYBUS_REDIS_URL="{server.url}"', example, flags=re.M
    )
    env_text += f"RELAYBUS_NAMESPACE={namespace}\nRELAYBUS_CLAUDE_DIR={claude_dir}\n"
    (home / ENV_FILE).parent.mkdir(parents=True)
    (home / ENV_FILE).write_text(env_text)
    host_id = re.search(r"^RELAYBUS_HOST_ID=(\S+)$", example, re.M)
    assert host_id is not None

    launchd_env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    with (tmp_path / "agent.log").open("wb") as log:
        proc = subprocess.Popen(
            agent["ProgramArguments"], env=launchd_env, cwd="/", stdout=log, stderr=log
        )
    client = redis.Redis(port=server.port, socket_timeout=5)
    try:
        poll(lambda: client.exists(Keys(namespace).host(host_id.group(1))), timeout_s=60)
        os.kill(proc.pid, signal.SIGTERM)  # the shell exec'd relaybus: same pid
        assert proc.wait(30) == 0
    finally:
        client.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
