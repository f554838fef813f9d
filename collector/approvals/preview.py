"""What a permission request is about: its tool call in the transcript, and the edit it makes.

The request comes from the hook and is not trusted: the transcript is read only inside the
claude dir (real paths, :func:`transcript_path`), the edit preview reads files only under
the session's own cwd (:func:`read_under`). Everything here blocks: run it off the loop.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from relaybus.collector.tailer import open_regular
from relaybus.shared.transcript import projection
from relaybus.shared.transcript.edits import edit_info

#: How much of a transcript's end is read to find a request's tool call.
TRANSCRIPT_TAIL_BYTES = 2 * 1024 * 1024
PREVIEW_MAX_CHARS = 16_384
#: Files larger than this are not read for line numbers or a Write's old content.
PREVIEW_FILE_MAX_BYTES = 2 * 1024 * 1024

_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")


def transcript_path(claude_dir: str | os.PathLike[str], transcript: Any) -> Path | None:
    """The request's transcript path, only when it really lies in the claude dir."""
    if isinstance(transcript, str) and os.path.isabs(transcript):
        real = os.path.realpath(transcript)
        root = os.path.realpath(claude_dir)
        if os.path.commonpath([real, root]) == root:
            return Path(real)
    return None


def describe(
    transcript: Path | None,
    name: str,
    tool_input: dict[str, Any],
    taken: set[str],
    cwd: str | None,
) -> tuple[str | None, dict[str, Any] | None]:
    """(toolUseId of the matching unanswered ``tool`` block, edit preview)."""
    tool_use_id = None
    if transcript is not None:
        tool_use_id = match_tool_use(transcript, name, tool_input, taken=taken)
    return tool_use_id, edit_preview(name, tool_input, root=cwd)


def match_tool_use(
    path: Path,
    name: str,
    tool_input: dict[str, Any],
    *,
    taken: set[str] | frozenset[str] = frozenset(),
) -> str | None:
    """The ``tool`` block in the transcript's tail this request is for, if one is clear.

    Open calls (no result yet, not ``taken`` by another held request) with this name; of
    those the latest whose input is the same once normalised (Claude Code shows the hook its
    input with defaults added, e.g. ``"replace_all": false``), else the only one.
    """
    try:
        with open_regular(path) as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - TRANSCRIPT_TAIL_BYTES)
            f.seek(start)
            data = f.read()
    except OSError:
        return None
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # the first one is cut
    calls: list[tuple[str, Any]] = []
    answered: set[str] = set()
    for raw in lines:
        if not raw.strip():
            continue
        event = projection.project_line(raw, text_max_chars=len(raw) + 1).event
        for block in (event or {}).get("blocks", []):
            if block.get("kind") == "tool" and block.get("name") == name:
                calls.append((str(block.get("toolUseId")), block.get("input")))
            elif block.get("kind") == "tool_result":
                answered.add(str(block.get("toolUseId")))
    open_calls = [(t, i) for t, i in calls if t not in answered and t not in taken]
    same = [t for t, i in open_calls if isinstance(i, dict) and same_input(tool_input, i)]
    if same:
        return same[-1]
    return open_calls[0][0] if len(open_calls) == 1 else None


def call_after(
    path: Path, offset: int, name: str, tool_input: dict[str, Any], taken: set[str]
) -> tuple[str, bool] | None:
    """A ``tool`` block for this request written after ``offset`` (toolUseId, has a result).

    The latest call with the same (normalised) input, else the only one with this name.
    """
    try:
        with open_regular(path) as f:
            f.seek(offset)
            data = f.read(TRANSCRIPT_TAIL_BYTES)
    except OSError:
        return None
    calls: list[tuple[str, Any]] = []
    answered: set[str] = set()
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        event = projection.project_line(raw, text_max_chars=len(raw) + 1).event
        for block in (event or {}).get("blocks", []):
            if block.get("kind") == "tool" and block.get("name") == name:
                if str(block.get("toolUseId")) not in taken:
                    calls.append((str(block.get("toolUseId")), block.get("input")))
            elif block.get("kind") == "tool_result":
                answered.add(str(block.get("toolUseId")))
    same = [t for t, i in calls if isinstance(i, dict) and same_input(tool_input, i)]
    found = same[-1] if same else (calls[0][0] if len(calls) == 1 else None)
    return None if found is None else (found, found in answered)


