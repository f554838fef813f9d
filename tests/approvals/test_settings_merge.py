"""``relaybus install-hook``: settings.json merge that keeps everything, backs up, and undoes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from relaybus import claude_settings as cs
from tests.support.approvals import RELAYBUS

CMD = "/opt/relaybus/bin/relaybus hook permission-request"

ORIGINAL: dict[str, Any] = {
    "model": "opus",
    "permissions": {"allow": ["Bash(ls:*)"], "deny": []},
    "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "audit.sh"}]}],
        "PermissionRequest": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "other-approver"}]}
        ],
    },
    "env": {"FOO": "1"},
}


def _write(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(json.dumps(doc, indent=4) + "\n")


def _ours(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        h
        for g in doc.get("hooks", {}).get("PermissionRequest", [])
        for h in g["hooks"]
        if cs.MARKER in h["command"]
    ]


def test_install_keeps_unrelated_keys_and_backs_up(tmp_path: Path) -> None:
    """Install adds one hook entry, keeps every other key and hook, and saves the old file first."""
    path = tmp_path / "settings.json"
    _write(path, ORIGINAL)
    before = path.read_bytes()
    outcome = cs.install(path, CMD, 140)
    assert outcome.changed and outcome.backup is not None
    assert outcome.backup.read_bytes() == before
    doc = json.loads(path.read_text())
    assert _ours(doc) == [{"type": "command", "command": CMD, "timeout": 140}]
    assert {k: v for k, v in doc.items() if k != "hooks"} == {
        k: v for k, v in ORIGINAL.items() if k != "hooks"
    }
    assert doc["hooks"]["PreToolUse"] == ORIGINAL["hooks"]["PreToolUse"]
    assert doc["hooks"]["PermissionRequest"][0] == ORIGINAL["hooks"]["PermissionRequest"][0]
    assert list(doc) == list(ORIGINAL)  # key order kept


def test_install_is_idempotent(tmp_path: Path) -> None:
    """A second install changes nothing and writes no backup; a changed command updates in place."""
    path = tmp_path / "settings.json"
    _write(path, ORIGINAL)
    cs.install(path, CMD, 140)
    after_first = path.read_bytes()
    again = cs.install(path, CMD, 140)
    assert not again.changed and again.backup is None
    assert path.read_bytes() == after_first
    cs.install(path, CMD + " --port 9999", 140)
    assert [h["command"] for h in _ours(json.loads(path.read_text()))] == [CMD + " --port 9999"]


def test_remove_restores_the_original(tmp_path: Path) -> None:
    """install then --remove gives back the original document; removing again is a no-op."""
    path = tmp_path / "settings.json"
    _write(path, ORIGINAL)
    cs.install(path, CMD, 140)
    outcome = cs.remove(path)
    assert outcome.changed and outcome.backup is not None
    assert json.loads(path.read_text()) == ORIGINAL
    assert not cs.remove(path).changed


def test_missing_file_is_created_and_removed_cleanly(tmp_path: Path) -> None:
    """No settings.json yet: install creates one holding only the hook; remove leaves {}."""
    path = tmp_path / "sub" / "settings.json"
    outcome = cs.install(path, CMD, 130)
    assert outcome.changed and outcome.backup is None
    assert json.loads(path.read_text()) == {
        "hooks": {
            "PermissionRequest": [
                {"matcher": "*", "hooks": [{"type": "command", "command": CMD, "timeout": 130}]}
            ]
        }
    }
    cs.remove(path)
    assert json.loads(path.read_text()) == {}


def test_invalid_file_is_left_alone(tmp_path: Path) -> None:
    """A settings.json that is not a JSON object is refused and not touched."""
    path = tmp_path / "settings.json"
    path.write_text("{ not json")
    with pytest.raises(cs.SettingsFileError):
        cs.install(path, CMD, 130)
    assert path.read_text() == "{ not json"
    assert list(tmp_path.iterdir()) == [path]


def test_cli_install_and_remove(tmp_path: Path) -> None:
    """The real ``relaybus install-hook`` / ``--remove`` commands on a claude dir from the environment."""
    claude = tmp_path / "claude"
    claude.mkdir()
    path = claude / "settings.json"
    _write(path, ORIGINAL)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYBUS_")}
    env.update(RELAYBUS_CLAUDE_DIR=str(claude), RELAYBUS_APPROVAL_PORT="9555")
    out = subprocess.run(
        [str(RELAYBUS), "install-hook"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=True,
    )
    assert "installed" in out.stdout
    (hook,) = _ours(json.loads(path.read_text()))
    assert hook["command"].endswith("hook permission-request --port 9555")
    assert hook["timeout"] > 120
    again = subprocess.run(
        [str(RELAYBUS), "install-hook"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=True,
    )
    assert "already installed" in again.stdout
    subprocess.run(
        [str(RELAYBUS), "install-hook", "--remove"],
        env=env,
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
        check=True,
    )
    assert json.loads(path.read_text()) == ORIGINAL
    backups = sorted(p.name for p in claude.iterdir() if cs.BACKUP_SUFFIX in p.name)
    assert len(backups) == 2


def test_cli_install_writes_an_explicit_socket(tmp_path: Path) -> None:
    """RELAYBUS_APPROVAL_SOCKET set where install-hook runs: the hook command names that socket."""
    claude = tmp_path / "claude"
    claude.mkdir()
    path = claude / "settings.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYBUS_")}
    env.update(RELAYBUS_CLAUDE_DIR=str(claude), RELAYBUS_APPROVAL_SOCKET="/run/x y/a.sock")
    subprocess.run(
        [str(RELAYBUS), "install-hook"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=True,
    )
    (hook,) = _ours(json.loads(path.read_text()))
    assert hook["command"].endswith("hook permission-request --socket '/run/x y/a.sock'")
