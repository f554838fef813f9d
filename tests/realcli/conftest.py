"""The real Claude Code CLI against a scripted fake API, in a loopback-only network namespace.

Skipped, with one line saying why, where the CLI is not installed (``scripts/check``
installs it) or network namespaces are unavailable. See tests/support/netns.py.
"""

from __future__ import annotations

import pytest

from tests.support.netns import unavailable


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = unavailable()
    if reason is None:
        return
    marker = pytest.mark.skipif(True, reason=reason)
    for item in items:
        if "tests/realcli/" in str(item.path).replace("\\", "/"):
            item.add_marker(marker)
