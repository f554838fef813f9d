"""The gateway's replay, resume and gap tests, run against a real 3-master cluster.

The tests are the ones of tests/gateway/test_replay_resume.py; this directory's fixtures
(``gw``, ``pub``, ``rclient``, ``namespace``) put them on the cluster, with the namespace's slot
on another master than the seed node the gateway is given.
"""

from __future__ import annotations

from tests.gateway.test_replay_resume import (
    test_gap_on_epoch_mismatch,
    test_gap_on_trimmed_log,
    test_resume_replays_entitled_broadcasts,
    test_resume_with_live_traffic_is_exact,
    test_v1_resume_replays_session_events,
)

__all__ = [
    "test_gap_on_epoch_mismatch",
    "test_gap_on_trimmed_log",
    "test_resume_replays_entitled_broadcasts",
    "test_resume_with_live_traffic_is_exact",
    "test_v1_resume_replays_session_events",
]
