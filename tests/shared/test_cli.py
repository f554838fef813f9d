"""The console script: options generated from the settings, one-line configuration errors.

Each mistake a user makes runs the real command and gets exactly one line on stderr and a
non-zero exit: 2 for an invalid value, 1 for something unusable (Redis refuses the
settings, a port is taken, a directory cannot be used).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from relaybus.cli import COMMANDS, ENV_ONLY, build_parser, settings_from_args
from relaybus.shared.settings import Settings, SettingsError, load_settings
from relaybus.shared.store.keys import Keys
from tests.conftest import BINARIES, DEFAULT_KIND
from tests.support.collector_records import append, transcript, user_line
from tests.support.servers import RedisServer, free_port
from tests.support.wait import poll

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "s3cret-pw"


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relaybus.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd="/",
    )


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_documents_every_option(command: str) -> None:
    """`relaybus <command> --help` names the env variable of every option it accepts."""
    out = run_cli(command, "--help")
    assert out.returncode == 0
    for field in COMMANDS[command][1]:
        assert f"RELAYBUS_{field.upper()}" in out.stdout, field
        assert f"--{field.replace('_', '-')}" in out.stdout


def test_top_level_help_lists_subcommands() -> None:
    """`relaybus --help` lists collector, gateway and up."""
    out = run_cli("--help")
    assert out.returncode == 0
    for command in ("collector", "gateway", "up"):
        assert command in out.stdout


def test_invalid_env_value_fails_with_one_line() -> None:
    """A bad variable stops start-up with exit 2 and one line naming it."""
    import os

    env = dict(os.environ, RELAYBUS_SESSION_MAXLEN="lots")
    out = run_cli("collector", env=env)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "RELAYBUS_SESSION_MAXLEN" in lines[0]


def _no_private_network() -> str | None:
    """Why ``unshare --net`` cannot run here, or None."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(["unshare", "--net", "--", "true"], capture_output=True, timeout=10)
    return None if probe.returncode == 0 else "unshare --net is not permitted here"


@pytest.mark.parametrize("command", ["collector", "gateway"])
def test_no_redis_url_is_one_line_and_no_fallback(command: str, tmp_path: Path) -> None:
    """Without RELAYBUS_REDIS_URL a collector or gateway stops with exit 2 and one line: it
    never falls back to a Redis of this machine's own (127.0.0.1:6379, database 0)."""
    if (why := _no_private_network()) is not None:
        pytest.skip(why)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYBUS_")}
    env["RELAYBUS_CLAUDE_DIR"] = str(tmp_path)
    # In a network namespace of its own: no Redis of this machine can answer a fallback.
    out = subprocess.run(
        ["unshare", "--net", "--", sys.executable, "-m", "relaybus.cli", command],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd="/",
    )
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "RELAYBUS_REDIS_URL is not set" in lines[0], lines


