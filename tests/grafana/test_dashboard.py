"""The shipped dashboard and provisioning files: structure, variables, metric names."""

from __future__ import annotations

import re
import sqlite3

import yaml
from grafana_files import GRAFANA, alert_rules, dashboard, metric_names, panel_queries, panels
from prometheus_client.metrics_core import Metric

from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.job import IssuesJob
from otel_eval.telemetry.metrics import Metrics


def _families() -> list[Metric]:
    """Every family on the admin /metrics: Metrics, and the issues job on the same registry."""
    registry = Metrics().registry
    job = IssuesJob(IssuesConfig(), sqlite3.connect(":memory:"), lambda since_ns: [], registry)
    families = list(registry.collect())
    job.close()
    return families


def _exposed_names() -> set[str]:
    """Every sample name the admin /metrics can expose (counters' _total, histogram parts)."""
    names = set()
    for family in _families():
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names |= {family.name + s for s in ("_bucket", "_sum", "_count")}
        elif family.type == "info":
            names.add(family.name + "_info")
        else:
            names.add(family.name)
    return names


def test_every_query_uses_declared_metrics() -> None:
    exposed = _exposed_names()
    exprs = [e for _, e in panel_queries()] + [r["expr"] for r in alert_rules()]
    used = set().union(*(metric_names(e) for e in exprs))
    assert used and used <= exposed, sorted(used - exposed)
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    for v in variables.values():
        if v["type"] == "query":
            assert metric_names(v["query"]["query"]) <= exposed


def test_every_metric_has_a_panel() -> None:
    used = set().union(*(metric_names(e) for _, e in panel_queries()))
    families = [f.name for f in _families()]
    missing = [f for f in families if not any(u.startswith(f) for u in used)]
    assert not missing


def test_variables_and_panels() -> None:
    d = dashboard()
    assert d["uid"] == "otel-eval"
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert set(variables) == {"datasource", "service", "agent", "node", "trace_datasource",
                              "otel_eval_url"}
    assert variables["otel_eval_url"]["type"] == "textbox"
    assert variables["datasource"]["query"] == "prometheus"
    assert set(variables["trace_datasource"]["query"].split(",")) == {"otel-eval-tempo",
                                                                      "otel-eval-jaeger"}
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    titles = {p["title"] for p in panels()}
    for wanted in ("Pass rate", "Loop rate", "Non-termination rate", "Budget overruns by budget",
                   "Tool errors by kind", "Tool errors by tool (top 10)", "Spans /s",
                   "Span drops by reason", "Open traces and pending spans", "Export latency",
                   "Tokens per trace", "Cost per trace", "Duration per trace",
                   "Recurring issues"):
        assert wanted in titles
    for p in panels():
        assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]
        exprs = " ".join(t["expr"] for t in p["targets"])
        if "traces_completed" in exprs or "trace_" in exprs:
            assert "$service" in exprs or "$agent" in exprs, p["title"]


def test_distribution_panels_carry_exemplar_links() -> None:
    for p in panels():
        if any("_bucket{service" in t["expr"] for t in p["targets"]):
            assert all(t.get("exemplar") for t in p["targets"]), p["title"]
            urls = [link["url"] for link in p["fieldConfig"]["defaults"]["links"]]
            assert any("${trace_datasource}" in u and "trace_id" in u for u in urls)
            assert "${otel_eval_url}/ui/runs/${__data.fields.trace_id}" in urls, p["title"]


