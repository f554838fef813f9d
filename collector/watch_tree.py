"""Which directories the collector watches: the real (never symlinked) ones of its layout.

Only the directories of :data:`LAYOUT` are watched, one by one and never through a
symlink: a recursive watch follows symlinked directories, so a ``projects/x -> /`` would
have it walk and watch the whole file system (the user's inotify watches, CPU and events)
though nothing there is ever read.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The directories watched, relative to the Claude dir (``*``: any name): where transcripts
#: and live-process files are, and the ones that lead there. Nothing deeper, nothing else.
LAYOUT: tuple[tuple[str, ...], ...] = (
    ("projects",),
    ("projects", "*"),
    ("projects", "*", "*"),
    ("projects", "*", "*", "subagents"),
    ("sessions",),
)
#: How often the watch compares the directory tree with what it watches, without events.
TREE_CHECK_MS = 5000
#: Times the watch is set up again while the tree keeps changing under it before it settles
#: for what it has (the next tree check catches up).
SETTLE_TRIES = 5


def _in_layout(rel: tuple[str, ...]) -> bool:
    return any(
        len(pat) == len(rel) and all(p in ("*", r) for p, r in zip(pat, rel, strict=True))
        for pat in LAYOUT
    )


def watched_dirs(claude_dir: Path, roots: list[Path]) -> dict[Path, int]:
    """The directories to watch, each with its inode: every root, and below them the real
    (never symlinked) directories of :data:`LAYOUT`. A symlinked root is watched, not
    entered: what is behind it is outside the Claude dir and never read."""
    claude = Path(os.path.abspath(claude_dir))
    found: dict[Path, int] = {}

    def visit(d: Path, rel: tuple[str, ...], inode: int) -> None:
        try:
            with os.scandir(d) as it:
                subs = [
                    (Path(e.path), (*rel, e.name), e.inode())
                    for e in it
                    # d_type first: the files (most entries) cost no pattern match
                    if e.is_dir(follow_symlinks=False) and _in_layout((*rel, e.name))
                ]
        except OSError:
            return  # gone already, or unreadable: nothing to watch there
        found[d] = inode
        for sub in subs:
            visit(*sub)

    for root in roots:
        root = Path(os.path.abspath(root))
        try:
            inode = root.stat().st_ino
        except OSError:
            continue
        if root == claude:
            visit(root, (), inode)
        elif root.is_symlink() or not root.is_relative_to(claude):
            found[root] = inode
        else:
            visit(root, root.relative_to(claude).parts, inode)
    return found