def test_flag_wins_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command-line flag overrides the same variable from the environment."""
    monkeypatch.setenv("RELAYBUS_NAMESPACE", "fromenv")
    args = build_parser().parse_args(["collector", "--namespace", "fromflag"])
    assert settings_from_args(args).namespace == "fromflag"
    assert load_settings().namespace == "fromenv"


def test_bad_namespace_is_refused() -> None:
    """A namespace that would break the {ns} hash tag is rejected, naming the variable."""
    with pytest.raises(SettingsError, match="RELAYBUS_NAMESPACE"):
        load_settings(namespace="a}b")


@pytest.mark.parametrize("host", ["box\x1b[2J", "box\x7f", "box\tb", "a:b"])
def test_host_id_with_a_control_character_is_refused(host: str) -> None:
    """RELAYBUS_HOST_ID holds no control character, whitespace or ':' (it reaches logs, the
    audit trail and the phone): refused, naming the variable."""
    with pytest.raises(SettingsError, match="RELAYBUS_HOST_ID"):
        load_settings(host_id=host)
    assert load_settings(host_id="büro-1.lan").host_id == "büro-1.lan"


def test_configuration_doc_lists_every_variable() -> None:
    """docs/configuration.md documents every RELAYBUS_ variable."""
    doc = (ROOT / "docs" / "configuration.md").read_text()
    for name in Settings.model_fields:
        assert f"`RELAYBUS_{name.upper()}`" in doc, name


def test_test_settings_ignore_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's ``make_settings`` is not changed by ``RELAYBUS_*`` variables of the runner."""
    from tests.conftest import make_settings

    monkeypatch.setenv("RELAYBUS_BATCH_MAX_LINES", "7")
    monkeypatch.setenv("RELAYBUS_APPROVAL_PORT", "9999")
    settings = make_settings("redis://127.0.0.1:1/0", "ns", batch_max_lines=9)
    assert settings.batch_max_lines == 9
    assert settings.approval_port == 0
    assert make_settings("redis://127.0.0.1:1/0", "ns").batch_max_lines == 500


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The runner's environment without RELAYBUS_*, a private HOME, no fixed ports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYBUS_")}
    (tmp / "home").mkdir(exist_ok=True)
    env.update(
        HOME=str(tmp / "home"),
        XDG_STATE_HOME=str(tmp / "state"),
        RELAYBUS_COLLECTOR_METRICS_PORT="0",
        RELAYBUS_APPROVAL_PORT="0",
        RELAYBUS_GATEWAY_HOST="127.0.0.1",
        RELAYBUS_GATEWAY_PORT=str(free_port()),
        RELAYBUS_TOKENS="full-token",
        RELAYBUS_REDIS_SOCKET_TIMEOUT_S="2",
    )
    env.update(extra)
    return env


def one_line(out: subprocess.CompletedProcess[str]) -> str:
    """The single line a failed start prints (and nothing else on stderr)."""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "Traceback" not in out.stderr
    return lines[0]


@pytest.fixture
def locked(private_server: Callable[..., RedisServer]) -> RedisServer:
    """A server of this test's own that wants PASSWORD."""
    srv = private_server()
    client = srv.client()
    client.config_set("requirepass", PASSWORD)
    client.close()
    return srv


def locked_url(srv: RedisServer, password: str | None = PASSWORD, db: int = 0) -> str:
    auth = f":{password}@" if password is not None else ""
    return f"redis://{auth}127.0.0.1:{srv.port}/{db}"


@pytest.mark.parametrize("command", ["collector", "gateway"])
def test_wrong_password_is_one_line_and_exit_1(
    command: str, locked: RedisServer, claude_dir: Path, tmp_path: Path
) -> None:
    """A password Redis refuses ends the start with one line, exit 1, the password not shown."""
    env = clean_env(
        tmp_path,
        RELAYBUS_REDIS_URL=locked_url(locked, "wrong-pw"),
        RELAYBUS_CLAUDE_DIR=str(claude_dir),
    )
    out = run_cli(command, env=env)
    assert out.returncode == 1
    line = one_line(out)
    assert f"Redis at 127.0.0.1:{locked.port} refused the password" in line
    assert "wrong-pw" not in out.stderr + out.stdout


def test_missing_password_is_one_line_and_exit_1(
    locked: RedisServer, claude_dir: Path, tmp_path: Path
) -> None:
    """A URL without the password Redis requires says where the password goes."""
    env = clean_env(
        tmp_path, RELAYBUS_REDIS_URL=locked_url(locked, None), RELAYBUS_CLAUDE_DIR=str(claude_dir)
    )
    out = run_cli("collector", env=env)
    assert out.returncode == 1
    assert "requires a password: put it in RELAYBUS_REDIS_URL" in one_line(out)


def test_database_the_server_lacks_is_one_line_and_exit_1(
    locked: RedisServer, claude_dir: Path, tmp_path: Path
) -> None:
    """`/99` (more than the server's 16 databases) is refused at start, not a crash loop."""
    env = clean_env(
        tmp_path, RELAYBUS_REDIS_URL=locked_url(locked, db=99), RELAYBUS_CLAUDE_DIR=str(claude_dir)
    )
    out = run_cli("collector", env=env)
    assert out.returncode == 1
    assert "has no database 99" in one_line(out)


