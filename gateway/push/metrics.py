"""Push metrics, registered on the gateway's injected registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from relaybus.shared.metrics import MetricSet

_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class PushMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        f = MetricSet(registry, "relaybus_gateway_push_")
        self.sent = f.counter(
            "sent_total", "Notifications a push service or Apprise accepted", ["channel"]
        )
        self.failed = f.counter(
            "failed_total", "Notifications given up after retries", ["channel", "reason"]
        )
        self.dropped = f.counter(
            "dropped_total",
            "Notifications not sent on purpose (duplicate, stale, gone, revoked)",
            ["channel", "reason"],
        )
        self.latency = f.histogram(
            "latency_seconds",
            "Collector stamp of the event to the push accepted",
            _BUCKETS,
            ["channel"],
        )
        self.decisions = f.counter(
            "decisions_total", "Approve/Deny from a notification, by outcome", ["outcome"]
        )
