"""MetricSet: metrics declared under one prefix, with their labels and buckets."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from relaybus.shared.metrics import MetricSet


def test_metrics_are_registered_under_the_prefix_with_labels_and_buckets() -> None:
    """A counter, a gauge and a histogram land on the registry as ``prefix + name``."""
    registry = CollectorRegistry()
    m = MetricSet(registry, "relaybus_test_")
    m.counter("things_total", "Things", ["kind"]).labels("a").inc(2)
    m.gauge("level", "Level").set(7)
    m.histogram("size", "Sizes", (1, 10)).observe(5)
    sample = registry.get_sample_value
    assert sample("relaybus_test_things_total", {"kind": "a"}) == 2
    assert sample("relaybus_test_level") == 7
    assert sample("relaybus_test_size_bucket", {"le": "1.0"}) == 0
    assert sample("relaybus_test_size_bucket", {"le": "10.0"}) == 1