def test_provisioning_files() -> None:
    prov = yaml.safe_load((GRAFANA / "provisioning/dashboards/otel-eval.yaml").read_text())
    (provider,) = prov["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]
    sources = {}
    for f in (GRAFANA / "provisioning/datasources").glob("*.yaml"):
        for ds in yaml.safe_load(f.read_text())["datasources"]:
            sources[ds["uid"]] = ds
    assert {s["type"] for s in sources.values()} == {"prometheus", "tempo", "jaeger"}
    prom = sources["otel-eval-prometheus"]
    dests = prom["jsonData"]["exemplarTraceIdDestinations"]
    internal = [d for d in dests if "datasourceUid" in d]
    assert {d["datasourceUid"] for d in internal} == {"otel-eval-tempo", "otel-eval-jaeger"}
    assert all(d["name"] == "trace_id" and d["datasourceUid"] in sources for d in internal)
    [web] = [d for d in dests if "url" in d]  # the run in otel-eval's web view
    assert web["name"] == "trace_id" and web["url"].endswith("/ui/runs/$${__value.raw}")


def test_prometheus_scrape_config_targets_admin_default() -> None:
    from otel_eval.app.config import Config

    cfg = yaml.safe_load((GRAFANA / "prometheus.yml").read_text())
    (job,) = cfg["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == [Config().admin.endpoint]
    assert cfg["rule_files"] == ["alerts/otel-eval-rules.yaml"]


def test_alert_rules_document_threshold_and_for() -> None:
    text = (GRAFANA / "alerts/otel-eval-rules.yaml").read_text()
    for rule in alert_rules():
        assert re.fullmatch(r"\d+m", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["alert"] in text.split("groups:")[0]  # listed in the header table
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_every_share_reads_zero_when_its_numerator_never_happened() -> None:
    """A share of two rates is ``(num or den * 0) / den``: with only ``num / den`` an agent
    whose numerator series does not exist yet reads "No data", like a missing agent."""
    exprs = [(n, e) for n, e in panel_queries()] + [(r["alert"], r["expr"])
                                                    for r in alert_rules()]
    shares = [(n, e) for n, e in exprs if re.search(r"\)\s*/\s*sum", e) and "rate(" in e]
    assert len(shares) >= 12, [n for n, _ in shares]
    for name, expr in shares:
        assert re.search(r"\bor\b[^/]*\* 0|\bor 0 \*", expr), name


def test_per_service_panels_count_every_agent() -> None:
    titles = {p["title"]: p for p in panels()}
    for title in ("Pass rate by service", "Loop rate by service",
                  "Non-termination rate by service"):
        (target,) = titles[title]["targets"]
        assert "sum by (service)" in target["expr"] and "$agent" not in target["expr"], title


def test_alerts_link_to_the_runs_behind_them() -> None:
    """A firing trace-rate alert links to otel-eval's run list filtered to its service, agent
    and finding: one click to the runs, a second to the run."""
    rules = {r["alert"]: r for r in alert_rules() if "alert" in r}
    for name, rule in rules.items():
        if "traces_completed" not in rule["expr"]:
            continue
        url = rule["annotations"]["otel_eval_url"]
        assert url.startswith("http://localhost:8888/ui/?service={{ $labels.service | urlquery }}")
        assert ("&agent={{ $labels.agent | urlquery }}" in url) == ("Service" not in name)
        assert url.split("&detector=")[1] in ("loop", "non_termination", "budget"), name


def test_the_dashboard_shows_the_issue_annotations_the_issues_job_posts() -> None:
    """A tags query (Grafana's own annotations, any dashboard or none): every annotation the
    issues job posts with the default tags matches it, whatever issues.grafana.dashboard_uid."""
    from otel_eval.outputs.issues.config import GrafanaConfig
    from otel_eval.outputs.issues.grafana import annotation_body
    from otel_eval.outputs.issues.result import Issue, IssueEvent

    (query,) = [a for a in dashboard()["annotations"]["list"] if a["name"] == "otel-eval issues"]
    assert query["enable"] and query["datasource"]["type"] == "grafana"
    target = query["target"]
    assert target["type"] == "tags" and target["matchAny"] is False
    issue = Issue("iss_1", "node", "planner", "t", "d", 0.5, None, 3, 2, ("a" * 32,), (), 1.0,
                  True)
    for config in (GrafanaConfig(), GrafanaConfig(dashboard_uid="otel-eval", panel_id=3)):
        for event in (IssueEvent("new", issue, None), IssueEvent("share_jump", issue, 0.1)):
            assert set(target["tags"]) <= set(annotation_body(event, 2.0, config)["tags"])
