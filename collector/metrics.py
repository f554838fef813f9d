"""Collector metrics (names fixed in docs/architecture.md), on an injected registry."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from relaybus.shared.metrics import MetricSet

log = logging.getLogger(__name__)
P = "relaybus_collector_"
#: Distinct ``reason`` labels of ``lines_dropped_total``; later new reasons count as ``other``.
MAX_DROP_REASONS = 64
OTHER_DROP_REASON = "other"


class Tally(Collector):
    """A counter without labels counted in a plain int: ``inc`` is an add (~0.1 µs) where
    a ``prometheus_client.Counter``'s takes a lock (~3 µs), and a few are counted per
    batch on the path from a wake-up to the append. The scrape (another thread) reads the
    int, which the GIL keeps whole."""

    def __init__(self, registry: CollectorRegistry, name: str, doc: str) -> None:
        self.name, self.doc = name.removesuffix("_total"), doc
        self.value = 0
        registry.register(self)

    def inc(self, n: int = 1) -> None:
        self.value += n

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self.doc, value=self.value)

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self.doc)


class CollectorMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        m = MetricSet(registry, P)
        self.lines_read = Tally(registry, P + "lines_read_total", "Complete lines read")
        self.lines_published = Tally(
            registry, P + "lines_published_total", "Lines published as session events"
        )
        self.lines_dropped = m.counter(
            "lines_dropped_total", "Lines not published, by reason", ["reason"]
        )
        self._drop_reasons: set[str] = set()
        self.lines_malformed = m.counter(
            "lines_malformed_total", "Lines that are not valid JSON/UTF-8"
        )
        self.bytes_read = Tally(registry, P + "bytes_read_total", "Transcript bytes read")
        self.batch_lines = m.histogram(
            "append_batch_lines",
            "Lines per append batch",
            (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
        )
        self.append_latency = m.histogram(
            "append_latency_seconds",
            "Duration of one atomic append",
            (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1, 5),
        )
        self.file_lag = m.gauge("file_lag_bytes", "Bytes on disk not yet published, all files")
        self.redis_errors = m.counter("redis_errors_total", "Redis connection errors and timeouts")
        self.files_watched = m.gauge("files_watched", "Transcripts tracked")
        self.sessions_live = m.gauge("sessions_live", "Sessions started, not ended")
        self.commands = m.counter("commands_total", "Commands executed", ["type", "outcome"])
        self.file_errors = m.counter(
            "file_errors_total",
            "Transcripts set aside after a failure of their own (until they change)",
        )
        self.approvals = m.counter(
            "approvals_total", "Permission requests from the hook, by how they ended", ["outcome"]
        )
        self.task_crashes = m.counter(
            "task_crashes_total", "Supervised task crashes, by task", ["task"]
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
