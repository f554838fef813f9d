"""Collector metrics (names fixed in docs/architecture.md), on an injected registry."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger(__name__)
P = "relaybus_collector_"
#: Distinct ``reason`` labels of ``lines_dropped_total``; later new reasons count as ``other``.
MAX_DROP_REASONS = 64
OTHER_DROP_REASON = "other"


class CollectorMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.lines_read = Counter(f"{P}lines_read_total", "Complete lines read", registry=registry)
        self.lines_published = Counter(
            f"{P}lines_published_total", "Lines published as session events", registry=registry
        )
        self.lines_dropped = Counter(
            f"{P}lines_dropped_total",
            "Lines not published, by reason",
            ["reason"],
            registry=registry,
        )
        self._drop_reasons: set[str] = set()
        self.lines_malformed = Counter(
            f"{P}lines_malformed_total", "Lines that are not valid JSON/UTF-8", registry=registry
        )
        self.bytes_read = Counter(
            f"{P}bytes_read_total", "Transcript bytes read", registry=registry
        )
        self.batch_lines = Histogram(
            f"{P}append_batch_lines",
            "Lines per append batch",
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
            registry=registry,
        )
        self.append_latency = Histogram(
            f"{P}append_latency_seconds",
            "Duration of one atomic append",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1, 5),
            registry=registry,
        )
        self.file_lag = Gauge(
            f"{P}file_lag_bytes", "Bytes on disk not yet published, all files", registry=registry
        )
        self.redis_errors = Counter(
            f"{P}redis_errors_total", "Redis connection errors and timeouts", registry=registry
        )
        self.files_watched = Gauge(f"{P}files_watched", "Transcripts tracked", registry=registry)
        self.sessions_live = Gauge(
            f"{P}sessions_live", "Sessions started, not ended", registry=registry
        )
        self.commands = Counter(
            f"{P}commands_total", "Commands executed", ["type", "outcome"], registry=registry
        )
        self.file_errors = Counter(
            f"{P}file_errors_total",
            "Transcripts set aside after a failure of their own (until they change)",
            registry=registry,
        )
        self.approvals = Counter(
            f"{P}approvals_total",
            "Permission requests from the hook, by how they ended",
            ["outcome"],
            registry=registry,
        )
        self.task_crashes = Counter(
            f"{P}task_crashes_total",
            "Supervised task crashes, by task",
            ["task"],
            registry=registry,
        )

    def dropped(self, reason: str, n: int) -> None:
        """Count ``n`` lines not published for ``reason`` (a record type, or a rule's name).
        The label set is bounded; each reason is logged once, when first seen."""
        if reason not in self._drop_reasons:
            if len(self._drop_reasons) >= MAX_DROP_REASONS:
                reason = OTHER_DROP_REASON
            if reason not in self._drop_reasons:
                self._drop_reasons.add(reason)
                log.info(
                    "not publishing lines of kind %r (counted in %slines_dropped_total)", reason, P
                )
        self.lines_dropped.labels(reason).inc(n)


@contextmanager
def metrics_server(registry: CollectorRegistry, port: int, host: str = "0.0.0.0") -> Iterator[int]:
    """Serve ``/metrics`` on ``host:port`` (0 = off) for the duration of the block; yields the port."""
    if port == 0:
        yield 0
        return
    server, thread = start_http_server(port, addr=host, registry=registry)
    log.info("metrics on %s:%d/metrics", host, port)
    try:
        yield port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