def _resolver_says_no_such_host(name: str) -> bool:
    try:
        socket.getaddrinfo(name, 6379)
    except socket.gaierror as exc:
        return exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME))
    return False


def test_unknown_host_is_one_line_and_exit_1(
    server: RedisServer, namespace: str, claude_dir: Path, tmp_path: Path
) -> None:
    """A host name the resolver says does not exist is permanent: one line naming it, exit 1.
    (Where DNS cannot answer at all, that is an outage: the gateway keeps retrying.)"""
    name = "no-such-host.invalid"
    env = clean_env(
        tmp_path,
        RELAYBUS_REDIS_URL=f"redis://:pw@{name}:6379/0",
        RELAYBUS_NAMESPACE=namespace,
        RELAYBUS_CLAUDE_DIR=str(claude_dir),
    )
    if _resolver_says_no_such_host(name):
        out = run_cli("gateway", env=env)
        assert out.returncode == 1
        assert f"unknown host '{name}' in RELAYBUS_REDIS_URL" in one_line(out)
        return
    log_path = tmp_path / "gateway.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "relaybus.cli", "gateway"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd="/",
        )
    try:
        poll(lambda: "is unreachable" in log_path.read_text() or proc.poll() is not None, 60)
        assert proc.poll() is None, log_path.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_invalid_host_name_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """A host name with an empty label (`team..server`) is an invalid value, not a traceback."""
    out = run_cli(
        "collector", env=clean_env(tmp_path, RELAYBUS_REDIS_URL="redis://:pw@team..server:6379/0")
    )
    assert out.returncode == 2
    assert "invalid host name 'team..server'" in one_line(out)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("127.0.0.1:6379", "must start with redis://"),
        ("redis://:pw@127.0.0.1:99999/0", "port that is not a number"),
        ("redis://:pw@127.0.0.1:six/0", "port that is not a number"),
        ("redis://:pw@127.0.0.1:6379/zero", "the database must be a number"),
    ],
    ids=["no-scheme", "port-range", "port-text", "db-text"],
)
def test_malformed_redis_url_is_one_line_and_exit_2(
    url: str, says: str, claude_dir: Path, tmp_path: Path
) -> None:
    """A URL that cannot be parsed is an invalid value: one line, exit 2, no password shown."""
    env = clean_env(tmp_path, RELAYBUS_REDIS_URL=url, RELAYBUS_CLAUDE_DIR=str(claude_dir))
    out = run_cli("collector", env=env)
    assert out.returncode == 2
    line = one_line(out)
    assert line.startswith("relaybus: invalid RELAYBUS_REDIS_URL:") and says in line
    assert ":pw@" not in line


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("RELAYBUS_LOG_LEVEL", "LOUD"),
        ("RELAYBUS_TURN_BACKSTOP_SECONDS", "inf"),
        ("RELAYBUS_SESSION_TTL_DAYS", "1e400"),
        ("RELAYBUS_RATE_LIMIT_PER_S", "nan"),
        ("RELAYBUS_LOG_MAXLEN", "12345678901234567890"),
        ("RELAYBUS_HEARTBEAT_TTL_S", "99999999"),
    ],
)
def test_out_of_range_values_are_one_line_and_exit_2(
    variable: str, value: str, tmp_path: Path
) -> None:
    """Unknown log levels, non-finite and huge numbers are refused before anything starts."""
    out = run_cli("up", env=clean_env(tmp_path, **{variable: value}))
    assert out.returncode == 2
    line = one_line(out)
    assert f"invalid {variable}:" in line


def test_log_level_is_case_insensitive() -> None:
    """`debug` is DEBUG; the level is stored upper-case for logging."""
    assert load_settings(log_level="debug").log_level == "DEBUG"


