"""shared.aio.Outage: one WARNING per outage, DEBUG per retry, one INFO with its length."""

from __future__ import annotations

import logging

import pytest

from relaybus.shared.aio import Backoff, Outage


def test_two_outages_are_two_warnings_and_two_ends_with_their_lengths(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    outage = Outage(
        logging.getLogger("test.outage"), "thing", Backoff(1.0, 4.0), clock=lambda: now[0]
    )
    caplog.set_level(logging.DEBUG, logger="test.outage")
    outage.ok()  # no outage yet: nothing to say
    delays = [outage.failed(ConnectionError("refused")) for _ in range(3)]
    assert 2.0 <= delays[2] <= 4.0  # the backoff grew
    now[0] = 112.5
    outage.ok()
    assert outage.backoff.n == 0
    outage.failed(TimeoutError("slow"))
    now[0] = 113.0
    outage.ok()
    outage.ok()
    assert [(r.levelname, r.getMessage().split(";")[0]) for r in caplog.records] == [
        ("WARNING", "thing unavailable (ConnectionError: refused)"),
        ("DEBUG", "thing still unavailable (ConnectionError: refused)"),
        ("DEBUG", "thing still unavailable (ConnectionError: refused)"),
        ("INFO", "thing available again after 12.5 s (attempts failed: 3)"),
        ("WARNING", "thing unavailable (TimeoutError: slow)"),
        ("INFO", "thing available again after 0.5 s (attempts failed: 1)"),
    ]
