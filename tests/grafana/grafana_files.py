"""Paths of the shipped Grafana / Prometheus files and the PromQL they contain."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "otel-eval.json"
RULES = GRAFANA / "alerts" / "otel-eval-rules.yaml"
RULE_TESTS = sorted((GRAFANA / "alerts" / "tests").glob("*.yaml"))
PROMETHEUS_YML = GRAFANA / "prometheus.yml"
ALERTMANAGER_YML = GRAFANA / "alertmanager.yml"

# Grafana template variables -> values that select everything, for running panel queries.
SUBSTITUTIONS = {"$__rate_interval": "1m", "$__interval": "15s", "$service": ".*",
                 "$agent": ".*", "$node": ".*", "${datasource}": "prometheus",
                 "$window": "1h"}


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p.get("type") != "row"]


def panel_queries(window: bool = True) -> list[tuple[str, str]]:
    """(panel title / refId, PromQL with template variables substituted) for every target;
    ``window=False``: ``$window`` left as it is."""
    out = []
    for p in panels():
        for t in p["targets"]:
            expr = t["expr"]
            for var, value in SUBSTITUTIONS.items():
                if window or var != "$window":
                    expr = expr.replace(var, value)
            out.append((f"{p['title']} / {t['refId']}", expr))
    return out


# Alerts whose condition needs otel-eval gone or stuck (no scrape, no series, no successful
# issue clustering for an hour): no feed of a live target makes them hold, so the end-to-end
# tests that run every alert query on a live target leave them out; the promtool cases
# (grafana/alerts/tests) drive each.
OUTAGE_ALERTS = frozenset({"OtelEvalDown", "OtelEvalNotScraped", "OtelEvalIssuesJobStale"})


def alert_rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [r for g in data["groups"] for r in g["rules"]]


def metric_names(expr: str) -> set[str]:
    # otel_eval_url: the label of otel-eval's scrape target (grafana/prometheus.yml)
    return set(re.findall(r"\botel_eval_[a-z0-9_]+", expr)) - {"otel_eval_url"}