def test_taken_metrics_port_is_one_line_naming_it(
    server: RedisServer, namespace: str, claude_dir: Path, tmp_path: Path
) -> None:
    """A collector whose metrics port is taken names the port and the variable, exit 1."""
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = clean_env(
            tmp_path,
            RELAYBUS_REDIS_URL=server.url,
            RELAYBUS_NAMESPACE=namespace,
            RELAYBUS_CLAUDE_DIR=str(claude_dir),
            RELAYBUS_COLLECTOR_METRICS_PORT=str(port),
        )
        out = run_cli("collector", env=env)
    assert out.returncode == 1
    line = one_line(out)
    assert f"metrics port {port}" in line and "RELAYBUS_COLLECTOR_METRICS_PORT" in line


def test_claude_dir_that_is_a_file_is_one_line(
    server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """--claude-dir pointing at a file is refused in one line, exit 1."""
    a_file = tmp_path / "settings.json"
    a_file.write_text("{}")
    env = clean_env(tmp_path, RELAYBUS_REDIS_URL=server.url, RELAYBUS_NAMESPACE=namespace)
    out = run_cli("collector", "--claude-dir", str(a_file), env=env)
    assert out.returncode == 1
    assert f"RELAYBUS_CLAUDE_DIR {a_file} is a file" in one_line(out)


def test_mistyped_claude_dir_is_refused_not_created(
    server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """A RELAYBUS_CLAUDE_DIR that does not exist is refused in one line and not created."""
    typo = tmp_path / ".claudee"
    env = clean_env(
        tmp_path,
        RELAYBUS_REDIS_URL=server.url,
        RELAYBUS_NAMESPACE=namespace,
        RELAYBUS_CLAUDE_DIR=str(typo),
    )
    out = run_cli("collector", env=env)
    assert out.returncode == 1
    assert f"RELAYBUS_CLAUDE_DIR {typo} does not exist" in one_line(out)
    assert not typo.exists()


def _read_only(directory: Path) -> list[str]:
    """A command prefix that runs a program with ``directory`` read-only (a bind mount in a
    private mount namespace for root, who ignores permissions; chmod otherwise)."""
    if os.geteuid() != 0:
        directory.chmod(0o555)
        return []
    if shutil.which("unshare") is None:
        pytest.fail("root needs unshare (util-linux) to make a read-only directory")
    script = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(directory)]


def test_read_only_claude_dir_without_sessions_runs(
    server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """A read-only Claude dir (compose mounts it :ro) without sessions/ does not crash: the
    collector warns once and publishes the transcripts it finds."""
    claude = tmp_path / "ro-claude"
    path = transcript(claude, "ro1")
    append(path, user_line("ro1", "read-only hello"))
    env = clean_env(
        tmp_path,
        RELAYBUS_REDIS_URL=server.url,
        RELAYBUS_NAMESPACE=namespace,
        RELAYBUS_CLAUDE_DIR=str(claude),
        RELAYBUS_HOST_ID="rohost",
    )
    log_path = tmp_path / "collector.log"
    argv = [*_read_only(claude), sys.executable, "-m", "relaybus.cli", "collector"]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log, cwd="/")
    client = server.client()
    try:
        poll(lambda: client.exists(Keys(namespace).session("ro1")) or proc.poll() is not None)
        assert proc.poll() is None, log_path.read_text()
        assert not (claude / "sessions").exists()
        text = log_path.read_text()
        assert "not watching it" in text and "Traceback" not in text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        client.close()


def test_unknown_token_scope_is_one_line_and_exit_2(server: RedisServer, tmp_path: Path) -> None:
    """`abc:write` is not a full-access token with secret `abc:write`: one line, exit 2,
    the secret not shown."""
    env = clean_env(tmp_path, RELAYBUS_REDIS_URL=server.url, RELAYBUS_TOKENS="good,abc:write")
    out = run_cli("gateway", env=env)
    assert out.returncode == 2
    line = one_line(out)
    assert "unknown scope 'write'" in line and "abc" not in line


def test_anonymous_gateway_warns_at_start(
    server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """A gateway serving without tokens says so in its log when it starts."""
    env = clean_env(
        tmp_path,
        RELAYBUS_REDIS_URL=server.url,
        RELAYBUS_NAMESPACE=namespace,
        RELAYBUS_TOKENS="",
        RELAYBUS_ALLOW_ANONYMOUS="true",
        RELAYBUS_GATEWAY_HOST="127.0.0.1",  # anonymous without tokens: loopback only
    )
    log_path = tmp_path / "gateway.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "relaybus.cli", "gateway"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd="/",
        )
    try:
        poll(
            lambda: (
                "RELAYBUS_ALLOW_ANONYMOUS is on" in log_path.read_text() or proc.poll() is not None
            )
        )
        assert proc.poll() is None, log_path.read_text()
        assert '"level":"warning"' in next(
            line for line in log_path.read_text().splitlines() if "ALLOW_ANONYMOUS" in line
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_unreachable_redis_is_retried_then_used(
    namespace: str, claude_dir: Path, tmp_path: Path
) -> None:
    """An unreachable Redis is not an error: the collector says so once, keeps running, and
    publishes once the server answers."""
    port = free_port()
    env = clean_env(
        tmp_path,
        RELAYBUS_REDIS_URL=f"redis://127.0.0.1:{port}/0",
        RELAYBUS_NAMESPACE=namespace,
        RELAYBUS_CLAUDE_DIR=str(claude_dir),
    )
    log_path = tmp_path / "collector.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "relaybus.cli", "collector"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd="/",
        )
    try:
        poll(lambda: "is unreachable" in log_path.read_text() or proc.poll() is not None)
        assert proc.poll() is None, log_path.read_text()
        append(transcript(claude_dir, "late"), user_line("late", "waited in the file"))
        srv = RedisServer(DEFAULT_KIND, BINARIES[DEFAULT_KIND], tmp_path / "late-srv", port=port)
        srv.start()
        try:
            client = srv.client()
            poll(lambda: client.exists(Keys(namespace).session("late")), timeout_s=60)
            client.close()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
        finally:
            srv.stop()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert log_path.read_text().count("is unreachable") == 1


def test_default_claude_dir_missing_is_created_with_a_warning(
    server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """A fresh machine (no ~/.claude, no RELAYBUS_CLAUDE_DIR) is not refused: the collector
    warns once, creates the default directory and runs."""
    env = clean_env(
        tmp_path,
        RELAYBUS_REDIS_URL=server.url,
        RELAYBUS_NAMESPACE=namespace,
        RELAYBUS_HOST_ID="freshhost",
    )
    env.pop("CLAUDE_CONFIG_DIR", None)
    default = tmp_path / "home" / ".claude"
    log_path = tmp_path / "collector.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "relaybus.cli", "collector"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd="/",
        )
    client = server.client()
    try:
        poll(lambda: client.exists(Keys(namespace).host("freshhost")) or proc.poll() is not None)
        assert proc.poll() is None, log_path.read_text()
        assert (default / "projects").is_dir()
        assert log_path.read_text().count("does not exist yet") == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        client.close()


def test_every_setting_has_a_cli_role() -> None:
    """Each Settings field is a flag of some relaybus subcommand, or env-only with a reason."""
    parser = build_parser()
    subcommands = next(
        a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
    ).choices
    flags = {
        flag for sub in subcommands.values() for a in sub._actions for flag in a.option_strings
    }
    for name in Settings.model_fields:
        if name in ENV_ONLY:
            assert ENV_ONLY[name].strip(), f"{name} is env-only without a reason"
            assert f"--{name.replace('_', '-')}" not in flags, f"{name} is env-only and a flag"
        else:
            assert f"--{name.replace('_', '-')}" in flags, (
                f"{name} has no flag and no env-only reason"
            )
    assert set(ENV_ONLY) <= set(Settings.model_fields), "ENV_ONLY names an unknown setting"
