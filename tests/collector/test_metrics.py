"""The collector's per-batch counters (``Tally``) as a scrape sees them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from relaybus.collector.metrics import CollectorMetrics


def test_tallies_scrape_as_counters() -> None:
    """Lines and bytes read and lines published are counters with their totals, beside the
    labelled ``prometheus_client`` ones, and only their own adds change them."""
    registry = CollectorRegistry()
    m = CollectorMetrics(registry)
    m.lines_read.inc(3)
    m.lines_read.inc()
    m.bytes_read.inc(2_046)
    m.lines_published.inc(0)
    m.dropped("progress", 2)
    page = generate_latest(registry).decode()
    assert "# TYPE relaybus_collector_lines_read_total counter" in page
    assert "relaybus_collector_lines_read_total 4.0" in page.splitlines()
    assert "relaybus_collector_bytes_read_total 2046.0" in page.splitlines()
    assert "relaybus_collector_lines_published_total 0.0" in page.splitlines()
    assert registry.get_sample_value("relaybus_collector_lines_read_total") == 4
    assert (
        registry.get_sample_value("relaybus_collector_lines_dropped_total", {"reason": "progress"})
        == 2
    )
