"""Runs the web client's node unit tests (tests/web/js/: pure helpers and the controller)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_label_diff_and_store_helpers_pass_under_node() -> None:
    """Labels, edit deltas, diff rows, titles, store dedupe/cap and the legacy fallback pass."""
    node = shutil.which("node")
    assert node is not None, "node (20+) is required for the web client's unit tests"
    proc = subprocess.run(
        [node, "--test", "--test-reporter=tap", str(ROOT / "tests" / "web" / "js")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "# fail 0" in proc.stdout
    assert "# pass 0" not in proc.stdout, "no test files were found"
