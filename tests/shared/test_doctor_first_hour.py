"""`relaybus doctor` on a first run's traps: a healthy `relaybus up` is no failure, and
Claude's projects/ directory unreadable, empty, or named as RELAYBUS_CLAUDE_DIR warns."""

from __future__ import annotations

from pathlib import Path

from tests.shared.test_doctor import doctor
from tests.support.collector_records import append, transcript, user_line
from tests.support.deploy_up import UpProc
from tests.support.servers import free_port


def test_claude_dir_set_to_projects_itself_warns(tmp_path: Path, claude_dir: Path) -> None:
    """RELAYBUS_CLAUDE_DIR=~/.claude/projects warns naming the directory to use instead."""
    append(transcript(claude_dir, "a"), user_line("a", "hi"))
    projects = claude_dir / "projects"
    line = doctor(tmp_path, RELAYBUS_CLAUDE_DIR=str(projects)).one("claude")
    assert line == (
        f"warn  claude    RELAYBUS_CLAUDE_DIR {projects} is Claude's projects/ directory "
        f"itself (the collector would create {projects / 'projects'}) — set "
        f"RELAYBUS_CLAUDE_DIR={claude_dir}"
    )


def test_unreadable_projects_warns(tmp_path: Path, claude_dir: Path) -> None:
    """A projects/ that cannot be listed warns with the reason, not "no transcripts".

    (The suite runs as root, whom permission bits do not stop: a file in its place is the
    unreadable directory here.)"""
    projects = claude_dir / "projects"
    projects.rmdir()
    projects.write_text("")
    line = doctor(tmp_path, RELAYBUS_CLAUDE_DIR=str(claude_dir)).one("claude")
    assert line.startswith(f"warn  claude    cannot read {projects} (Not a directory)"), line


def test_empty_projects_warns(tmp_path: Path, claude_dir: Path) -> None:
    """An empty projects/ warns naming it."""
    line = doctor(tmp_path, RELAYBUS_CLAUDE_DIR=str(claude_dir)).one("claude")
    assert line.startswith(
        f"warn  claude    {claude_dir} holds no transcripts: {claude_dir}/projects is empty"
    ), line


def test_doctor_passes_ports_of_a_running_up(tmp_path: Path, claude_dir: Path) -> None:
    """Against a healthy `relaybus up`, its gateway and metrics ports are ok, not failures."""
    metrics = free_port()
    up = UpProc(tmp_path, claude_dir)
    up.args += ["--collector-metrics-port", str(metrics)]
    try:
        up.start().wait_banner()
        report = doctor(
            tmp_path,
            HOME=str(up.home),
            XDG_STATE_HOME=str(up.state),
            RELAYBUS_CLAUDE_DIR=str(claude_dir),
            RELAYBUS_GATEWAY_HOST="127.0.0.1",
            RELAYBUS_GATEWAY_PORT=str(up.port),
            RELAYBUS_COLLECTOR_METRICS_HOST="127.0.0.1",
            RELAYBUS_COLLECTOR_METRICS_PORT=str(metrics),
        )
    finally:
        up.kill()
    ports = report.about("port")
    assert (
        f"ok    port      gateway: a relaybus gateway already serves 127.0.0.1:{up.port}" in ports
    )
    assert (
        f"ok    port      metrics: in use by relaybus (its collector's /metrics on {metrics})"
        in ports
    ), ports


def test_group_writable_sessions_dir_warns(tmp_path: Path, claude_dir: Path) -> None:
    """A sessions/ others can write (umask 002) warns with the fix; chmod go-w makes it ok."""
    sessions = claude_dir / "sessions"
    sessions.mkdir(exist_ok=True)
    sessions.chmod(0o775)
    line = doctor(tmp_path, RELAYBUS_CLAUDE_DIR=str(claude_dir)).one("live")
    assert line.startswith(f"warn  live      {sessions} is writable by group or others"), line
    assert "chmod go-w" in line
    sessions.chmod(0o755)
    line = doctor(tmp_path, RELAYBUS_CLAUDE_DIR=str(claude_dir)).one("live")
    assert line.startswith(f"ok    live      {sessions}"), line
