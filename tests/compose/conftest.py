"""tests/compose: one compose project for the whole stage, on a real Docker engine.

It runs on its own (scripts/check's compose stage, `pytest -n 0 tests/compose`), never in the
parallel suite: the stack is shared by its tests, which run in file order.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support import compose_images
from tests.support.compose_stack import ComposeStack

#: redis, two gateways, nginx, collector (the monitoring profile is not started).
SERVICES = 5


@pytest.fixture(scope="session")
def stack() -> Iterator[ComposeStack]:
    """The project's docker-compose.yml built and up, every service healthy."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("tests/compose runs on its own: pytest -n 0 tests/compose (scripts/check)")
    why = compose_images.docker_ready()
    if why is not None:
        pytest.skip(f"no Docker engine for tests/compose: {why}")
    start = time.monotonic()
    with ThreadPoolExecutor(len(compose_images.STAND_INS)) as pool:  # mostly downloads
        list(pool.map(compose_images.build, compose_images.STAND_INS))
    images_s = time.monotonic() - start
    # Not under pytest's tmp root: that is root's alone (0700) when run as root, and the
    # stand-in `claude` runs as the Claude dir's owner, another user.
    workdir = Path(tempfile.mkdtemp(prefix="relaybus-compose-"))
    workdir.chmod(0o755)
    stack = ComposeStack(workdir)
    try:
        stack.compose("build", timeout_s=600)
        build_s = time.monotonic() - start - images_s
        stack.compose("up", "-d")
        stack.healthy_s = stack.wait_healthy(SERVICES)
        print(
            f"\ncompose stage: stand-in images {images_s:.0f} s, build {build_s:.0f} s, "
            f"healthy {stack.healthy_s:.0f} s after up"
        )
        yield stack
    finally:
        try:
            stack.compose("down", "-v", "--remove-orphans", timeout_s=120)
        except Exception as exc:  # teardown: say why, do not hide the test's own failure
            print(f"compose down failed: {exc}")
        shutil.rmtree(workdir, ignore_errors=True)
