"""What the docs promise a new user (issue 28): the Node version, HTTPS for push and
install, and no reference image said to be committed that is not."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_node_version_is_the_pinned_clis() -> None:
    """The README asks for Node 22 (the pinned Claude Code CLI's minimum), not 20."""
    readme = (ROOT / "README.md").read_text()
    assert "Node 22 or later" in readme
    assert "Node 20 or later" not in readme


def test_committed_images_named_in_docs_exist() -> None:
    """A PNG a doc calls committed is in the repository."""
    tracked = set(
        subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    )
    names = {Path(p).name for p in tracked}
    for doc in (ROOT / "docs").glob("*.md"):
        for sentence in re.split(r"(?<=[.;])\s", doc.read_text()):
            if "committed" in sentence and "not committed" not in sentence:
                for png in re.findall(r"[\w.-]+\.png", sentence):
                    assert png in names, f"{doc.name}: {png} is said to be committed"


def test_web_client_doc_says_push_and_install_need_https() -> None:
    """docs/web-client.md says push and installing need an https:// address."""
    text = (ROOT / "docs" / "web-client.md").read_text()
    assert "Push and installing need HTTPS" in text
