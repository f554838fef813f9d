"""The edit preview of a permission request: the tool-result ``edit`` shape, before the edit."""

from __future__ import annotations

import os
from pathlib import Path

from relaybus.collector.approvals.preview import PREVIEW_FILE_MAX_BYTES, edit_preview, read_under
from relaybus.shared.wire.approvals import live_watchers, watcher_value


def test_edit_with_file_has_real_line_numbers(tmp_path: Path) -> None:
    """old_string/new_string against the file: hunks start at the line the text is on."""
    f = tmp_path / "a.txt"
    f.write_text("one\ntwo\nthree\nfour\n")
    edit = edit_preview(
        "Edit",
        {"file_path": str(f), "old_string": "three", "new_string": "3\n3b"},
        root=str(tmp_path),
    )
    assert edit == {
        "added": 2,
        "removed": 1,
        "hunks": [{"oldStart": 3, "lines": ["-three", "+3", "+3b"]}],
    }


def test_edit_without_file_counts_from_the_snippet() -> None:
    """The file is not readable: the snippet alone gives counts and lines."""
    edit = edit_preview(
        "Edit", {"file_path": "/nonexistent/x", "old_string": "a\nb", "new_string": "a\nc"}
    )
    assert edit is not None
    assert (edit["added"], edit["removed"]) == (1, 1)
    assert edit["hunks"][0]["lines"] == [" a", "-b", "+c"]


def test_multi_edit_and_write(tmp_path: Path) -> None:
    """edits[] give one hunk per edit; Write of a new file is all added; of an existing one a diff."""
    multi = edit_preview(
        "MultiEdit",
        {
            "file_path": "/x",
            "edits": [
                {"old_string": "a", "new_string": "b"},
                {"old_string": "c", "new_string": ""},
            ],
        },
    )
    assert multi is not None and (multi["added"], multi["removed"], len(multi["hunks"])) == (
        1,
        2,
        2,
    )
    new = edit_preview(
        "Write", {"file_path": str(tmp_path / "new.py"), "content": "x\ny\n"}, root=str(tmp_path)
    )
    assert new == {"added": 2, "removed": 0, "hunks": [{"oldStart": 0, "lines": ["+x", "+y"]}]}
    old = tmp_path / "old.py"
    old.write_text("x\ny\n")
    changed = edit_preview(
        "Write", {"file_path": str(old), "content": "x\nz\n"}, root=str(tmp_path)
    )
    assert changed == {
        "added": 1,
        "removed": 1,
        "hunks": [{"oldStart": 1, "lines": [" x", "-y", "+z"]}],
    }


def test_large_edit_is_bounded_and_other_tools_have_none() -> None:
    """Lines beyond the budget are cut (truncated), counts stay whole; Bash has no preview."""
    big = "\n".join(f"line {i}" for i in range(5000))
    edit = edit_preview("Write", {"file_path": "/nope/big", "content": big}, max_chars=1000)
    assert edit is not None and edit["added"] == 5000 and edit.get("truncated") is True
    assert sum(len(x) for h in edit["hunks"] for x in h["lines"]) <= 1100
    assert edit_preview("Bash", {"command": "rm -rf /"}) is None


def test_watcher_counts_expire() -> None:
    """Watcher fields count only until their stamp passes (a dead gateway stops counting)."""
    fields = {
        b"gw1": watcher_value(2, 5000).encode(),
        b"gw2": watcher_value(1, 1000).encode(),
        b"gw3": b"garbage",
    }
    assert live_watchers(fields, 2000) == 2
    assert live_watchers(fields, 6000) == 0


def test_preview_reads_only_regular_files_under_the_cwd(tmp_path: Path) -> None:
    """/proc, files outside the cwd, symlinks out of it and FIFOs are never read for a preview."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    secret = tmp_path / "secret"
    secret.write_text("top secret\n")
    (cwd / "link").symlink_to(secret)
    os.mkfifo(cwd / "fifo")
    big = cwd / "big"
    big.write_bytes(b"x" * (PREVIEW_FILE_MAX_BYTES + 1))
    (cwd / "ok").write_text("fine\n")
    for path in [
        "/proc/self/environ",
        str(secret),
        str(cwd / "link"),
        str(cwd / "fifo"),
        str(big),
        str(cwd / "../secret"),
        "ok",
    ]:
        assert read_under(str(cwd), path) is None, path
    assert read_under("/", "/proc/self/environ") is None
    assert read_under(str(cwd), str(cwd / "ok")) == "fine\n"
    created = edit_preview(
        "Write", {"file_path": str(cwd / "link"), "content": "a\n"}, root=str(cwd)
    )
    assert created == {"added": 1, "removed": 0, "hunks": [{"oldStart": 0, "lines": ["+a"]}]}
