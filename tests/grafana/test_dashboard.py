"""The shipped dashboard and provisioning files: structure, variables, metric names."""

from __future__ import annotations

import re
import sqlite3

import yaml
from grafana_files import (
    DASHBOARD,
    GRAFANA,
    alert_rules,
    dashboard,
    metric_names,
    panel_queries,
    panels,
)
from prometheus_client.metrics_core import Metric

from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.job import IssuesJob
from otel_eval.store.base import Window
from otel_eval.telemetry.metrics import Metrics


def _families() -> list[Metric]:
    """Every family on the admin /metrics: Metrics, and the issues job on the same registry."""
    registry = Metrics().registry
    job = IssuesJob(IssuesConfig(), sqlite3.connect(":memory:"),
                    lambda since_ns: Window([], False), registry)
    families = list(registry.collect())
    job.close()
    return families


def _exposed_names() -> set[str]:
    """Every sample name the admin /metrics can expose (counters' _total and _created, their
    creation time, which the alert rules read to see a series born again; histogram parts)."""
    names = set()
    for family in _families():
        if family.type == "counter":
            names |= {family.name + "_total", family.name + "_created"}
        elif family.type == "histogram":
            names |= {family.name + s for s in ("_bucket", "_sum", "_count", "_created")}
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
    assert set(variables) == {"datasource", "service", "agent", "node", "window",
                              "otel_eval_url"}
    # the URL comes from the scrape config (a label of otel-eval's target), not a literal
    url = variables["otel_eval_url"]
    assert url["type"] == "query" and "otel_eval_url)" in url["query"]["query"]
    assert variables["window"]["current"]["value"] == "1h"
    assert variables["datasource"]["query"] == "prometheus"
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
        # $service reaches every panel $agent does (a label, or a join on the agents of the
        # chosen services where a metric has no service label)
        if "$agent" in exprs:
            for t in p["targets"]:
                assert "$agent" not in t["expr"] or "$service" in t["expr"], (p["title"], t)


def test_share_panels_hold_at_low_traffic() -> None:
    """The shares are taken over $window (an hour by default), not $__rate_interval (about a
    minute): a minute after an agent's last run its share read NaN; the counts sit beside."""
    titles = {p["title"]: p for p in panels()}
    for p in panels():
        if p["title"].endswith(" rate") or " rate by " in p["title"]:
            for t in p["targets"]:
                assert "[$window]" in t["expr"] and "$__rate_interval" not in t["expr"], p
    counts = " ".join(t["expr"] for t in titles["Runs in the window"]["targets"])
    for metric in ("traces_completed", "traces_with_loop", "traces_non_terminated"):
        assert f"increase(otel_eval_{metric}_total" in counts


def _groupings(expr: str) -> list[set[str]]:
    return [{x.strip() for x in g.split(",")} for g in re.findall(r"\bby \(([^)]*)\)", expr)]


def test_links_only_where_they_resolve() -> None:
    """A series has labels, not a trace id: a panel link resolves only from labels every
    series of the panel carries. Trace and run links of exemplars come from the Prometheus
    datasource's exemplar destinations (test_provisioning_files)."""
    linked = 0
    for p in panels():
        for link in p.get("fieldConfig", {}).get("defaults", {}).get("links", []):
            assert "__data.fields.trace_id" not in link["url"], p["title"]
            labels = set(re.findall(r"__field\.labels\.(\w+)", link["url"]))
            for t in p["targets"]:
                groups = _groupings(t["expr"])
                assert groups and all(labels <= g for g in groups), (p["title"], t["expr"])
            linked += 1
    assert linked >= 6
    for p in panels():
        if any("_bucket{service" in t["expr"] for t in p["targets"]):
            assert all(t.get("exemplar") for t in p["targets"]), p["title"]


