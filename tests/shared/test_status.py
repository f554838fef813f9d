"""`relaybus status`: exit 0 for a running, ready `up`, 1 when none runs, 3 when unhealthy.

The state file names the process serving the gateway: here that is the test process itself,
which runs a real gateway on a real Redis (``up`` writes the same file, relaybus.upstate).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from relaybus import upstate
from tests.conftest import make_settings
from tests.support.gateway_server import running_gateway
from tests.support.servers import RedisServer, free_port
from tests.support.wait import wait_for


async def status(state_home: Path) -> tuple[int, list[str]]:
    """Run the real command (without blocking the gateway served by this loop)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYBUS_")}
    env["XDG_STATE_HOME"] = str(state_home)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "relaybus.cli", "status",
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert not err, err
    assert proc.returncode is not None
    return proc.returncode, out.decode().splitlines()


async def test_no_state_file_is_not_running(tmp_path: Path) -> None:
    """Without up's state file: exit 1, naming the file looked for."""
    code, lines = await status(tmp_path)
    assert code == 1
    assert lines == [f"relaybus up is not running (no state file {tmp_path}/relaybus/up.json)"]


async def test_state_file_of_a_dead_process_is_not_running(tmp_path: Path) -> None:
    """A state file left by a killed `up` (its pid gone): exit 1, not trusted."""
    dead = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await dead.wait()
    directory = tmp_path / "relaybus"
    directory.mkdir()
    upstate.write(upstate.UpState(pid=dead.pid, url="http://127.0.0.1:1/"), directory)
    code, lines = await status(tmp_path)
    assert code == 1 and f"pid {dead.pid}" in lines[0] and "is gone" in lines[0], lines


async def test_state_file_whose_pid_was_reused_is_not_running(tmp_path: Path) -> None:
    """A state file whose pid now names another live process (this test's own, started at
    another time than the one recorded): exit 1, not trusted."""
    other = await asyncio.create_subprocess_exec("sleep", "60")
    try:
        directory = tmp_path / "relaybus"
        directory.mkdir()
        then = upstate.process_start(other.pid)
        state = upstate.UpState(pid=os.getpid(), url="http://127.0.0.1:1/", pid_start=then)
        upstate.write(state, directory)
        code, lines = await status(tmp_path)
        assert code == 1 and f"pid {os.getpid()}" in lines[0] and "is gone" in lines[0], lines
    finally:
        other.kill()
        await other.wait()


async def test_running_then_unhealthy_when_redis_dies(
    tmp_path: Path, private_server: Callable[..., RedisServer], namespace: str
) -> None:
    """A ready gateway: exit 0 with the phone URL minus its token; Redis killed: exit 3."""
    srv = private_server()
    settings = make_settings(srv.url, namespace, redis_socket_timeout_s=1)
    directory = tmp_path / "relaybus"
    directory.mkdir()
    async with running_gateway(settings) as gw:
        url = f"http://127.0.0.1:{gw.port}/"
        state = upstate.UpState(
            pid=os.getpid(), url=url + "#token=secret", redis=f"127.0.0.1:{srv.port}"
        )
        upstate.write(state, directory)
        code, lines = await status(tmp_path)
        assert code == 0, lines
        assert lines[0].startswith(f"relaybus up is running: pid {os.getpid()}, for 0 min")
        assert f"  phone URL: {url} (`relaybus url` prints it with the token)" in lines
        assert "secret" not in "\n".join(lines)
        assert lines[-1] == "  healthy:   its gateway is ready"

        srv.stop()

        async def unhealthy() -> list[str] | None:
            code, lines = await status(tmp_path)
            return lines if code == 3 else None

        lines = await wait_for(unhealthy, timeout_s=30, interval_s=0.2, what="exit 3")
        assert lines[-1].startswith("  unhealthy: its gateway is up but not ready"), lines


async def test_gateway_gone_is_unhealthy(tmp_path: Path) -> None:
    """The process runs but nothing answers on its gateway port: exit 3 saying so."""
    directory = tmp_path / "relaybus"
    directory.mkdir()
    port = free_port()
    upstate.write(upstate.UpState(pid=os.getpid(), url=f"http://127.0.0.1:{port}/"), directory)
    code, lines = await status(tmp_path)
    assert code == 3
    assert lines[-1].startswith(f"  unhealthy: its gateway does not answer at 127.0.0.1:{port}")
