"""Reading the deployment files (compose, Dockerfile, .env.example, dashboard) in tests."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = ROOT / "docker-compose.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "relaybus.json"

#: ``${NAME}``, ``${NAME:-default}``, ``${NAME:?error}``; ``$$`` is compose's escaped dollar.
_VAR = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}")
#: Grafana's built-in variables and the values the tests give them.
GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "5m"}
_METRIC = re.compile(r"\b(relaybus_[a-z0-9_]+)\b")
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def compose_variables(text: str) -> set[str]:
    """Every variable a compose file interpolates."""
    return {m.group(1) for m in _VAR.finditer(text)}


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's interpolation: ``:-`` default, ``:?`` error when unset or empty."""

    def sub(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3) or ""
        value = env.get(name, "")
        if value:
            return value
        if op == ":?":
            raise KeyError(f"{name}: {arg}")
        return arg if op == ":-" else ""

    return _VAR.sub(sub, text).replace("$$", "$")


def env_example_names() -> set[str]:
    """Variables ``.env.example`` documents, set (``X=``) or commented out (``# X=``)."""
    names = set()
    for line in (ROOT / ".env.example").read_text().splitlines():
        m = re.match(r"^#?\s*([A-Z][A-Z0-9_]*)=", line)
        if m:
            names.add(m.group(1))
    return names


def dashboard_exprs() -> list[str]:
    """Every PromQL expression of the dashboard, Grafana variables replaced by durations."""
    dash = json.loads(DASHBOARD.read_text())
    exprs = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            expr = str(target["expr"])
            for var, value in GRAFANA_VARS.items():
                expr = expr.replace(var, value)
            exprs.append(expr)
    return exprs


def metric_families(expr: str) -> set[str]:
    """relaybus metric families an expression names (histogram series → their family)."""
    families = set()
    for name in _METRIC.findall(expr):
        for suffix in _HISTOGRAM_SUFFIXES:
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        families.add(name)
    return families


def documented_metrics() -> set[str]:
    """Metric families fixed in docs/architecture.md, with their package prefix."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc.split("## Metrics", 1)[1]
    names: set[str] = set()
    for para in section.split("\n\n"):
        prefix = "relaybus_collector_" if para.startswith("Collector") else "relaybus_gateway_"
        for name in re.findall(r"`([a-z0-9_]+)(?:\{[^}]*\})?`", para):
            if not name.startswith("relaybus"):
                names.add(prefix + name)
    return names
