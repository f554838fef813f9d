"""`--help` of up and doctor: one usage line, the settings in named groups."""

from __future__ import annotations

import subprocess
import sys

import pytest

from relaybus.helpgroups import GROUPS, OTHER, group_of
from relaybus.shared.settings import Settings


def test_every_setting_has_one_group() -> None:
    """Each setting is in a help group (none falls into "other settings"), none in two, and
    every name a group lists is a setting."""
    grouped = [field for fields in GROUPS.values() for field in fields]
    assert len(grouped) == len(set(grouped))
    assert set(grouped) <= set(Settings.model_fields)
    assert [f for f in Settings.model_fields if group_of(f) == OTHER] == []


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