def test_provisioning_files() -> None:
    prov = yaml.safe_load((GRAFANA / "provisioning/dashboards/otel-eval.yaml").read_text())
    (provider,) = prov["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]
    sources = {}
    for f in (GRAFANA / "provisioning/datasources").glob("*.yaml"):
        for ds in yaml.safe_load(f.read_text())["datasources"]:
            sources[ds["uid"]] = ds
    # one trace datasource, Tempo or Jaeger as Grafana's environment says
    assert set(sources) == {"otel-eval-prometheus", "otel-eval-traces"}
    traces = sources["otel-eval-traces"]
    assert (traces["type"], traces["url"]) == ("${OTEL_EVAL_TRACE_BACKEND}",
                                               "${OTEL_EVAL_TRACE_URL}")
    prom = sources["otel-eval-prometheus"]
    dests = prom["jsonData"]["exemplarTraceIdDestinations"]
    [trace] = [d for d in dests if "datasourceUid" in d]
    assert trace == {"name": "trace_id", "datasourceUid": "otel-eval-traces"}
    [web] = [d for d in dests if "url" in d]  # the run in otel-eval's web view
    assert web["name"] == "trace_id" and web["url"] == "${OTEL_EVAL_URL}/ui/runs/$${__value.raw}"


def test_no_literal_otel_eval_url() -> None:
    """otel-eval's URL comes from configuration (Grafana's environment, Prometheus' external
    and target labels), never from a literal in the rules, the provisioning or the dashboard."""
    files = [DASHBOARD, GRAFANA / "alerts/otel-eval-rules.yaml",
             *(GRAFANA / "provisioning").rglob("*.yaml")]
    for f in files:
        text = "\n".join(ln for ln in f.read_text().splitlines()
                         if not ln.lstrip().startswith("#"))
        assert "localhost:8888" not in text, f


def test_prometheus_scrape_config_targets_admin_default() -> None:
    from otel_eval.app.config import Config

    cfg = yaml.safe_load((GRAFANA / "prometheus.yml").read_text())
    (job,) = cfg["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == [Config().admin.endpoint]
    # the dashboard's otel_eval_url variable reads this label of otel-eval's series
    assert job["static_configs"][0]["labels"] == {
        "otel_eval_url": cfg["global"]["external_labels"]["otel_eval_url"]}
    assert cfg["rule_files"] == ["alerts/otel-eval-rules.yaml"]
    # alerts go to the Alertmanager of grafana/alertmanager.yml (its default port), without
    # the external label the alerts' links start with
    (manager,) = cfg["alerting"]["alertmanagers"]
    assert manager["static_configs"] == [{"targets": ["localhost:9093"]}]
    assert cfg["global"]["external_labels"]["otel_eval_url"] == f"http://{Config().admin.endpoint}"
    assert cfg["alerting"]["alert_relabel_configs"] == [
        {"action": "labeldrop", "regex": "otel_eval_url"}]


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
    exprs = [(n, e) for n, e in panel_queries(window=False)] + [(r["alert"], r["expr"])
                                                                for r in alert_rules()]
    # the panels' shares over $window are of counts (a series born within it whole), the
    # alerts' of rates; the repeated-runs alerts need 3 runs first (no share stands alone)
    shares = [(n, e) for n, e in exprs if re.search(r"\)\s*/\s*sum", e)
              and ("rate(" in e or "[$window]" in e)]
    assert len(shares) >= 12, [n for n, _ in shares]
    for name, expr in shares:
        assert re.search(r"\bor\b[^/]*\* 0|\bor 0 \*", expr), name


def test_session_panels_and_alert() -> None:
    """Conversations: completed and failed, the failure share, the session loop and
    non-termination shares, turns per session (with exemplars), the open sessions, re-opened,
    evicted and turns dropped, and the session-loop alert: every session metric used."""
    titles = {p["title"]: p for p in panels()}
    by_pair = {"Sessions completed and failed /s": {"otel_eval_sessions_completed_total",
                                                    "otel_eval_sessions_failed_total"},
               "Session failure rate": {"otel_eval_sessions_failed_total",
                                        "otel_eval_sessions_completed_total"},
               "Session loop and non-termination rate": {"otel_eval_session_findings_total",
                                                         "otel_eval_sessions_completed_total"},
               "Turns per session": {"otel_eval_session_turns_bucket"},
               "Sessions re-opened /s": {"otel_eval_sessions_reopened_total"}}
    # labelled by reason or by nothing: no (service, agent) to select
    unpaired = {"Open sessions": {"otel_eval_sessions_open"},
                "Sessions evicted and turns dropped /s": {
                    "otel_eval_sessions_evicted_total", "otel_eval_session_turns_dropped_total"}}
    used: set[str] = set()
    for title, metrics in {**by_pair, **unpaired}.items():
        exprs = [t["expr"] for t in titles[title]["targets"]]
        # a count over the window takes a series born within it whole (its creation time)
        names = {n for e in exprs for n in metric_names(e) if not n.endswith("_created")}
        assert names == metrics, title
        used |= names
        paired = ['service=~"$service", agent=~"$agent"' in e for e in exprs]
        assert all(paired) if title in by_pair else not any(paired), title
    loop_share = " ".join(t["expr"] for t in titles["Session loop and non-termination rate"]
                          ["targets"])
    assert 'detector="loop"' in loop_share and 'detector="non_termination"' in loop_share
    rules = {r["alert"]: r for r in alert_rules()}
    rule = rules["OtelEvalSessionLoopsRepeated"]
    # the two counters, and their creation times (a series born again after a restart)
    assert metric_names(rule["expr"]) == {"otel_eval_session_findings_total",
                                          "otel_eval_sessions_completed_total",
                                          "otel_eval_session_findings_created",
                                          "otel_eval_sessions_completed_created"}
    assert ">= 3" in rule["expr"] and "> 0.10" in rule["expr"]  # the low-traffic guard
    assert rule["annotations"]["otel_eval_url"].startswith(
        "{{ $externalLabels.otel_eval_url }}/ui/sessions?service=")
    used |= {n for n in metric_names(rule["expr"]) if not n.endswith("_created")}
    # the histogram's _sum and _count are exposed with its buckets; no panel needs them (nor
    # the counters' creation times)
    declared = {n for n in _exposed_names() if n.startswith(("otel_eval_session_",
                                                             "otel_eval_sessions_"))
                and not n.endswith("_created")}
    assert len(declared) == 10
    assert used | {"otel_eval_session_turns_sum", "otel_eval_session_turns_count"} == declared


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
        # the base is Prometheus' external label (prometheus.yml), not a literal
        assert url.startswith("{{ $externalLabels.otel_eval_url }}/ui/"
                              "?service={{ $labels.service | urlquery }}")
        assert ("&agent={{ $labels.agent | urlquery }}" in url) == ("Service" not in name)
        # the detector, and the kinds its metric counts (tests/grafana/test_alert_links.py)
        detector = url.split("&detector=")[1].partition("&")[0].partition(":")[0]
        assert detector in ("loop", "non_termination", "budget"), name


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


def _table_samples() -> dict[str, list[dict[str, str]]]:
    """Label sets of the issue series a real IssuesJob exposes after one run over six
    traces with two recurring problems (the sources of the issues table)."""
    texts = ["Tool web_search called {n} times with identical arguments",
             "Authentication failed: API key rejected with HTTP 401 ({n})"]
    evaluations = [{"trace_id": f"{i:032x}", "agent": "shop", "findings": [],
                    "steps": [{"index": 0, "span_id": f"s{i}", "node": "searcher"}],
                    "judge": {"judges": {"q": {"critiques": [
                        {"span_id": f"s{i}", "score": 0.1, "text": texts[i % 2].format(n=i)}]}}}}
                   for i in range(6)]
    registry = Metrics().registry
    job = IssuesJob(IssuesConfig(), sqlite3.connect(":memory:", check_same_thread=False),
                    lambda since_ns: Window(evaluations, False), registry, clock=lambda: 1_000.0)
    try:
        assert job.run_once() is not None
        out: dict[str, list[dict[str, str]]] = {}
        for family in registry.collect():
            for sample in family.samples:
                out.setdefault(sample.name, []).append(dict(sample.labels))
        return out
    finally:
        job.close()


def test_the_issues_table_shows_title_severity_status_trend_share_and_links() -> None:
    """The "Recurring issues" table is fed from the issue share series, joined on the issue's
    labels with its trend, traces, exemplar and info (severity, status): every shown issue of
    a real run has one info series, so no row lacks its severity; the title links to the
    issue and the traces count to all its runs."""
    (table,) = [p for p in panels() if p["title"] == "Recurring issues"]
    exprs = {t["refId"]: t["expr"] for t in table["targets"]}
    assert exprs["A"].startswith("otel_eval_issue_share{")
    assert exprs["E"].startswith("otel_eval_issue_info{")
    assert all(t["format"] == "table" and t["instant"] for t in table["targets"])
    renamed = table["transformations"][1]["options"]["renameByName"]
    columns = {renamed[k] for k in ("title", "severity", "status", "Value #A", "Value #B",
                                    "Value #C", "issue_id")}
    assert columns == {"Issue", "Severity", "Status", "Share", "Trend", "Traces", "Issue id"}
    links = {o["matcher"]["options"]: [p["value"] for p in o["properties"] if p["id"] == "links"]
             for o in table["fieldConfig"]["overrides"]}
    (issue_link,), (runs_link,) = links["Issue"][0], links["Traces"][0]
    assert issue_link["url"] == '${otel_eval_url}/ui/issues#issue-${__data.fields["Issue id"]}'
    assert runs_link["url"] == '${otel_eval_url}/ui/issues/${__data.fields["Issue id"]}/runs'
    samples = _table_samples()
    key = ("level", "node", "issue_id", "title")
    shares = {tuple(s[k] for k in key) for s in samples["otel_eval_issue_share"]
              if s["issue_id"] != "_other"}
    infos = {tuple(s[k] for k in key): (s["severity"], s["status"])
             for s in samples["otel_eval_issue_info"]}
    assert len(shares) == 2 and set(infos) == shares
    assert all(sev in ("low", "medium", "high", "critical") and status == "new"
               for sev, status in infos.values())
    severity = next(o for o in table["fieldConfig"]["overrides"]
                    if o["matcher"]["options"] == "Severity")
    (mapping,) = [p["value"] for p in severity["properties"] if p["id"] == "mappings"]
    assert set(mapping[0]["options"]) == {"low", "medium", "high", "critical"}


def test_an_alert_sends_to_a_panel_at_the_window_it_counts() -> None:
    """An alert whose description sends to a panel over the Share window (``$window``, 1h by
    default) says to set that window to the alert's own (15m), an option of the variable:
    before, "Open the Loop rate panel" showed the share over the hour, another percentage
    than the alert's over 15 minutes (a short burst that fired it read under 10 %). And the
    panel named is on the dashboard (the budget alerts named "Budget overruns", a panel that
    is not: it is "Budget overruns by budget")."""
    windows = {p["title"]: p for p in panels()}
    (window,) = [v for v in dashboard()["templating"]["list"] if v["name"] == "window"]
    options = {o["value"] for o in window["options"]}
    checked = 0
    for rule in alert_rules():
        description = (rule.get("annotations") or {}).get("description", "")
        for title in re.findall(r"(?:[Oo]pen|[Ss]ee) the (.+?) panel", description):
            assert title in windows, (rule["alert"], title)  # a panel of that name
            panel = windows[title]
            if not any("$window" in t["expr"] for t in panel["targets"]):
                continue
            minutes = max(int(m) for m in re.findall(r"\[(\d+)m\]", rule["expr"]))
            assert f"{minutes}m" in options, window["options"]
            assert f"Share window at {minutes}m" in description, (rule["alert"], description)
            checked += 1
    assert checked >= 2
