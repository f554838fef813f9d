"""Fixtures for the command tests: the stand-in ``claude`` and a work directory."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import fake_claude


@pytest.fixture
def claude_bin(tmp_path: Path, claude_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in CLI; its transcripts go to ``claude_dir`` and argv to ``fake-claude.log``."""
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(claude_dir))
    monkeypatch.setenv("FAKE_CLAUDE_LOG", str(tmp_path / "fake-claude.log"))
    return fake_claude.install(tmp_path / "bin")


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "work dir.x"
    d.mkdir()
    yield d
    assert os.path.isdir(d)