def call_input(path: Path, tool_use_id: str) -> dict[str, Any] | None:
    """The input of the ``tool`` block ``tool_use_id`` in the transcript's tail, as the model
    wrote it (the hook may see less: ExitPlanMode's plan is only here)."""
    try:
        with open_regular(path) as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - TRANSCRIPT_TAIL_BYTES))
            data = f.read()
    except OSError:
        return None
    needle = tool_use_id.encode()
    for raw in reversed(data.split(b"\n")):
        if needle not in raw:
            continue
        event = projection.project_line(raw, text_max_chars=len(raw) + 1).event
        for block in (event or {}).get("blocks", []):
            if block.get("kind") == "tool" and block.get("toolUseId") == tool_use_id:
                found = block.get("input")
                return found if isinstance(found, dict) else None
    return None


def file_size(path: Path) -> int:
    """The file's size now (0 when unreadable)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def same_input(hook: dict[str, Any], call: dict[str, Any]) -> bool:
    """Equal, counting a key present on one side only as equal when its value is empty/false."""
    for k in hook.keys() | call.keys():
        if k in hook and k in call:
            if hook[k] != call[k]:
                return False
        elif (hook.get(k) if k in hook else call.get(k)) not in (None, False, "", [], {}):
            return False
    return True


# --- the edit preview -------------------------------------------------------------------


def edit_preview(
    tool_name: str,
    tool_input: Mapping[str, Any],
    *,
    root: str | None = None,
    max_chars: int = PREVIEW_MAX_CHARS,
) -> dict[str, Any] | None:
    """``edit{added, removed, hunks}`` of an edit Claude asks to make, before it is made.

    Works from ``old_string``/``new_string`` (``edits[]`` for several) or ``content``; the
    file gives real line numbers and a ``Write``'s old content when :func:`read_under`
    allows it under ``root`` (the session's cwd; ``None``: no file is read). ``None`` for
    tools that change no file text.
    """
    path = tool_input.get("file_path")
    current = read_under(root, path) if isinstance(path, str) and root else None
    pairs: list[tuple[str, str]] = []
    edits = tool_input.get("edits")
    if isinstance(edits, list):
        pairs = [
            (e["old_string"], e["new_string"])
            for e in edits
            if isinstance(e, dict)
            and isinstance(e.get("old_string"), str)
            and isinstance(e.get("new_string"), str)
        ]
    elif isinstance(tool_input.get("old_string"), str) and isinstance(
        tool_input.get("new_string"), str
    ):
        pairs = [(tool_input["old_string"], tool_input["new_string"])]
    content = tool_input.get("content")
    if not pairs and isinstance(content, str):
        if current is None:
            return edit_info(
                {"structuredPatch": [], "type": "create", "content": content}, max_chars
            )
        return edit_info({"structuredPatch": _hunks(current, content, 0)}, max_chars)
    if not pairs:
        return None
    hunks: list[dict[str, Any]] = []
    for old, new in pairs:
        at = current.find(old) if current is not None and old else -1
        offset = current.count("\n", 0, at) if current is not None and at >= 0 else 0
        hunks += _hunks(old, new, offset)
    return edit_info({"structuredPatch": hunks}, max_chars)


def _hunks(old: str, new: str, line_offset: int) -> list[dict[str, Any]]:
    """Unified-diff hunks (3 lines of context), ``oldStart`` shifted by ``line_offset``."""
    out: list[dict[str, Any]] = []
    diff = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=3)
    for line in diff:
        m = _HUNK.match(line)
        if m:
            start = int(m.group(1))
            out.append({"oldStart": max(start, 1) + line_offset, "lines": []})
        elif out and line[:1] in ("+", "-", " "):
            out[-1]["lines"].append(line)
    return out


#: Never read for a preview, whatever the cwd: the kernel's and devices' views of processes.
_NEVER_READ = ("/proc", "/sys", "/dev")
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def read_under(root: str, path: str) -> str | None:
    """The UTF-8 text of ``path`` if it is a regular file of at most
    :data:`PREVIEW_FILE_MAX_BYTES` whose real path is under ``root``'s real path and not
    under ``/proc``, ``/sys`` or ``/dev``; ``None`` otherwise (symlinks out of ``root``,
    FIFOs and devices included). The path comes from an untrusted request.
    """
    if not (os.path.isabs(root) and os.path.isabs(path)):
        return None
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if os.path.commonpath([real, real_root]) != real_root:
        return None
    if any(real == p or real.startswith(p + "/") for p in _NEVER_READ):
        return None
    try:
        fd = os.open(real, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > PREVIEW_FILE_MAX_BYTES:
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(PREVIEW_FILE_MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > PREVIEW_FILE_MAX_BYTES:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
