"""Fixtures for the push tests: the approval tests' collector machine and hooks, a push service."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.approvals.conftest import admin, hooks, machine, runtime_dir
from tests.support.push_service import PushServiceStandIn

__all__ = ["admin", "hooks", "machine", "runtime_dir"]


@pytest.fixture
def push_service() -> Iterator[PushServiceStandIn]:
    with PushServiceStandIn() as service:
        yield service
