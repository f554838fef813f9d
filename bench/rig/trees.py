"""Another build's source tree for the A/B benches: a ``git archive`` export, and uvloop."""

from __future__ import annotations

import subprocess
import tarfile
from io import BytesIO
from pathlib import Path

from rig import REPO

#: A ``sitecustomize.py`` that runs a variant on uvloop (its folder first on ``PYTHONPATH``).
UVLOOP_SITE = "import uvloop\n\nuvloop.install()\n"


def export(ref: str, into: Path) -> str:
    """``git archive`` of ``ref`` unpacked in ``into``; its commit id."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", ref], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.strip()
    tar = subprocess.run(["git", "archive", commit], cwd=REPO, check=True, capture_output=True)
    with tarfile.open(fileobj=BytesIO(tar.stdout)) as t:
        t.extractall(into, filter="tar")
    return commit
