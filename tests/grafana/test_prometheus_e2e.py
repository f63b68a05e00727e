"""A real Prometheus scrapes otel-eval; every dashboard and alert query runs on it.

Two targets, same checks (each query parses and returns data through /api/v1/query; the loop
alert fires for the looping agent and not for the clean one; exemplars carry trace ids):
- ``otel-eval serve`` fed with OTLP/JSON agent runs (``service_feed``): the product path;
- ``metrics_harness``: a ``Metrics`` fed directly, which also drives the series the service
  only shows under rare conditions (throttling, sink and judge failures, lucky passes,
  re-opened traces, priced models), so every panel query is shown to return data.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import service_feed
from grafana_files import OUTAGE_ALERTS, alert_rules, panel_queries
from metrics_harness import (
    CLEAN,
    LOOPY,
    SERVICE,
    UNNAMED_SERVICE,
    failing,
    feed_round,
    feed_sessions,
    issues_job,
    restarted_issues_job,
    run,
    serve,
)
from prometheus_harness import (
    PROMETHEUS_POLL,
    Prometheus,
    listening,
    poll,
    prometheus_scraping,
    stop,
)

from otel_eval.telemetry.metrics import Metrics

pytestmark = [pytest.mark.slow, pytest.mark.prometheus]


@pytest.fixture
def scraped(tmp_path: Path) -> Iterator[tuple[Prometheus, Metrics]]:
    metrics = Metrics()
    issues = issues_job(metrics, tmp_path / "issues.db")
    target = serve(metrics)
    try:
        with prometheus_scraping(tmp_path, target.server_address[1]) as prom:
            yield prom, metrics
    finally:
        target.shutdown()
        target.server_close()
        issues.close()


def _has_data(r: dict[str, Any]) -> bool:
    return r.get("status") == "success" and bool(r["data"]["result"])


def test_every_panel_and_alert_query_returns_data(
        scraped: tuple[Prometheus, Metrics]) -> None:
    prom, metrics = scraped
    queries = panel_queries() + [(r["alert"], r["expr"]) for r in alert_rules()
                                 if r["alert"] not in OUTAGE_ALERTS]
    rounds = iter(range(10_000))
    fed: list[str] = []
    pending = dict(queries)

    def all_answer() -> bool:
        for name, expr in queries:
            r = prom.query(expr)
            assert r["status"] == "success", (name, expr, r)  # parses and evaluates
            if _has_data(r):
                pending.pop(name, None)
        return not pending

    # Traffic keeps flowing while we wait, as it would from agents: each poll adds a round.
    try:
        poll(all_answer, "every query to return data",
             between=lambda: fed.extend(feed_round(metrics, next(rounds))), **PROMETHEUS_POLL)
    except AssertionError as e:  # name the queries that never answered
        raise AssertionError(f"{e}; still empty: {sorted(pending)}") from None

    loop_expr = next(r["expr"] for r in alert_rules() if r["alert"] == "OtelEvalLoopRateHigh")
    firing = {s["metric"]["agent"] for s in prom.query(loop_expr)["data"]["result"]}
    assert firing == {LOOPY}, firing  # the loop-heavy agent fires, the clean one does not
    # the dashboard's otel_eval_url variable: the label the shipped scrape config sets
    urls = prom.query("group by (otel_eval_url) (otel_eval_assembly_open_traces)")
    assert [r["metric"] for r in urls["data"]["result"]] == [
        {"otel_eval_url": "http://localhost:8888"}]
    service_expr = next(r["expr"] for r in alert_rules()
                        if r["alert"] == "OtelEvalServiceLoopRateHigh")
    services = {s["metric"]["service"] for s in prom.query(service_expr)["data"]["result"]}
    assert services == {UNNAMED_SERVICE}  # the unknown agent pages its service, shop is quiet
    ratio = _share_of(loop_expr)
    clean = [s for s in prom.query(ratio)["data"]["result"] if s["metric"]["agent"] == CLEAN]
    assert clean and float(clean[0]["value"][1]) < 0.10  # evaluated, below the threshold

    now = time.time()
    ex = prom.get("/api/v1/query_exemplars", query="otel_eval_trace_duration_seconds_bucket",
                  start=str(now - 600), end=str(now + 60))
    trace_ids = {e["labels"]["trace_id"] for s in ex["data"] for e in s["exemplars"]}
    assert trace_ids and trace_ids <= set(fed)  # exemplars carry the evaluated trace ids

    # A query that does not parse is reported as such (so "success" above means parsed).
    r = prom.query("sum by (agent (rate(otel_eval_traces_completed_total[1m]))")
    assert r["status"] == "error" and r["errorType"] == "bad_data"


# Series the real service only shows under conditions this feed does not create (throttling,
# sink failures, judge failures, lucky passes, re-opened traces, failed spool writes, log
# records rejected or left without spans): their panel queries must parse; the harness test
# above checks they return data.
# judge_ / kafka_: serve runs here without a judge model and without Kafka (their own tests
# run them: tests/judge/test_judge_serve.py, tests/kafka/).
# prediction_labelled / _rolling_auc: the feed carries no outcomes (tests/predict sends them).
# workers_restarts / _retried_traces: no worker dies here (tests/receiver/
# test_worker_processes.py kills one); serve runs with --workers 2 for the other two.
# receiver_connections_closed: no client hangs up or stalls here (tests/operations does);
# evaluation_skipped: nothing is replayed or redelivered here (tests/test_spool.py, tests/kafka).
# store_write_failures: the store takes every write here (tests/operations/test_store_failures).
# spool_max_bytes: the spool is never 80 % full here (OtelEvalSpoolFilling; promtool tests it).
# sessions_ / session_: a session completes sessions.idle_timeout_s (30 min) after its last
# turn, and this feed sends no conversation (tests/sessions replays them; the harness test
# above feeds the session metrics; promtool tests the session-loop alert).
_NOT_FED = ("receiver_connections_closed", "evaluation_skipped", "store_write_failures",
            "receiver_requests_throttled", "receiver_requests_refused",
            "metrics_series_overflow", "sink_dropped", "evaluation_failures",
            "traces_lucky_passes", "traces_superseded", "spool_failures", "judge_", "kafka_",
            "receiver_log_records_rejected", "assembly_log_records_dropped",
            "prediction_labelled", "prediction_rolling_auc", "workers_restarts",
            "workers_retried_traces", "spool_max_bytes", "sessions_", "session_",
            "spool_spans_rejected", "spool_log_records_rejected")
# Alerts on a series this feed makes that hold only under such conditions: OtelEvalRunsCut,
# runs cut for room (released overflow, pressure, service_share: every run of this feed ends
# within its bounds; tests/receiver/test_open_trace_pressure.py cuts them; the harness test
# above feeds one).
_NOT_FED_ALERTS = frozenset({"OtelEvalRunsCut"})

# A success predictor as `otel-eval train` writes one (one feature: the tool calls), so serve
# runs with --model and the p_success panels get data from the real service.
_MODEL = {"format": "otel-eval-predictor", "format_version": 1, "name": "success",
          "version": "e2e", "features_version": 3, "features": ["calls.tool"],
          "scaler": {"mean": [1.0], "scale": [0.5]}, "coefficients": [-0.8],
          "intercept": 0.4, "calibration": {"method": "platt", "a": 1.0, "b": 0.0}}


def _fed(expr: str) -> bool:
    return not any(f"otel_eval_{m}" in expr for m in _NOT_FED)


def test_real_service_panels_alerts_and_exemplars(tmp_path: Path) -> None:
    # issues every second, so the recurring-issue panels get data while the feed runs
    (tmp_path / "otel-eval.yaml").write_text(
        "assembly:\n  grace_s: 0.2\nissues:\n  interval_s: 1\n")
    (tmp_path / "model.json").write_text(json.dumps(_MODEL))
    serve_log = (tmp_path / "serve.log").open("w")
    service = subprocess.Popen(
        [sys.executable, "-m", "otel_eval.app.cli", "serve", "--config",
         str(tmp_path / "otel-eval.yaml"), "--grpc-endpoint", "127.0.0.1:0",
         "--http-endpoint", "127.0.0.1:0", "--admin-endpoint", "127.0.0.1:0",
         "--store", str(tmp_path / "results.db"),
         "--budget", "tool_calls=2", "--model", str(tmp_path / "model.json"),
         "--workers", "2"],
        stdout=serve_log, stderr=subprocess.STDOUT)
    try:
        # serve binds port 0 and logs the ports it got (a port picked free beforehand could be
        # taken by another process while serve still imports)
        ports: dict[str, int] = {}
        poll(lambda: listening(tmp_path / "serve.log", ports), "otel-eval serve to listen",
             **PROMETHEUS_POLL)
        http_port, admin_port = ports["OTLP/HTTP"], ports["admin"]
        with prometheus_scraping(tmp_path, admin_port) as prom:
            queries = panel_queries() + [(r["alert"], r["expr"]) for r in alert_rules()]
            # the per-service alerts answer only while no named agent explains the share:
            # here the looping agent does (the harness test above feeds a service they page)
            pending = {name: expr for name, expr in queries
                       if _fed(expr) and not name.startswith("OtelEvalService")
                       and name not in OUTAGE_ALERTS | _NOT_FED_ALERTS}

            def all_answer() -> bool:
                for name, expr in queries:
                    r = prom.query(expr)
                    assert r["status"] == "success", (name, expr, r)
                    if _has_data(r):
                        pending.pop(name, None)
                return not pending

            poll(all_answer, "every fed query to return data",
                 between=lambda: service_feed.send_round(http_port), **PROMETHEUS_POLL)
            loop_expr = next(r["expr"] for r in alert_rules()
                             if r["alert"] == "OtelEvalLoopRateHigh")
            firing = {s["metric"]["agent"] for s in prom.query(loop_expr)["data"]["result"]}
            assert firing == {service_feed.LOOPY}
            now = time.time()
            ex = prom.get("/api/v1/query_exemplars", query="otel_eval_traces_with_loop_total",
                          start=str(now - 600), end=str(now + 60))
            ids = {e["labels"]["trace_id"] for s in ex["data"] for e in s["exemplars"]}
            assert ids and all(len(i) == 32 for i in ids)
    finally:
        stop(service)
        serve_log.close()


def test_every_share_is_zero_not_no_data_when_its_numerator_never_happened(
        scraped: tuple[Prometheus, Metrics]) -> None:
    # An agent none of whose traces passed, looped or failed to end: the verdict="passed",
    # with_loop and non_terminated series never exist for it. Every share panel (per agent
    # and per service) must still show 0 % for it, not "No data"; and so must the share
    # inside every trace-rate alert (the same expression without its threshold).
    prom, metrics = scraped
    shares = {name: e for name, e in panel_queries() if " rate" in name.split(" / ")[0]}
    assert len([n for n in shares if "Session" not in n]) == 6, sorted(shares)
    for rule in alert_rules():
        # the repeated-runs alerts count runs first (>= 3): no share of theirs stands alone
        if "traces_completed" in rule["expr"] and not rule["alert"].endswith("Repeated"):
            shares[rule["alert"]] = _share_of(rule["expr"])
    rounds = iter(range(10_000))

    def feed() -> None:
        r = next(rounds)
        for i in range(5):
            metrics.evaluation_stored(failing(f"{r:08x}{i:08x}{'3' * 16}"), 0.1, False)
        feed_sessions(metrics, "always-failing", 2)  # completed; none failed, looped or hung

    def answered() -> bool:
        return all(_has_data(prom.query(e)) for e in shares.values())

    feed()
    poll(answered, "every share to answer", between=feed, **PROMETHEUS_POLL)
    for name, expr in shares.items():
        values = [float(s["value"][1]) for s in prom.query(expr)["data"]["result"]]
        assert values == [0.0], (name, values)


def _share_of(alert_expr: str) -> str:
    """The share an alert compares with its threshold: the first ``( ... ) > N``."""
    m = re.match(r"\s*\((.*?)\)\s*>\s*[0-9.]+\s*\n", alert_expr, re.S)
    assert m, alert_expr
    return m.group(1)


def test_a_quiet_agents_first_runs_count_in_its_shares_and_counts(
        scraped: tuple[Prometheus, Metrics]) -> None:
    # A quiet agent (the few runs an hour the share window is for): 3 runs, the first of
    # which looped and did not pass. Its counter series are born at their first count, each
    # run seen by a scrape before the next one ends. The dashboard must show 1 of 3 looping
    # (33 %), 1 looping run in the window, 2 of 3 passed: what the repeated-runs alerts count.
    prom, metrics = scraped
    agent = "quiet"
    for i in range(3):
        metrics.evaluation_stored(run(f"{i:08x}{'5' * 24}", agent, SERVICE, loops=i == 0),
                                  0.1, False)
        scraped_runs = f'sum(otel_eval_traces_completed_total{{agent="{agent}"}}) == {i + 1}'
        poll(lambda q=scraped_runs: _value(prom, q) is not None,
             f"Prometheus to scrape run {i + 1}", **PROMETHEUS_POLL)
    panels = dict(panel_queries())

    def shown(title: str) -> dict[str, float]:
        out = {}
        for s in prom.query(panels[title])["data"]["result"]:
            if s["metric"].get("agent") == agent:
                out[s["metric"]["service"]] = round(float(s["value"][1]), 1)
        return out

    assert shown("Loop rate / A") == {SERVICE: 33.3}
    assert shown("Pass rate / A") == {SERVICE: 66.7}
    assert shown("Non-termination rate / A") == {SERVICE: 0.0}
    assert shown("Runs in the window / A") == {SERVICE: 3.0}
    assert shown("Runs in the window / B") == {SERVICE: 1.0}


def _value(prom: Prometheus, expr: str) -> float | None:
    result = prom.query(expr).get("data", {}).get("result", [])
    return float(result[0]["value"][1]) if result else None


class _Restartable:
    """The admin /metrics of one otel-eval process, then of the next one on the same port."""

    def __init__(self, metrics: Metrics) -> None:
        self.registry = metrics.registry


def test_the_issues_table_shows_the_issues_of_quiet_agents_after_a_restart(
        tmp_path: Path) -> None:
    # otel-eval restarts (a rollout): the issues job's first run clusters the stored window
    # again and its gauges are back at once; the looping agent is quiet and has run no trace
    # since, so its traces_completed series is not exposed by the new process. The Recurring
    # issues table must still show its issues (their series exist), not stay empty until the
    # agent's next run.
    before = Metrics()
    for i in range(3):
        before.evaluation_stored(run(f"{i:08x}{'6' * 24}", LOOPY, SERVICE, loops=True), 0.1,
                                 False)
    issues = issues_job(before, tmp_path / "issues.db")
    process = _Restartable(before)
    target = serve(cast(Metrics, process))
    table = [e for n, e in panel_queries() if n.startswith("Recurring issues / ")]
    try:
        with prometheus_scraping(tmp_path, target.server_address[1]) as prom:
            poll(lambda: all(_has_data(prom.query(e)) for e in table),
                 "the issues table before the restart", **PROMETHEUS_POLL)
            shown = _issues(prom.query(table[0]))
            issues.close()
            after = Metrics()
            issues = restarted_issues_job(after, tmp_path / "issues.db")
            process.registry = after.registry
            poll(lambda: _has_data(prom.query("absent(otel_eval_traces_completed_total)"))
                 and _has_data(prom.query("otel_eval_issue_share")),
                 "Prometheus to scrape the restarted process", **PROMETHEUS_POLL)
            for expr in table:
                assert _has_data(prom.query(expr)), expr
            assert _issues(prom.query(table[0])) == shown
    finally:
        target.shutdown()
        target.server_close()
        issues.close()


def _issues(r: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(s["metric"]["level"], s["metric"].get("node", ""), s["metric"]["title"])
            for s in r["data"]["result"]}


def test_outcomes_sent_after_a_restart_show_on_the_labelled_panel(tmp_path: Path) -> None:
    # otel-eval restarts (a rollout); a user's outcome then arrives (POST /v1/feedback) for a
    # run stored before, of an agent that has run no trace since: it counts under
    # _other/_other (docs/prediction.md). The "Predicted traces labelled" panel joined on
    # the agent's completed traces, so it showed nothing; and a series born at 1 has no rate.
    before = Metrics()
    stored = run("7" * 32, LOOPY, SERVICE, loops=True)
    stored.prediction = {"p_success": 0.2, "model": "success@harness"}
    assert stored.verdict is not None
    stored.verdict.outcome = "failure"
    before.evaluation_stored(stored, 0.1, False)
    process = _Restartable(before)
    target = serve(cast(Metrics, process))
    panel = dict(panel_queries())["Predicted traces labelled /s / A"]
    labelled = 'otel_eval_prediction_labelled_total{agent="_other", outcome="failure"}'
    try:
        with prometheus_scraping(tmp_path, target.server_address[1]) as prom:
            poll(lambda: _has_data(prom.query("otel_eval_traces_completed_total")),
                 "Prometheus to scrape the first process", **PROMETHEUS_POLL)
            after = Metrics()
            process.registry = after.registry
            poll(lambda: _has_data(prom.query("absent(otel_eval_traces_completed_total)")),
                 "Prometheus to scrape the restarted process", **PROMETHEUS_POLL)
            after.prediction.labelled({"trace_id": "7" * 32, "service": SERVICE,
                                       "agent": LOOPY, "prediction": {"p_success": 0.2}},
                                      "failure")
            poll(lambda: _has_data(prom.query(f"{labelled} == 1")),
                 "Prometheus to scrape the outcome", **PROMETHEUS_POLL)
            shown = {(s["metric"].get("agent"), s["metric"]["outcome"]): float(s["value"][1])
                     for s in prom.query(panel)["data"]["result"]}
            assert shown.get(("_other", "failure"), 0.0) > 0, shown
    finally:
        target.shutdown()
        target.server_close()
