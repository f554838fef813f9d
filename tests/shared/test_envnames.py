"""Unknown RELAYBUS_* variables: each named once on stderr with the closest real name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from relaybus.envnames import known_names, unknown_warnings
from relaybus.shared.settings import Settings

KNOWN = known_names(Settings.model_fields)


def test_typo_names_the_closest_setting() -> None:
    """RELAYBUS_GATEWAY_PROT is reported with RELAYBUS_GATEWAY_PORT as the likely meaning."""
    assert unknown_warnings(["RELAYBUS_GATEWAY_PROT", "PATH"], KNOWN) == [
        "relaybus: unknown variable RELAYBUS_GATEWAY_PROT is ignored "
        "(did you mean RELAYBUS_GATEWAY_PORT?)"
    ]


def test_real_compose_and_test_names_are_not_reported() -> None:
    """Settings (any case), compose's own names and RELAYBUS_TEST_* raise no warning."""
    names = ["RELAYBUS_REDIS_URL", "relaybus_log_level", "RELAYBUS_UID", "RELAYBUS_TEST_X"]
    assert unknown_warnings(names, KNOWN) == []


def test_far_name_has_no_guess() -> None:
    """A name close to nothing is reported without a guess."""
    assert unknown_warnings(["RELAYBUS_ZZZZZZZZ"], KNOWN) == [
        "relaybus: unknown variable RELAYBUS_ZZZZZZZZ is ignored"
    ]


def test_command_warns_at_start(tmp_path: Path) -> None:
    """A command run with a mistyped variable in its environment and in .env says so once each."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYBUS_")}
    env.update(RELAYBUS_GATEWAY_PROT="9000", RELAYBUS_CLAUDE_DIR=str(tmp_path))
    (tmp_path / ".env").write_text("RELAYBUS_COMAND_TIMEOUT_SECONDS=3\nRELAYBUS_GATEWAY_PROT=1\n")
    out = subprocess.run(
        [sys.executable, "-m", "relaybus.cli", "collector"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=tmp_path,
    )
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2
    assert lines[:2] == [
        "relaybus: unknown variable RELAYBUS_COMAND_TIMEOUT_SECONDS is ignored "
        "(did you mean RELAYBUS_COMMAND_TIMEOUT_SECONDS?)",
        "relaybus: unknown variable RELAYBUS_GATEWAY_PROT is ignored "
        "(did you mean RELAYBUS_GATEWAY_PORT?)",
    ], lines
    assert len(lines) == 3 and "RELAYBUS_REDIS_URL is not set" in lines[2]
