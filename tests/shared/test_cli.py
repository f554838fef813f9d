"""The console script: options generated from the settings, one-line configuration errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from shared.cli import COMMANDS, build_parser, settings_from_args
from shared.settings import Settings, SettingsError, load_settings

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shared.cli", *args],
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
