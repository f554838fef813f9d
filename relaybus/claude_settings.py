"""Merge relaybus's ``PermissionRequest`` hook into Claude Code's ``settings.json`` and back out.

Everything else in the file is preserved (keys, order, other hooks). A change is written
atomically (temporary file + rename, same mode) after a backup copy of the old file;
when nothing would change, nothing is written. Our entry is recognised by its command
containing :data:`MARKER`, so a re-install updates it in place instead of adding another.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOOK_EVENT = "PermissionRequest"
MARKER = "hook permission-request"
BACKUP_SUFFIX = ".relaybus-backup"


class SettingsFileError(Exception):
    """``settings.json`` exists but is not a JSON object: it is left untouched."""


@dataclass(frozen=True, slots=True)
class Outcome:
    changed: bool
    backup: Path | None = None


def hook_entry(command: str, timeout_s: int) -> dict[str, Any]:
    """Our hook as Claude Code's settings describe a command hook (``timeout`` in seconds)."""
    return {"type": "command", "command": command, "timeout": timeout_s}


def _ours(hook: Any) -> bool:
    return isinstance(hook, dict) and MARKER in str(hook.get("command", ""))


def with_hook(doc: dict[str, Any], command: str, timeout_s: int) -> dict[str, Any]:
    """A copy of ``doc`` holding exactly one relaybus hook with this command and timeout."""
    out = copy.deepcopy(doc)
    wanted = hook_entry(command, timeout_s)
    hooks = out.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise SettingsFileError("'hooks' is not an object")
    groups = hooks.setdefault(HOOK_EVENT, [])
    if not isinstance(groups, list):
        raise SettingsFileError(f"'hooks.{HOOK_EVENT}' is not a list")
    placed = False
    for group in groups:
        inner = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(inner, list):
            continue
        for i, hook in enumerate(list(inner)):
            if not _ours(hook):
                continue
            if placed:
                inner.remove(hook)
            else:
                inner[i] = {**hook, **wanted}
                placed = True
    if not placed:
        groups.append({"matcher": "*", "hooks": [wanted]})
    return out


def installed_commands(doc: dict[str, Any]) -> list[str]:
    """The commands of relaybus's hook entries in ``doc`` (normally one, or none)."""
    hooks = doc.get("hooks")
    groups = hooks.get(HOOK_EVENT) if isinstance(hooks, dict) else None
    found: list[str] = []
    for group in groups if isinstance(groups, list) else []:
        inner = group.get("hooks") if isinstance(group, dict) else None
        for hook in inner if isinstance(inner, list) else []:
            if _ours(hook):
                found.append(str(hook["command"]))
    return found


def without_hook(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` without relaybus's hook; containers only we emptied are dropped."""
    out = copy.deepcopy(doc)
    hooks = out.get("hooks")
    if not isinstance(hooks, dict):
        return out
    groups = hooks.get(HOOK_EVENT)
    if not isinstance(groups, list):
        return out
    kept_groups: list[Any] = []
    for group in groups:
        inner = group.get("hooks") if isinstance(group, dict) else None
        if isinstance(inner, list) and any(_ours(h) for h in inner):
            rest = [h for h in inner if not _ours(h)]
            if not rest:
                continue
            group["hooks"] = rest
        kept_groups.append(group)
    if len(kept_groups) == len(groups) and all(
        a is b for a, b in zip(kept_groups, groups, strict=True)
    ):
        return out
    if kept_groups:
        hooks[HOOK_EVENT] = kept_groups
    else:
        del hooks[HOOK_EVENT]
        if not hooks:
            del out["hooks"]
    return out


def load(path: Path) -> dict[str, Any]:
    """The settings document (``{}`` when the file does not exist)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    if not text.strip():
        return {}
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SettingsFileError(f"{path} is not valid JSON ({exc}); not touching it") from None
    if not isinstance(doc, dict):
        raise SettingsFileError(f"{path} does not hold a JSON object; not touching it")
    return doc


def _write(path: Path, doc: dict[str, Any]) -> Path | None:
    """Back up the current file (if any), then replace it atomically."""
    backup: Path | None = None
    mode = 0o600
    if path.exists():
        mode = path.stat().st_mode & 0o777
        stem = f"{path.name}{BACKUP_SUFFIX}-{time.strftime('%Y%m%d-%H%M%S')}"
        backup = path.with_name(stem)
        n = 1
        while backup.exists():
            backup = path.with_name(f"{stem}-{n}")
            n += 1
        shutil.copy2(path, backup)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2, ensure_ascii=False)
            f.write("\n")
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return backup


def install(path: Path, command: str, timeout_s: int) -> Outcome:
    """Merge the hook in; no write (and no backup) when it is already there as wanted."""
    doc = load(path)
    new = with_hook(doc, command, timeout_s)
    if new == doc and path.exists():
        return Outcome(False)
    return Outcome(True, _write(path, new))


def remove(path: Path) -> Outcome:
    """Take the hook out; no write when it is not there."""
    doc = load(path)
    new = without_hook(doc)
    if new == doc:
        return Outcome(False)
    return Outcome(True, _write(path, new))
