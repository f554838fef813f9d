"""The real Claude Code CLI against a scripted fake API, in a loopback-only network namespace.

Tests marked ``realcli`` are skipped, with one line saying why, where the CLI is not
installed (``scripts/check`` installs it) or network namespaces are unavailable. See
tests/support/netns.py and docs/claude-code-notes.md.
"""

from __future__ import annotations

import pytest

from tests.support.netns import unavailable


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "realcli: runs the real Claude Code CLI in a network namespace"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    needing = [item for item in items if item.get_closest_marker("realcli") is not None]
    reason = unavailable() if needing else None
    if reason is None:
        return
    marker = pytest.mark.skipif(True, reason=reason)
    for item in needing:
        item.add_marker(marker)
