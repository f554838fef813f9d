"""`relaybus doctor`: one line per first-run check, each with its fix; exit 1 when one fails."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from relaybus.lan import lan_address
from tests.support.collector_records import append, transcript, user_line
from tests.support.servers import RedisServer, free_port


@dataclass
class Report:
    code: int
    lines: list[str]

    def about(self, name: str) -> list[str]:
        """The lines of one check (``ok    redis     …``)."""
        return [line for line in self.lines if line[6:].split(" ", 1)[0] == name]

    def one(self, name: str) -> str:
        found = self.about(name)
        assert len(found) == 1, self.lines
        return found[0]


def doctor(tmp: Path, *args: str, **env: str) -> Report:
    """Run the real command with a private HOME, free ports and no RELAYBUS_* of the runner."""
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RELAYBUS_") and k != "CLAUDE_CONFIG_DIR"
    }
    base.update(
        HOME=str(home),
        RELAYBUS_GATEWAY_PORT=str(free_port()),
        RELAYBUS_COLLECTOR_METRICS_PORT="0",
        RELAYBUS_APPROVAL_PORT="0",
    )
    base.update(env)
    out = subprocess.run(
        [sys.executable, "-m", "relaybus.cli", "doctor", *args],
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert "Traceback" not in out.stderr, out.stderr
    return Report(out.returncode, out.stdout.splitlines())


def test_redis_answers(server: RedisServer, tmp_path: Path) -> None:
    """A reachable Redis with the right credentials is ok."""
    report = doctor(tmp_path, RELAYBUS_REDIS_URL=server.url)
    assert (
        report.one("redis")
        == f"ok    redis     Redis at 127.0.0.1:{server.port} answers and accepts these credentials"
    )


def test_redis_refuses_the_password(
    private_server: Callable[..., RedisServer], tmp_path: Path
) -> None:
    """A password Redis refuses fails the check (exit 1) with the variable to fix."""
    srv = private_server()
    admin = srv.client()
    admin.config_set("requirepass", "right")
    admin.close()
    report = doctor(tmp_path, RELAYBUS_REDIS_URL=f"redis://:wrong@127.0.0.1:{srv.port}/0")
    assert report.code == 1
    line = report.one("redis")
    assert line.startswith("FAIL") and "refused the password" in line and "wrong" not in line


def test_redis_unreachable(tmp_path: Path) -> None:
    """Nothing listening at the URL fails the check and says how to fix it."""
    port = free_port()
    report = doctor(tmp_path, RELAYBUS_REDIS_URL=f"redis://127.0.0.1:{port}/0")
    assert report.code == 1
    line = report.one("redis")
    assert line.startswith(f"FAIL  redis     Redis at 127.0.0.1:{port} is unreachable")
    assert "RELAYBUS_REDIS_URL" in line


def test_redis_embedded_without_a_url(tmp_path: Path) -> None:
    """Without a URL, `relaybus up` brings its own server: ok."""
    assert "embedded" in doctor(tmp_path).one("redis")


def test_claude_dir_counts_transcripts_and_old_ones(tmp_path: Path, claude_dir: Path) -> None:
    """The Claude dir's transcripts are counted, and those older than the backfill window."""
    for sid in ("a", "b", "c"):
        append(transcript(claude_dir, sid), user_line(sid, "hi"))
    old = time.time() - 3 * 86400
    os.utime(transcript(claude_dir, "c"), (old, old))
    report = doctor(tmp_path, RELAYBUS_CLAUDE_DIR=str(claude_dir))
    assert report.one("claude") == (
        f"ok    claude    {claude_dir} holds 3 transcripts; 1 last changed more than 24 h ago "
        "are tracked but not replayed (RELAYBUS_BACKFILL_MAX_AGE_HOURS)"
    )


def test_claude_dir_missing_or_empty_or_a_file(tmp_path: Path, claude_dir: Path) -> None:
    """No ~/.claude yet warns; an empty one warns; a file or a mistyped path fails."""
    assert (
        doctor(tmp_path)
        .one("claude")
        .startswith(f"warn  claude    {tmp_path}/home/.claude does not exist yet")
    )
    assert "holds no transcripts" in doctor(tmp_path, RELAYBUS_CLAUDE_DIR=str(claude_dir)).one(
        "claude"
    )
    report = doctor(tmp_path, RELAYBUS_CLAUDE_DIR=str(tmp_path / "typo"))
    assert report.code == 1 and "does not exist" in report.one("claude")


@pytest.fixture
def runtime_dir() -> Iterator[Path]:
    """A short private XDG_RUNTIME_DIR (a Unix socket path must stay under 104 bytes)."""
    with tempfile.TemporaryDirectory(prefix="rbdoc-") as d:
        yield Path(d)


