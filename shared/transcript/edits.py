"""``toolUseResult`` -> ``EditResultInfo`` (``{added, removed, hunks[{oldStart, lines}]}``).

Counts cover every hunk line; the ``lines`` kept are bounded by ``max_chars`` in total
(``"truncated": true`` when some were left out), so a rewrite of a huge file stays small.
A ``Write`` that creates a file has an empty ``structuredPatch``: its content becomes one
synthetic ``+`` hunk so clients can say "Added N lines" without knowing the format.
"""

from __future__ import annotations

from typing import Any


def edit_info(result: dict[str, Any], max_chars: int) -> dict[str, Any] | None:
    """The edit summary of a tool result, or None when it carries no ``structuredPatch``."""
    patch = result.get("structuredPatch")
    if not isinstance(patch, list):
        return None
    if not patch and result.get("type") == "create":
        content = result.get("content")
        if isinstance(content, str):
            return _created(content, max_chars)
    added = removed = 0
    budget = max_chars
    truncated = False
    hunks: list[dict[str, Any]] = []
    for hunk in patch:
        if not isinstance(hunk, dict):
            continue
        lines = hunk.get("lines")
        if not isinstance(lines, list):
            continue
        kept: list[str] = []
        for line in lines:
            if not isinstance(line, str):
                continue
            if line.startswith("+"):
                added += 1
            elif line.startswith("-"):
                removed += 1
            if budget >= len(line):
                kept.append(line)
                budget -= len(line)
            else:
                truncated = True
                budget = 0
        if kept or not truncated:
            start = hunk.get("oldStart")
            hunks.append({"oldStart": start if isinstance(start, int) else None, "lines": kept})
    edit: dict[str, Any] = {"added": added, "removed": removed, "hunks": hunks}
    if truncated:
        edit["truncated"] = True
    return edit


def _created(content: str, max_chars: int) -> dict[str, Any]:
    """A new file: every line added, shown as one ``+`` hunk starting at line 0."""
    if not content:
        return {"added": 0, "removed": 0, "hunks": []}
    added = content.count("\n") + (0 if content.endswith("\n") else 1)
    head = content[:max_chars]
    lines = head.split("\n")
    if content.endswith("\n") and len(head) == len(content):
        lines.pop()
    truncated = len(head) < len(content)
    if truncated:
        lines.pop()  # the last kept line was cut mid-way
    edit: dict[str, Any] = {
        "added": added,
        "removed": 0,
        "hunks": [{"oldStart": 0, "lines": ["+" + line for line in lines]}],
    }
    if truncated:
        edit["truncated"] = True
    return edit
