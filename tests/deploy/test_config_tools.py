"""deploy/ configs pass the real tools: promtool for Prometheus and PromQL, nginx -t."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from tests.support.deploy_files import (
    DASHBOARD,
    DEPLOY,
    dashboard_exprs,
    documented_metrics,
    metric_families,
)
from tests.support.deploy_procs import NGINX, promtool, render_nginx_conf, render_prometheus_config
from tests.support.servers import free_port


def _rules_file(tmp_path: Path, exprs: list[str]) -> Path:
    groups = [
        {
            "name": "dashboard",
            "rules": [
                {"record": f"relaybus:dashboard:{i}", "expr": e} for i, e in enumerate(exprs)
            ],
        }
    ]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    return path


def test_promtool_accepts_the_prometheus_config() -> None:
    """`promtool check config deploy/prometheus.yml` succeeds."""
    out = promtool("check", "config", str(DEPLOY / "prometheus.yml"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr


def test_promtool_accepts_the_loopback_adaptation(tmp_path: Path) -> None:
    """The static-target copy the end-to-end tests use, with the example list of remote
    collectors, is a valid config too."""
    targets = {"gateway": ["127.0.0.1:1", "127.0.0.1:2"], "collector": ["127.0.0.1:3"]}
    config = render_prometheus_config(tmp_path, targets)
    example = DEPLOY / "prometheus-targets" / "collectors.yml.example"
    (tmp_path / "targets" / "collectors.yml").write_text(example.read_text())
    out = promtool("check", "config", str(config))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "WARNING" not in out.stdout + out.stderr  # the example target file is valid too
    jobs = yaml.safe_load(config.read_text())["scrape_configs"]
    assert jobs[0]["static_configs"] == [{"targets": targets["gateway"]}]


def test_every_dashboard_expression_parses(tmp_path: Path) -> None:
    """Each PromQL expression of the Grafana dashboard parses (promtool check rules)."""
    exprs = dashboard_exprs()
    assert len(exprs) >= 12
    out = promtool("check", "rules", str(_rules_file(tmp_path, exprs)))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in out.stdout


def test_promtool_rejects_a_broken_expression(tmp_path: Path) -> None:
    """The parse check above can fail: an unbalanced expression is reported."""
    out = promtool("check", "rules", str(_rules_file(tmp_path, ["sum(rate(x[1m])"])))
    assert out.returncode != 0


def test_dashboard_names_only_documented_metrics() -> None:
    """Every metric the dashboard queries is a family fixed in docs/architecture.md."""
    used = set().union(*(metric_families(e) for e in dashboard_exprs()))
    assert used - documented_metrics() == set()


def test_dashboard_covers_the_operational_questions() -> None:
    """The dashboard shows connections, events/s, e2e quantiles, replays, gaps, slow
    consumers, collector lag and command outcomes."""
    used = set().union(*(metric_families(e) for e in dashboard_exprs()))
    assert {
        "relaybus_gateway_connections",
        "relaybus_collector_lines_published_total",
        "relaybus_gateway_e2e_latency_seconds",
        "relaybus_gateway_replays_total",
        "relaybus_gateway_gaps_total",
        "relaybus_gateway_slow_consumer_disconnects_total",
        "relaybus_collector_file_lag_bytes",
        "relaybus_gateway_commands_total",
    } <= used
    quantiles = [e for e in dashboard_exprs() if "e2e_latency_seconds_bucket" in e]
    assert {q.split(",")[0] for q in quantiles} == {
        "histogram_quantile(0.5",
        "histogram_quantile(0.9",
        "histogram_quantile(0.99",
    }


def test_dashboard_panels_are_well_formed() -> None:
    """Unique panel ids, unique refIds per panel, panels inside the 24-column grid without
    overlapping, every target on the provisioned datasource."""
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "relaybus"
    panels = dash["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        refs = [t["refId"] for t in panel["targets"]]
        assert len(set(refs)) == len(refs), panel["title"]
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        area = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                for y in range(pos["y"], pos["y"] + pos["h"])}  # fmt: skip
        assert not area & cells, f"{panel['title']} overlaps another panel"
        cells |= area


def test_nginx_accepts_the_config(tmp_path: Path) -> None:
    """`nginx -t` accepts deploy/nginx.conf (upstreams and listen adapted to loopback)."""
    conf = render_nginx_conf(tmp_path, free_port(), [free_port(), free_port()])
    out = subprocess.run(
        [NGINX, "-t", "-e", "stderr", "-p", str(tmp_path), "-c", str(conf),
         "-g", f"pid {tmp_path / 'nginx.pid'};"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "test is successful" in out.stderr
