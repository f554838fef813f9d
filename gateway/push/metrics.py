"""Push metrics, registered on the gateway's injected registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class PushMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        p = "relaybus_gateway_push_"
        self.sent = Counter(
            f"{p}sent_total",
            "Notifications a push service or Apprise accepted",
            ["channel"],
            registry=registry,
        )
        self.failed = Counter(
            f"{p}failed_total",
            "Notifications given up after retries",
            ["channel", "reason"],
            registry=registry,
        )
        self.dropped = Counter(
            f"{p}dropped_total",
            "Notifications not sent on purpose (duplicate, stale, gone, revoked)",
            ["channel", "reason"],
            registry=registry,
        )
        self.latency = Histogram(
            f"{p}latency_seconds",
            "Collector stamp of the event to the push accepted",
            ["channel"],
            buckets=_BUCKETS,
            registry=registry,
        )
        self.decisions = Counter(
            f"{p}decisions_total",
            "Approve/Deny from a notification, by outcome",
            ["outcome"],
            registry=registry,
        )
