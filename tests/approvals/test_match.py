"""Which ``tool`` block a permission request belongs to (its toolUseId)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from relaybus.collector.approvals.preview import match_tool_use


def _call(tid: str, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "assistant",
        "sessionId": "s",
        "message": {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": tid, "name": name, "input": tool_input}],
        },
    }


def _result(tid: str) -> dict[str, Any]:
    return {
        "type": "user",
        "sessionId": "s",
        "message": {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": tid, "content": "ok"}],
        },
    }


def _file(tmp_path: Path, *records: dict[str, Any]) -> Path:
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_latest_unanswered_call_with_same_input(tmp_path: Path) -> None:
    """Answered calls are skipped; of the open ones with equal input the latest wins."""
    edit = {"file_path": "/a", "old_string": "x", "new_string": "y"}
    path = _file(
        tmp_path,
        _call("t1", "Edit", edit),
        _result("t1"),
        _call("t2", "Edit", edit),
        _call("t3", "Edit", {"file_path": "/b"}),
        _call("t4", "Edit", edit),
    )
    assert match_tool_use(path, "Edit", edit) == "t4"


def test_lone_open_call_of_that_tool_matches_despite_other_input(tmp_path: Path) -> None:
    """One open call of the tool, input shown differently: still matched; two open ones: none."""
    path = _file(tmp_path, _call("t1", "Bash", {"command": "ls", "description": "list"}))
    assert match_tool_use(path, "Bash", {"command": "ls"}) == "t1"
    path = _file(
        tmp_path, _call("t1", "Bash", {"command": "ls"}), _call("t2", "Bash", {"command": "pwd"})
    )
    assert match_tool_use(path, "Bash", {"command": "cat"}) is None
    assert match_tool_use(tmp_path / "missing.jsonl", "Bash", {}) is None


def test_normalised_hook_input_matches_the_right_parallel_edit(tmp_path: Path) -> None:
    """The hook sees "replace_all": false added; of two open edits the one with that input wins,
    and a call another held request took is not matched again."""
    first = {"file_path": "/a", "old_string": "x", "new_string": "y"}
    second = {"file_path": "/b", "old_string": "p", "new_string": "q"}
    path = _file(tmp_path, _call("t1", "Edit", first), _call("t2", "Edit", second))
    assert match_tool_use(path, "Edit", {**first, "replace_all": False}) == "t1"
    assert match_tool_use(path, "Edit", {**second, "replace_all": False}) == "t2"
    assert match_tool_use(path, "Edit", {**first, "replace_all": True}) is None
    assert match_tool_use(path, "Edit", {"file_path": "/c"}, taken={"t1"}) == "t2"
