"""``relaybus doctor``'s look at Claude's ``projects/`` directory: what a first run gets
wrong there without any error (an unreadable or empty directory, or ``RELAYBUS_CLAUDE_DIR``
set to ``projects/`` itself, which the collector would answer by creating
``projects/projects``)."""

from __future__ import annotations

import os
from pathlib import Path

#: How many entries of ``projects/`` are looked at for transcripts (bounded on a huge tree).
SCAN_ENTRIES = 200


def _has_transcripts(project_dirs: Path) -> bool:
    """Some ``<project>/*.jsonl`` under ``project_dirs``, looking at a bounded number."""
    try:
        with os.scandir(project_dirs) as entries:
            for n, entry in enumerate(entries):
                if n >= SCAN_ENTRIES:
                    return False
                if entry.is_dir(follow_symlinks=False) and any(Path(entry.path).glob("*.jsonl")):
                    return True
    except OSError:
        return False
    return False


def projects_dir_problem(root: Path) -> str | None:
    """What is wrong with ``root/projects`` (one line with the fix), or ``None``."""
    projects = root / "projects"
    if root.name == "projects" and not projects.exists() and _has_transcripts(root):
        return (
            f"RELAYBUS_CLAUDE_DIR {root} is Claude's projects/ directory itself (the collector "
            f"would create {projects}) — set RELAYBUS_CLAUDE_DIR={root.parent}"
        )
    if not projects.exists():
        return None  # made on the first run; "holds no transcripts" says the rest
    try:
        with os.scandir(projects) as entries:
            empty = next(entries, None) is None
    except OSError as exc:
        return (
            f"cannot read {projects} ({exc.strerror or exc}) — run as the user who runs "
            "Claude Code, or fix its permissions"
        )
    if empty:
        return (
            f"{root} holds no transcripts: {projects} is empty — start a Claude Code "
            "session, or check RELAYBUS_CLAUDE_DIR"
        )
    return None