def test_ports_free_and_taken(tmp_path: Path, runtime_dir: Path) -> None:
    """Free ports are ok; a taken one fails naming its variable; port 0 is off; the
    approval socket is named with its private directory."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        approvals = free_port()
        report = doctor(
            tmp_path,
            RELAYBUS_GATEWAY_HOST="127.0.0.1",
            RELAYBUS_GATEWAY_PORT=str(taken),
            RELAYBUS_APPROVAL_PORT=str(approvals),
            XDG_RUNTIME_DIR=str(runtime_dir),
        )
    ports = report.about("port")
    assert report.code == 1
    assert any(
        line.startswith(
            f"FAIL  port      gateway: port {taken} on 127.0.0.1 (RELAYBUS_GATEWAY_PORT)"
        )
        for line in ports
    ), ports
    assert (
        f"ok    port      approvals: socket {runtime_dir}/relaybus/approval-{approvals}.sock (directory private to this user)"
        in ports
    )
    assert "note  port      metrics: off (RELAYBUS_COLLECTOR_METRICS_PORT=0)" in ports


def test_approval_socket_directory_open_to_others_fails(tmp_path: Path, runtime_dir: Path) -> None:
    """The hook's socket directory must be private (0700): a shared one fails with the fix."""
    shared = runtime_dir / "relaybus"
    shared.mkdir()
    shared.chmod(0o777)
    report = doctor(tmp_path, RELAYBUS_APPROVAL_PORT="9465", XDG_RUNTIME_DIR=str(runtime_dir))
    line = next(line for line in report.about("port") if "approvals" in line)
    assert line.startswith("FAIL  port      approvals:") and "open to other users" in line
    assert "RELAYBUS_APPROVAL_SOCKET" in line


def test_hook_missing_installed_and_foreign(tmp_path: Path, claude_dir: Path) -> None:
    """The permission hook: a note when absent, ok once `install-hook` put this install's
    command in, a warning when it points at another install."""
    env = {"RELAYBUS_CLAUDE_DIR": str(claude_dir)}
    assert doctor(tmp_path, **env).one("hook").startswith("note  hook      not installed")
    base = {k: v for k, v in os.environ.items() if not k.startswith("RELAYBUS_")}
    subprocess.run(
        [sys.executable, "-m", "relaybus.cli", "install-hook"],
        check=True,
        env={**base, **env, "HOME": str(tmp_path), "RELAYBUS_APPROVAL_PORT": "0"},
        capture_output=True,
        timeout=60,
    )
    assert doctor(tmp_path, **env).one("hook") == (
        f"ok    hook      installed in {claude_dir}/settings.json, pointing at this install"
    )
    settings = json.loads((claude_dir / "settings.json").read_text())
    command = settings["hooks"]["PermissionRequest"][0]["hooks"][0]["command"]
    # the README's `relaybus hook permission-request`, with this venv's script even unactivated
    assert command.startswith(f"{Path(sys.executable).parent / 'relaybus'} hook permission-request")
    settings["hooks"]["PermissionRequest"][0]["hooks"][0]["command"] = (
        "/old/venv/bin/relaybus hook permission-request"
    )
    (claude_dir / "settings.json").write_text(json.dumps(settings))
    line = doctor(tmp_path, **env).one("hook")
    assert (
        line.startswith("warn  hook")
        and "/old/venv/bin/relaybus" in line
        and "install-hook" in line
    )


def test_prompts_off_allowed_and_missing_cli(tmp_path: Path) -> None:
    """Prompts: off by default (a note saying how to allow them), ok with a CLI on PATH,
    a failure when allowed without one."""
    assert "RELAYBUS_ALLOW_PROMPTS=true" in doctor(tmp_path).one("prompts")
    allowed = doctor(tmp_path, RELAYBUS_ALLOW_PROMPTS="true", RELAYBUS_CLAUDE_BIN=sys.executable)
    assert (
        allowed.one("prompts")
        == f"ok    prompts   allowed on this machine, run with {sys.executable}"
    )
    missing = doctor(tmp_path, RELAYBUS_ALLOW_PROMPTS="true", RELAYBUS_CLAUDE_BIN="no-such-claude")
    assert missing.code == 1 and missing.one("prompts").startswith("FAIL  prompts   allowed, but")


def test_lan_reachability_follows_the_gateway_host(tmp_path: Path) -> None:
    """A gateway on all interfaces is reachable at the LAN address the banner prints; on
    loopback only it is not, and the fix names RELAYBUS_GATEWAY_HOST."""
    if lan_address().startswith("127."):
        line = doctor(tmp_path, RELAYBUS_GATEWAY_HOST="0.0.0.0").one("lan")
        assert line.startswith("warn  lan       this machine has no LAN address")
        return
    wide = doctor(tmp_path, RELAYBUS_GATEWAY_HOST="0.0.0.0").one("lan")
    assert wide.startswith("ok    lan") and f"http://{lan_address()}:" in wide
    narrow = doctor(tmp_path, RELAYBUS_GATEWAY_HOST="127.0.0.1")
    assert narrow.code == 1
    assert "set RELAYBUS_GATEWAY_HOST=0.0.0.0" in narrow.one("lan")


@pytest.mark.parametrize("status", ["ok", "FAIL"])
def test_exit_code_follows_failures(
    status: str, server: RedisServer, tmp_path: Path, claude_dir: Path
) -> None:
    """Exit 0 and "Ready for a first run." when nothing fails; 1 and a count otherwise."""
    append(transcript(claude_dir, "s"), user_line("s", "hi"))
    url = server.url if status == "ok" else f"redis://127.0.0.1:{free_port()}/0"
    report = doctor(
        tmp_path,
        RELAYBUS_REDIS_URL=url,
        RELAYBUS_CLAUDE_DIR=str(claude_dir),
        RELAYBUS_GATEWAY_HOST="0.0.0.0",
    )
    failed = [line for line in report.lines if line.startswith("FAIL")]
    assert report.code == (1 if failed else 0)
    assert report.lines[-1] == (
        f"{len(failed)} check(s) failed." if failed else "Ready for a first run."
    )
    assert bool(failed) == (status == "FAIL")
