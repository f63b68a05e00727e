"""Self-metrics of the issues job (``outputs/issues/job.py``), built when Prometheus scrapes
from the job's last snapshot (the job keeps its own counts: a run's result replaces the
gauges wholesale, so they are a collector's, not series set one by one).

Label values are bounded (``outputs/issues/result.top_issue_gauge_samples``): at most
2 x ``issues.max_gauge_issues`` + 2 (level, node, issue_id) sets whatever the number of agent
nodes; node and agent cut to ``labels.MAX_LABEL_CHARS``, title to 80 characters (the
dashboard's issues table shows it), trace_id a 32-hex trace id (its exemplar links), at most
20 agents per set.

    otel_eval_issue_share{level,node,issue_id,title}    share of the window's traces, 0..1
    otel_eval_issue_traces{level,node,issue_id,title}   traces with the issue
    otel_eval_issue_trend{level,node,issue_id,title}    share minus the previous run's (not
                                                        for new issues nor "_other")
    otel_eval_issue_agent_info{level,node,issue_id,title,service,agent}   1 per (service,
                                                        agent) seen with it, as the per-trace
                                                        metrics label them
    otel_eval_issue_exemplar_info{level,node,issue_id,title,trace_id}  1, one per issue
    otel_eval_issue_info{level,node,issue_id,title,severity,status}  1, one per shown issue
                                                        (not "_other"): the issues table's
                                                        severity and status columns
    otel_eval_issues_runs_total{status}                 ok | error | skipped
    otel_eval_issues_annotations_total{status}          posted | failed
    otel_eval_issues_annotations_skipped_total{reason}  max_annotations | grafana_unreachable
    otel_eval_issues_naming_deferred_total              new issues left unnamed by a run's
                                                        issues.naming_deadline_s (named later)
    otel_eval_issues_last_run_timestamp_seconds         start of the last successful run
    otel_eval_issues_last_run_duration_seconds
    otel_eval_issues_interval_seconds                   issues.interval_s in force (absent
                                                        when 0, off; OtelEvalIssuesJobStale
                                                        pages past twice it, an hour at least)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from otel_eval.telemetry.labels import UNKNOWN, label_text

RUN_STATUSES = ("ok", "error", "skipped")
ANNOTATION_STATUSES = ("posted", "failed")
# why an event was not posted: past issues.grafana.max_annotations in its run; after a
# connection failure or timeout earlier in its run
ANNOTATION_SKIP_REASONS = ("max_annotations", "grafana_unreachable")
_LABELS = ("level", "node", "issue_id", "title")


@dataclass(frozen=True, slots=True)
class IssueRow:
    """One shown issue (or a group's ``_other``): the values of its gauge samples."""

    labels: tuple[str, str, str, str]  # level, node, issue_id, title
    share: float
    traces: int
    trend: float | None
    agents: tuple[tuple[str, str], ...]  # (service, agent) label values
    exemplar: str | None
    severity: str = ""  # low | medium | high | critical; "" for "_other"
    status: str = ""  # new | ongoing | regressed; "" for "_other"


# rows, runs by status, annotations by status, last run's end (unix s), its duration (s),
# annotations skipped by reason, the interval in force (s; None: the job is off), namings
# deferred by the naming deadline
IssuesSnapshot = tuple[tuple[IssueRow, ...], dict[str, int], dict[str, int], float | None,
                       float | None, dict[str, int], float | None, int]


class IssuesCollector(Collector):
    """Every issues metric, built at scrape time from ``snapshot()`` (the job's last run)."""

    def __init__(self, snapshot: Callable[[], IssuesSnapshot],
                 created: float | None = None) -> None:
        """``created``: when the job's counts began (Unix seconds), each counter's
        ``_created``, as prometheus_client gives the declared counters theirs."""
        self._snapshot = snapshot
        self._created = created

    def describe(self) -> Iterator[Any]:
        return families((), {}, {}, None, None, {}, None, 0)

    def collect(self) -> Iterator[Any]:
        return families(*self._snapshot(), created=self._created)


def families(rows: tuple[IssueRow, ...], runs: Mapping[str, int], annotations: Mapping[str, int],
              last_run: float | None, last_duration: float | None,
              skipped: Mapping[str, int], interval: float | None = None,
              naming_deferred: int = 0, *, created: float | None = None) -> Iterator[Any]:
    share = GaugeMetricFamily("otel_eval_issue_share", "Share of the window's evaluated "
                              "traces with the issue (issues.max_gauge_issues in all, top-K "
                              "per level and node; the rest as issue_id=\"_other\", nodes "
                              "without a shown issue as node=\"_other\")", labels=_LABELS)
    traces = GaugeMetricFamily("otel_eval_issue_traces", "Traces in the window with the "
                               "issue", labels=_LABELS)
    trend = GaugeMetricFamily("otel_eval_issue_trend", "Issue share minus its share in the "
                              "previous run (absent for new issues)", labels=_LABELS)
    agent = InfoMetricFamily("otel_eval_issue_agent", "Agents seen with the issue, by "
                             "service (as the per-trace metrics label them)",
                             labels=(*_LABELS, "service", "agent"))
    exemplar = InfoMetricFamily("otel_eval_issue_exemplar", "An exemplar trace of the issue "
                                "(sticky while it stays in the window)",
                                labels=(*_LABELS, "trace_id"))
    info = InfoMetricFamily("otel_eval_issue", "Severity and status of the issue (new, "
                            "ongoing, regressed), one per shown issue",
                            labels=(*_LABELS, "severity", "status"))
    for row in rows:
        labels = [label_text(v) for v in row.labels]  # a scrape never fails on one series
        share.add_metric(labels, row.share)
        traces.add_metric(labels, float(row.traces))
        if row.trend is not None:
            trend.add_metric(labels, row.trend)
        # no agent known: "unknown", as the traces' metrics call it (the dashboard joins
        # the two on agent; "" matched none of their series, and the issue was not shown)
        for service, name in row.agents or ((UNKNOWN, UNKNOWN),):
            agent.add_metric([*labels, label_text(service), label_text(name)], {})
        if row.exemplar is not None:
            exemplar.add_metric([*labels, row.exemplar], {})
        if row.severity:
            info.add_metric([*labels, row.severity, row.status], {})
    yield from (share, traces, trend, agent, exemplar, info)
    runs_total = CounterMetricFamily("otel_eval_issues_runs", "Issue clustering runs by "
                                     "outcome", labels=("status",))
    for status in RUN_STATUSES:
        runs_total.add_metric([status], float(runs.get(status, 0)), created=created)
    posted = CounterMetricFamily("otel_eval_issues_annotations", "Issue annotations sent to "
                                 "Grafana by outcome", labels=("status",))
    for status in ANNOTATION_STATUSES:
        posted.add_metric([status], float(annotations.get(status, 0)), created=created)
    not_posted = CounterMetricFamily(
        "otel_eval_issues_annotations_skipped", "Issue annotations not sent to Grafana, by "
        "reason (max_annotations: past issues.grafana.max_annotations in the run; "
        "grafana_unreachable: after a connection failure or timeout in the run)",
        labels=("reason",))
    for reason in ANNOTATION_SKIP_REASONS:
        not_posted.add_metric([reason], float(skipped.get(reason, 0)), created=created)
    deferred = CounterMetricFamily(
        "otel_eval_issues_naming_deferred", "New issues a run left unnamed past "
        "issues.naming_deadline_s (they keep their evidence title until a later run names "
        "them)")
    deferred.add_metric([], float(naming_deferred), created=created)
    yield from (runs_total, posted, not_posted, deferred)
    stamp = GaugeMetricFamily("otel_eval_issues_last_run_timestamp_seconds", "Unix time of the "
                              "start of the last successful issue clustering run")
    duration = GaugeMetricFamily("otel_eval_issues_last_run_duration_seconds", "Duration of "
                                 "the last successful issue clustering run")
    every = GaugeMetricFamily("otel_eval_issues_interval_seconds", "Seconds between issue "
                              "clustering runs (issues.interval_s): the last run's timestamp "
                              "is up to this old when healthy")
    if last_run is not None:
        stamp.add_metric([], last_run)
    if last_duration is not None:
        duration.add_metric([], last_duration)
    if interval is not None:
        every.add_metric([], interval)
    yield from (stamp, duration, every)
