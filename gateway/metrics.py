"""Gateway metrics (names fixed in docs/architecture.md), registered on an injected registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        p = "relaybus_gateway_"
        self.connections = Gauge(f"{p}connections", "Open WebSocket connections", registry=registry)
        self.messages_sent = Counter(
            f"{p}messages_sent_total", "Frames written, by type", ["type"], registry=registry
        )
        self.bytes_sent = Counter(f"{p}bytes_sent_total", "Frame bytes written", registry=registry)
        self.replays = Counter(f"{p}replays_total", "History replays served", registry=registry)
        self.replayed_events = Counter(
            f"{p}replayed_events_total", "Events sent from history", registry=registry
        )
        self.gaps = Counter(
            f"{p}gaps_total", "gap_detected frames sent, by reason", ["reason"], registry=registry
        )
        self.slow_consumers = Counter(
            f"{p}slow_consumer_disconnects_total",
            "Connections closed because their send queue overflowed",
            registry=registry,
        )
        self.auth_failures = Counter(
            f"{p}auth_failures_total",
            "Connections refused for a missing or bad token",
            registry=registry,
        )
        self.bad_frames = Counter(
            f"{p}bad_frames_total",
            "Client frames refused, by error code",
            ["code"],
            registry=registry,
        )
        self.reader_lag = Gauge(
            f"{p}log_reader_lag_events",
            "Head seq minus the last seq dispatched",
            registry=registry,
        )
        self.e2e_latency = Histogram(
            f"{p}e2e_latency_seconds",
            "Collector stamp to the end of the event's fan-out in this gateway (one sample "
            "per event; frames queued behind a slow client are not sampled)",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.commands = Counter(
            f"{p}commands_total",
            "Commands by type and outcome",
            ["type", "outcome"],
            registry=registry,
        )
        self.command_round_trip = Histogram(
            f"{p}command_round_trip_seconds",
            "Command sent to reply received",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.task_crashes = Counter(
            f"{p}task_crashes_total",
            "Supervised task crashes, by task",
            ["task"],
            registry=registry,
        )
        self._sent: dict[str, Counter] = {}

    def sent(self, kind: str) -> Counter:
        """The ``messages_sent_total`` child for ``kind`` (cached: called per frame)."""
        child = self._sent.get(kind)
        if child is None:
            child = self._sent[kind] = self.messages_sent.labels(kind)
        return child
