"""`--help` of up and doctor: one usage line, the settings in named groups."""

from __future__ import annotations

import subprocess
import sys

import pytest

from relaybus.helpgroups import GROUPS
from relaybus.shared.settings import Settings


def test_every_setting_has_one_group() -> None:
    """Each setting is in exactly one help group (none falls into "other settings")."""
    grouped = [field for fields in GROUPS.values() for field in fields]
    assert sorted(grouped) == sorted(Settings.model_fields)


@pytest.mark.parametrize("command", ["up", "doctor"])
def test_help_is_grouped_under_a_one_line_usage(command: str) -> None:
    """`relaybus up --help` starts with a one-line usage and shows every group, in order."""
    out = subprocess.run(
        [sys.executable, "-m", "relaybus.cli", command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = out.stdout.splitlines()
    assert lines[0] == f"usage: relaybus {command} [--SETTING VALUE ...]"
    assert lines[1] == ""
    headings = [line[:-1] for line in lines if line.endswith(":") and not line.startswith(" ")]
    assert headings == ["options", *GROUPS], headings
