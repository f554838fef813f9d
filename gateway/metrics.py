"""Gateway metrics (names fixed in docs/architecture.md), registered on an injected registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from relaybus.shared.metrics import MetricSet

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
        f = MetricSet(registry, "relaybus_gateway_")
        self.connections = f.gauge("connections", "Open WebSocket connections")
        self.messages_sent = f.counter("messages_sent_total", "Frames written, by type", ["type"])
        self.bytes_sent = f.counter("bytes_sent_total", "Frame bytes written")
        self.replays = f.counter("replays_total", "History replays served")
        self.replayed_events = f.counter("replayed_events_total", "Events sent from history")
        self.gaps = f.counter("gaps_total", "gap_detected frames sent, by reason", ["reason"])
        self.slow_consumers = f.counter(
            "slow_consumer_disconnects_total",
            "Connections closed because their send queue overflowed",
        )
        self.auth_failures = f.counter(
            "auth_failures_total", "Connections refused for a missing or bad token"
        )
        self.bad_frames = f.counter(
            "bad_frames_total", "Client frames refused, by error code", ["code"]
        )
        self.reader_lag = f.gauge("log_reader_lag_events", "Head seq minus the last seq dispatched")
        self.e2e_latency = f.histogram(
            "e2e_latency_seconds",
            "Collector stamp to the end of the event's fan-out in this gateway (one sample "
            "per event; frames queued behind a slow client are not sampled)",
            _LATENCY_BUCKETS,
        )
        self.commands = f.counter(
            "commands_total", "Commands by type and outcome", ["type", "outcome"]
        )
        self.command_round_trip = f.histogram(
            "command_round_trip_seconds", "Command sent to reply received", _LATENCY_BUCKETS
        )
        self.task_crashes = f.counter(
            "task_crashes_total", "Supervised task crashes, by task", ["task"]
        )
        self._sent: dict[str, Counter] = {}

    def sent(self, kind: str) -> Counter:
        """The ``messages_sent_total`` child for ``kind`` (cached: called per frame)."""
        child = self._sent.get(kind)
        if child is None:
            child = self._sent[kind] = self.messages_sent.labels(kind)
        return child
