"""IssuesJob, the periodic stage of ``serve``: a real SQLite store and catalogue file, a real
CollectorRegistry, the clock and every run driven by hand."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from issue_fixtures import window
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families
from support.clock import ManualClock
from support.ports import free_port

from otel_eval.base.results import Evaluation, Finding, Verdict
from otel_eval.base.steps import Step, Trajectory
from otel_eval.outputs.issues.config import GrafanaConfig, IssuesConfig
from otel_eval.outputs.issues.grafana import GrafanaAnnotator
from otel_eval.outputs.issues.job import IssuesJob
from otel_eval.outputs.issues.result import (
    MAX_AGENTS_PER_ISSUE,
    Annotated,
    Issue,
    IssueEvent,
    IssuesResult,
    run_issues,
    to_json,
)
from otel_eval.outputs.issues.runs import NoRun, RunsAt
from otel_eval.outputs.issues.tracker import IssueTracker
from otel_eval.store import Store
from otel_eval.store.base import Window

T0 = 1_700_000_000.0
HOUR = 3600.0
ISSUE_LABELS = {"level", "node", "issue_id", "title"}

_EMPTY = Window([], False)  # a window with no run in it


class Recorder:
    """An annotator that keeps what it was given (optionally failing)."""

    def __init__(self, fail: bool = False) -> None:
        self.events: list[IssueEvent] = []
        self.fail = fail

    def annotate(self, events: Sequence[IssueEvent], now: float) -> Annotated:
        if self.fail:
            raise ConnectionError("grafana down")
        self.events.extend(events)
        return Annotated(posted=len(events))


def _stored(body: dict[str, Any], at: float) -> Evaluation:
    """A fixture evaluation as the engine stores it (steps with nodes, judge attached)."""
    steps = [Step(index=s["index"], span_id=s["span_id"], parent_span_id=None,
                  kind="llm", name="chat", node=s["node"]) for s in body["steps"]]
    traj = Trajectory(body["trace_id"], "otlp", "complete", steps, agent=body["agent"])
    return Evaluation(traj, [], Verdict(True, []), judge=body["judge"],
                      evaluated_at_ns=int(at * 1e9))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(str(tmp_path / "otel-eval.db"))
    yield s
    s.close()


def _job(store: Store, registry: CollectorRegistry, clock: ManualClock, **cfg: Any) -> IssuesJob:
    # The catalogue shares the store's file, as serve does when issues.store_path is empty.
    annotator = cfg.pop("annotator", None)
    return IssuesJob(IssuesConfig(**cfg), store.path, lambda ns: store.since(ns), registry,
                     clock, annotator=annotator)


def _samples(registry: CollectorRegistry, name: str) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for f in registry.collect() for s in f.samples
            if s.name == name]


def test_gauges_after_run_bounded_by_top_k_with_the_rest_as_other(store: Store) -> None:
    registry, clock = CollectorRegistry(), ManualClock(T0)
    store.put_many(_stored(e, T0 - 60) for e in window(12))
    job = _job(store, registry, clock, top_k=1)
    assert _samples(registry, "otel_eval_issue_share") == []  # declared, empty before a run
    result = job.run_once()
    assert result is not None and result.traces == 12 and len(result.issues) == 3

    share = {(s["level"], s["node"], s["issue_id"]): v
             for s, v in _samples(registry, "otel_eval_issue_share")}
    by_id = {i.issue_id: i for i in result.issues}
    loop, auth = sorted((i for i in result.issues if i.node == "searcher"),
                        key=lambda i: -i.share)
    (fmt,) = (i for i in result.issues if i.level == "system")
    assert share == {("node", "searcher", loop.issue_id): 1.0,  # top 1 per (level, node)
                     ("node", "searcher", "_other"): pytest.approx(4 / 12),  # auth, aggregated
                     ("system", "", fmt.issue_id): 0.5}
    traces = {s["issue_id"]: v for s, v in _samples(registry, "otel_eval_issue_traces")}
    assert traces == {loop.issue_id: 12, "_other": auth.traces, fmt.issue_id: 6}
    assert _samples(registry, "otel_eval_issue_trend") == []  # every issue is new
    agents = {(s["issue_id"], s["agent"]) for s, _ in
              _samples(registry, "otel_eval_issue_agent_info")}
    assert agents == {(loop.issue_id, "shop"), ("_other", "shop"), (fmt.issue_id, "shop")}
    exemplars = {s["issue_id"]: s["trace_id"] for s, _ in
                 _samples(registry, "otel_eval_issue_exemplar_info")}
    assert set(exemplars) == {loop.issue_id, fmt.issue_id}  # none for "_other"
    assert all(t in by_id[i].trace_ids for i, t in exemplars.items())
    assert registry.get_sample_value("otel_eval_issues_runs_total", {"status": "ok"}) == 1
    assert registry.get_sample_value("otel_eval_issues_last_run_timestamp_seconds") == T0


def test_window_is_read_from_the_store_by_evaluation_time(store: Store) -> None:
    store.put_many(_stored(e, T0 - 2 * HOUR) for e in window(9, offset=500))  # out of window
    store.put_many(_stored(e, T0 - 10) for e in window(6))
    job = _job(store, CollectorRegistry(), ManualClock(T0), window_s=HOUR)
    result = job.run_once()
    assert result is not None and result.traces == 6
    assert {a.trace_id for a in result.assignments} == {e["trace_id"] for e in window(6)}


def test_latest_json_before_and_after_the_first_run(store: Store) -> None:
    store.put_many(_stored(e, T0 - 60) for e in window(12))
    job = _job(store, CollectorRegistry(), ManualClock(T0))
    empty = job.latest_json()
    assert empty["schema"] == "otel-eval.issues/v1" and empty["generated_at"] is None
    assert empty["issues"] == [] and empty["traces"] == 0 and "assignments" not in empty
    result = job.run_once(T0)
    assert result is not None
    body = job.latest_json()
    assert body == to_json(result, assignments=False) and "assignments" not in body
    assert body["generated_at"] == T0 and len(body["issues"]) == 3


def test_failed_run_is_logged_and_counted_and_keeps_the_last_result(
        store: Store, caplog: pytest.LogCaptureFixture) -> None:
    store.put_many(_stored(e, T0 - 60) for e in window(12))
    registry, calls = CollectorRegistry(), []

    def flaky(since_ns: int) -> Window:
        calls.append(since_ns)
        if len(calls) > 1:
            raise RuntimeError("database is locked")
        return store.since(since_ns)

    job = IssuesJob(IssuesConfig(), store.path, flaky, registry, ManualClock(T0))
    first = job.run_once()
    before = (job.latest_json(), _samples(registry, "otel_eval_issue_share"))
    with caplog.at_level(logging.ERROR, logger="otel_eval.outputs.issues.job"):
        assert job.run_once(T0 + 300) is None  # not raised
    assert "issue clustering run failed" in caplog.text and "database is locked" in caplog.text
    assert first is not None and (job.latest_json(), _samples(
        registry, "otel_eval_issue_share")) == before
    assert registry.get_sample_value("otel_eval_issues_runs_total", {"status": "error"}) == 1
    assert registry.get_sample_value("otel_eval_issues_runs_total", {"status": "ok"}) == 1
    assert registry.get_sample_value("otel_eval_issues_last_run_timestamp_seconds") == T0
    assert calls == [int((T0 - HOUR) * 1e9), int((T0 + 300 - HOUR) * 1e9)]


def test_a_worker_that_no_longer_leads_stops_publishing_its_old_issues(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a fleet the issues and their gauges come from the leader (docs/store.md). A leader
    whose catalogue connection dropped reconnects and may find the lock taken: from then on
    it skips its runs, and what it ran before is no longer the fleet's. Before, it kept
    serving that result (/v1/issues, every issue series beside the new leader's on the
    dashboard) and its last-run timestamp, so OtelEvalIssuesJobStale fired for it an hour
    later although nothing was wrong."""
    store.put_many(_stored(e, T0 - 60) for e in window(12))
    registry = CollectorRegistry()
    job = _job(store, registry, ManualClock(T0))
    with pytest.raises(NoRun, match="no clustering run yet"):
        job.runs("iss_any", RunsAt(0, 10))
    first = job.run_once()
    assert first is not None and first.issues
    issue_id = first.issues[0].issue_id
    assert job.runs(issue_id, RunsAt(0, 10)) is not None
    assert _samples(registry, "otel_eval_issue_share")
    monkeypatch.setattr(job._tracker, "leads", lambda: False)  # another worker took the lock
    assert job.run_once(T0 + 300) is None
    assert registry.get_sample_value("otel_eval_issues_runs_total", {"status": "skipped"}) == 1
    for name in ("otel_eval_issue_share", "otel_eval_issue_traces", "otel_eval_issue_info",
                 "otel_eval_issue_agent_info", "otel_eval_issue_exemplar_info",
                 "otel_eval_issues_last_run_timestamp_seconds"):
        assert _samples(registry, name) == [], name
    assert job.latest_json()["generated_at"] is None and job.latest_json()["issues"] == []
    with pytest.raises(NoRun, match="another worker of the fleet runs the issues job"):
        job.runs(issue_id, RunsAt(0, 10))
    assert registry.get_sample_value("otel_eval_issues_runs_total", {"status": "ok"}) == 1


def test_restart_on_the_same_catalogue_keeps_issue_ids(store: Store) -> None:
    store.put_many(_stored(e, T0 - 60) for e in window(12))
    first = _job(store, CollectorRegistry(), ManualClock(T0))
    r1 = first.run_once()
    first.close()
    # A new process: new job and registry on the same file, an hour later, other traces.
    store.put_many(_stored(e, T0 + HOUR - 60) for e in window(15, offset=100))
    registry = CollectorRegistry()
    second = _job(store, registry, ManualClock(T0 + HOUR))
    r2 = second.run_once()
    assert r1 is not None and r2 is not None
    assert {set(i.trace_ids).isdisjoint(j.trace_ids)
            for i in r1.issues for j in r2.issues} == {True}
    assert {(i.level, i.node, i.issue_id) for i in r2.issues} == {
        (i.level, i.node, i.issue_id) for i in r1.issues}
    assert all(not i.new and i.trend is not None for i in r2.issues)
    trends = {s["issue_id"] for s, _ in _samples(registry, "otel_eval_issue_trend")}
    assert trends == {i.issue_id for i in r2.issues}  # top_k=10: every issue shown


def test_exemplar_stays_while_its_trace_is_in_the_window(store: Store) -> None:
    evs = window(12)
    registry, current = CollectorRegistry(), [evs]
    job = IssuesJob(IssuesConfig(), store.path, lambda ns: Window(current[0], False),
                    registry, ManualClock(T0))

    def exemplars() -> dict[str, str]:
        return {s["issue_id"]: s["trace_id"] for s, _ in
                _samples(registry, "otel_eval_issue_exemplar_info")}

    r1 = job.run_once()
    first = exemplars()
    current[0] = evs[::-1]  # same traces, other order: the central critique's trace changes
    r2 = job.run_once(T0 + 60)
    assert r1 is not None and r2 is not None
    assert any(i.exemplars[0] != first[i.issue_id] for i in r2.issues)  # the test bites
    assert exemplars() == first
    gone = set(first.values())
    current[0] = [e for e in evs if e["trace_id"] not in gone]
    r3 = job.run_once(T0 + 120)
    assert r3 is not None and exemplars() == {i.issue_id: i.exemplars[0] for i in r3.issues}


def test_events_are_annotated_and_counted(store: Store) -> None:
    store.put_many(_stored(e, T0 - 60) for e in window(12))
    registry, recorder = CollectorRegistry(), Recorder()
    job = _job(store, registry, ManualClock(T0), annotator=recorder)
    r1 = job.run_once()
    assert r1 is not None and [e.kind for e in recorder.events] == ["new"] * 3
    assert job.run_once(T0 + 60) is not None and len(recorder.events) == 3  # nothing new
    assert registry.get_sample_value("otel_eval_issues_annotations_total",
                                     {"status": "posted"}) == 3




@pytest.mark.parametrize("kind", ["raises", "unreachable_grafana"])
def test_annotation_failures_are_counted_not_raised(store: Store, kind: str) -> None:
    store.put_many(_stored(e, T0 - 60) for e in window(12))
    annotator = Recorder(fail=True) if kind == "raises" else GrafanaAnnotator(
        GrafanaConfig(url=f"http://127.0.0.1:{free_port()}", timeout_s=2.0))
    registry = CollectorRegistry()
    job = _job(store, registry, ManualClock(T0), annotator=annotator)
    assert job.run_once() is not None and len(job.latest_json()["issues"]) == 3
    # an unreachable Grafana is tried once a run: the other events are not posted, counted
    unreachable = 2 if kind == "unreachable_grafana" else 0
    assert registry.get_sample_value("otel_eval_issues_annotations_total",
                                     {"status": "failed"}) == 3 - unreachable
    assert registry.get_sample_value("otel_eval_issues_annotations_skipped_total",
                                     {"reason": "grafana_unreachable"}) == unreachable
    assert registry.get_sample_value("otel_eval_issues_annotations_skipped_total",
                                     {"reason": "max_annotations"}) == 0
    assert registry.get_sample_value("otel_eval_issues_runs_total", {"status": "ok"}) == 1


def test_scrape_formats_and_bounded_labels(store: Store) -> None:
    store.put_many(_stored(e, T0 - 60) for e in window(30))
    registry = CollectorRegistry()
    job = _job(store, registry, ManualClock(T0), top_k=2)
    job.run_once()
    text = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) == {
        "otel_eval_issue_share", "otel_eval_issue_traces", "otel_eval_issue_trend",
        "otel_eval_issue_agent_info", "otel_eval_issue_exemplar_info", "otel_eval_issue_info",
        "otel_eval_issues_runs", "otel_eval_issues_annotations",
        "otel_eval_issues_annotations_skipped", "otel_eval_issues_last_run_timestamp_seconds",
        "otel_eval_issues_last_run_duration_seconds", "otel_eval_issues_interval_seconds",
        "otel_eval_issues_naming_deferred",
        # each counter's creation time, as the declared counters' (text format: a family)
        "otel_eval_issues_runs_created", "otel_eval_issues_annotations_created",
        "otel_eval_issues_annotations_skipped_created",
        "otel_eval_issues_naming_deferred_created"}
    for name in ("otel_eval_issue_share", "otel_eval_issue_traces"):
        assert {frozenset(s.labels) for s in families[name].samples} == {
            frozenset(ISSUE_LABELS)}
    assert {frozenset(s.labels) for s in families["otel_eval_issue_exemplar_info"].samples} \
        == {frozenset(ISSUE_LABELS | {"trace_id"})}  # the one trace-id label, one per issue
    om = {f.name: f for f in parse_om(generate_openmetrics(registry).decode())}
    assert om["otel_eval_issue_agent"].type == "info"
    assert om["otel_eval_issues_runs"].type == "counter"
    assert len(om["otel_eval_issue_share"].samples) == len(families[
        "otel_eval_issue_share"].samples) <= 2 * 2  # (top_k + "_other") per (level, node)


def test_thousands_of_agent_nodes_give_at_most_the_cap_of_issue_series(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Span content names the agent nodes (up to 256 characters each): one issue per node
    for 3,000 nodes gives the max_gauge_issues largest issues' series and one node="_other"
    aggregate, every label value bounded in length; the API still lists every issue."""
    n, cap = 3000, 5
    issues = tuple(Issue(f"iss_{i:010x}", "node", f"node-{i}-" + "x" * 250, "t" * 300, "d",
                         (n - i) / n ** 2, None, 1, 1, (f"{i:032x}",),
                         (f"agent-{i}-" + "a" * 250,), T0, True, (f"{i:032x}",),
                         service_agents=(("svc-" + "s" * 250, f"agent-{i}-" + "a" * 250),))
                   for i in range(n))
    result = IssuesResult(T0, HOUR, "tfidf", n, n, 0, issues, ())
    monkeypatch.setattr(IssueTracker, "run", lambda _self, _evs, _now=None: result)
    registry = CollectorRegistry()
    job = IssuesJob(IssuesConfig(max_gauge_issues=cap), sqlite3.connect(
        ":memory:", check_same_thread=False), lambda ns: _EMPTY, registry, ManualClock(T0))
    ran = job.run_once()
    assert ran is not None and ran.issues is result.issues
    assert len(job.latest_json()["issues"]) == n
    series = [s for f in text_string_to_metric_families(generate_latest(registry).decode())
              if f.name.startswith("otel_eval_issue_") for s in f.samples]
    rows = {(s.labels["level"], s.labels["node"], s.labels["issue_id"]) for s in series}
    assert {i for _, _, i in rows} == {*(i.issue_id for i in issues[:cap]), "_other"}
    assert ("node", "_other", "_other") in rows and len(rows) == cap + 1
    # shown: share, traces, info, exemplar, one agent; "_other": share, traces, 20 agents
    assert len(series) == cap * 5 + 2 + MAX_AGENTS_PER_ISSUE
    assert max(len(v) for s in series for v in s.labels.values()) == 128  # nodes, agents
    assert {len(s.labels["title"]) for s in series} == {80, len("other issues")}
    assert {len(s.labels["trace_id"]) for s in series if "trace_id" in s.labels} == {32}


def test_thread_runs_at_start_and_stops(store: Store) -> None:
    ran = threading.Event()

    def since(ns: int) -> Window:
        ran.set()
        return Window([], False)

    registry = CollectorRegistry()
    job = IssuesJob(IssuesConfig(interval_s=3600), store.path, since, registry, ManualClock(T0))
    with pytest.raises(ValueError, match="interval"):
        job.start(0)
    job.start()
    assert ran.wait(30)  # the first run is immediate, not one interval later
    assert job.stop(30)
    assert registry.get_sample_value("otel_eval_issues_runs_total", {"status": "ok"}) == 1
    job.close()
    assert registry.get_sample_value("otel_eval_issues_runs_total", {"status": "ok"}) is None


def test_the_interval_in_force_is_a_gauge(store: Store) -> None:
    """OtelEvalIssuesJobStale pages past twice the interval (an hour at least): a job run every
    2 hours (issues.interval_s: 7200) exposes it, so its last run, up to 2 hours old when
    healthy, does not page; the interval start() is given when another; none when off."""
    registry = CollectorRegistry()
    job = IssuesJob(IssuesConfig(interval_s=7200), store.path, lambda ns: _EMPTY, registry,
                    ManualClock(T0))
    assert registry.get_sample_value("otel_eval_issues_interval_seconds") == 7200
    job.start(9000)
    try:
        assert registry.get_sample_value("otel_eval_issues_interval_seconds") == 9000
    finally:
        job.close(30)
    off = CollectorRegistry()
    job = IssuesJob(IssuesConfig(interval_s=0), store.path, lambda ns: _EMPTY, off)
    assert off.get_sample_value("otel_eval_issues_interval_seconds") is None
    job.close()


def test_the_window_keeps_only_what_clustering_reads(store: Store) -> None:
    """Issue 21: the job held every body of its window whole (10,000 of 47 kB: 1.3 GB per
    run). It keeps ``critique_fields`` of each (read a chunk at a time), and clusters the same:
    identical issues and assignments from whole bodies and from kept fields."""
    from otel_eval.outputs.issues.critiques import critique_fields

    evaluations = [_stored(e, T0 - 60) for e in window(12)]
    for ev in evaluations:  # bulky content clustering never reads
        for step in ev.trajectory.steps:
            step.kind, step.result = "tool", "observation " * 300
        ev.findings.append(Finding("loop", "repeated_call", "warning",
                                   "search repeated 3 times", [ev.trajectory.steps[0]
                                                                     .span_id], [0]))
    store.put_many(evaluations)
    kept = store.since(0, keep=critique_fields).rows
    whole = store.since(0).rows
    assert sum(map(len, map(str, kept))) * 5 < sum(map(len, map(str, whole)))
    assert all("result" not in s for b in kept for s in b["steps"])
    results = []
    for read in (lambda ns: store.since(ns), lambda ns: store.since(ns, keep=critique_fields)):
        job = IssuesJob(IssuesConfig(), str(store.path) + f".{len(results)}", read,
                        CollectorRegistry(), ManualClock(T0))
        result = job.run_once()
        job.close()
        assert result is not None
        results.append(to_json(result))
    assert results[0]["issues"] and results[0] == results[1]


def test_an_issue_of_runs_no_span_named_is_of_agent_unknown() -> None:
    """Its agent label is "unknown", as the traces' metrics count those runs: the dashboard's
    issues table joins the two on agent, and "" matched nothing (the issue never showed)."""
    from otel_eval.telemetry.issues import IssueRow, families

    row = IssueRow(("node", "", "i1", "a title"), 0.5, 3, None, (), None, "high", "new")
    [agent_info] = [f for f in families((row,), {}, {}, None, None, {})
                    if f.name == "otel_eval_issue_agent"]
    assert [s.labels["agent"] for s in agent_info.samples] == ["unknown"]


def test_shutdown_with_no_time_left_does_not_wait_for_the_run(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """``shutdown(deadline_s)`` gives the thread what is left of the service's deadline, none
    when none is left (it took at least 1 s): a run under way finishes on its own (daemon)."""
    entered, release = threading.Event(), threading.Event()

    def since(ns: int) -> Window:
        entered.set()
        release.wait(30)  # a guard only: the test releases it
        return Window([], False)

    job = IssuesJob(IssuesConfig(interval_s=3600), store.path, since, CollectorRegistry(),
                    ManualClock(T0))
    asked: list[float | None] = []
    stop = job.stop

    def recording_stop(timeout_s: float | None = None) -> bool:
        asked.append(timeout_s)
        return stop(timeout_s)

    monkeypatch.setattr(job, "stop", recording_stop)
    job.start()
    thread = job._thread
    assert thread is not None and entered.wait(30)
    try:
        job.shutdown(0.0)
        assert asked == [0.0]
        assert thread.is_alive()  # left running: the catalogue is not closed under it
    finally:
        release.set()
    thread.join(30)
    job._tracker.close()


def test_the_job_counters_have_their_creation_time_as_every_counter(store: Store) -> None:
    """docs/metrics.md: each counter has ``<name>_created`` (the repeated-runs alerts and
    Prometheus' created-timestamp handling read it); the job's counters, built at scrape time,
    had none, so a restart's reset of them looked like any other scrape's."""
    registry = CollectorRegistry()
    job = _job(store, registry, ManualClock(T0))
    try:
        job.run_once(T0 + 60)
        for name, label, values in (
                ("otel_eval_issues_runs_created", "status", ("ok", "error", "skipped")),
                ("otel_eval_issues_annotations_created", "status", ("posted", "failed")),
                ("otel_eval_issues_annotations_skipped_created", "reason",
                 ("max_annotations", "grafana_unreachable"))):
            for value in values:
                assert registry.get_sample_value(name, {label: value}) == T0, (name, value)
        text = generate_openmetrics(registry).decode()
        assert 'otel_eval_issues_runs_created{status="ok"} 1.7e+09' in text
    finally:
        job.close()


def test_namings_the_deadline_defers_are_counted(store: Store) -> None:
    """issues.naming_deadline_s: with the judge provider hanging, the run starts no namer
    call past it (on the injected monotonic clock) and counts the new issues left
    unnamed in otel_eval_issues_naming_deferred_total."""
    store.put_many(_stored(e, T0 - 60) for e in window(12))
    ticks = [0.0]

    def hanging(texts: object) -> tuple[str, str]:
        ticks[0] += 780.0  # the judge stage's ask timeout
        return ("Judge name", "Named by the judge.")

    registry = CollectorRegistry()
    job = IssuesJob(IssuesConfig(naming_deadline_s=300.0), store.path,
                    lambda ns: store.since(ns), registry, ManualClock(T0), namer=hanging,
                    monotonic=lambda: ticks[0])
    try:
        result = job.run_once(T0)
        assert result is not None and len(result.issues) == 3
        assert ticks[0] == 780.0  # one call, not three
        assert registry.get_sample_value("otel_eval_issues_naming_deferred_total") == 2
    finally:
        job.close()


def test_agent_info_keeps_same_named_agents_of_two_services_apart() -> None:
    """Metrics are per (service, agent) and the dashboard's issues table joins an issue to
    them through otel_eval_issue_agent_info: keyed by agent name alone, an issue only
    service "billing"'s planner had showed on service "search"'s planner too."""
    from issue_fixtures import AUTH, LOOP, evaluation

    evs = []
    for i in range(6):
        search = evaluation(f"{i:032x}", [("planner", LOOP[i % 3].format(n=i))],
                            agent="planner")
        billing = evaluation(f"{100 + i:032x}", [("planner", AUTH[i % 3].format(n=i))],
                             agent="planner")
        evs += [{**search, "service": "search"}, {**billing, "service": "billing"}]
    registry = CollectorRegistry()
    job = IssuesJob(IssuesConfig(), sqlite3.connect(":memory:", check_same_thread=False),
                    lambda ns: Window(evs, False), registry, ManualClock(T0))
    try:
        result = job.run_once(T0)
        assert result is not None and len(result.issues) == 2
        auth = next(i for i in result.issues if "authentication" in i.title.lower())
        pairs = {(s.labels.get("service"), s.labels["agent"])
                 for f in registry.collect() for s in f.samples
                 if s.name == "otel_eval_issue_agent_info"
                 and s.labels["issue_id"] == auth.issue_id}
        assert pairs == {("billing", "planner")}
        [shown] = [i for i in job.latest_json()["issues"] if i["issue_id"] == auth.issue_id]
        assert shown["service_agents"] == [{"service": "billing", "agent": "planner"}]
    finally:
        job.close()


def test_agent_info_of_a_pair_past_the_metrics_pair_budget_joins_the_other_series(
        store: Store) -> None:
    """The dashboard's issues table keeps an issue when its otel_eval_issue_agent_info
    (service, agent) matches a series of otel_eval_traces_completed_total. Past
    admin.metrics_max_pairs the traces' series say (_other, _other); the info series said the
    raw pair, which matched none, so every issue of a service past the budget was missing
    from the table (a multi-tenant deployment's newest services). Now the job labels the
    pair as the per-trace metrics do: serve's build hands it their budget."""
    from issue_fixtures import AUTH, LOOP, evaluation

    from otel_eval.outputs.deps import Deps
    from otel_eval.outputs.issues import job as issues_job
    from otel_eval.telemetry.metrics import Metrics

    registry = CollectorRegistry()
    metrics = Metrics(registry, max_pairs=1)
    evaluations = []
    for i in range(6):
        search = evaluation(f"{i:032x}", [("planner", LOOP[i % 3].format(n=i))], agent="planner")
        billing = evaluation(f"{100 + i:032x}", [("planner", AUTH[i % 3].format(n=i))],
                             agent="planner")
        for body, service in ((search, "search"), (billing, "billing")):
            stored = _stored(body, T0 - 60)
            stored.trajectory.service = service
            metrics.evaluation_stored(stored, 0.1, superseded=False)  # search came first
            evaluations.append(stored)
    store.put_many(evaluations)
    traced = {(s["service"], s["agent"]) for s, _ in
              _samples(registry, "otel_eval_traces_completed_total")}
    assert traced == {("search", "planner"), ("_other", "_other")}
    deps = Deps(metrics, registry, store, store.path, store.path, None)
    job = issues_job.build(IssuesConfig(), deps)
    assert job is not None
    try:
        result = job.run_once(T0)
        assert result is not None and len(result.issues) == 2
        info = {(s["service"], s["agent"]) for s, _ in
                _samples(registry, "otel_eval_issue_agent_info")}
        assert info == traced  # each issue joins a series the traces' metrics carry
        auth = next(i for i in result.issues if "authentication" in i.title.lower())
        [shown] = [i for i in job.latest_json()["issues"] if i["issue_id"] == auth.issue_id]
        assert shown["service_agents"] == [{"service": "billing", "agent": "planner"}]  # API
    finally:
        job.close()


def test_the_job_takes_no_place_in_the_metrics_pair_budget(store: Store) -> None:
    """The job labels an issue's pairs as the per-trace metrics do, by looking them up: it
    admitted them (SeriesCap.pair), so after a restart the stored window's pairs, retired
    agents' included, took the budget's places before the live agents' traces came (and,
    with admin.metrics_expiration_s, kept them, seen again at every run)."""
    from issue_fixtures import LOOP, evaluation

    from otel_eval.outputs.deps import Deps
    from otel_eval.outputs.issues import job as issues_job
    from otel_eval.telemetry.metrics import Metrics

    registry = CollectorRegistry()
    metrics = Metrics(registry, max_pairs=1)
    stored = []  # by the process before the restart: this one's metrics never saw them
    for i in range(6):
        body = evaluation(f"{i:032x}", [("planner", LOOP[i % 3].format(n=i))], agent="retired")
        stored.append(_stored(body, T0 - 60))
        stored[-1].trajectory.service = "billing"
    store.put_many(stored)
    job = issues_job.build(IssuesConfig(), Deps(metrics, registry, store, store.path,
                                                store.path, None))
    assert job is not None
    try:
        assert job.run_once(T0) is not None
        info = {(s["service"], s["agent"]) for s, _ in
                _samples(registry, "otel_eval_issue_agent_info")}
        assert info == {("_other", "_other")}  # no series of the traces' carries the pair
        live = _stored(evaluation(f"{99:032x}", [], agent="planner"), T0)
        live.trajectory.service = "search"
        metrics.evaluation_stored(live, 0.1, superseded=False)
        traced = {(s["service"], s["agent"]) for s, _ in
                  _samples(registry, "otel_eval_traces_completed_total")}
        assert traced == {("search", "planner")}
    finally:
        job.close()


def test_a_window_past_the_runs_read_says_so(
        store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The job clusters the newest ``WINDOW_RUNS`` runs of its window (100,000: each run's
    critiques are held in memory); the rest went uncounted and nothing said so, so
    ``/v1/issues`` shares read as the whole window's. Now the result says it was cut
    (``window_truncated``, on ``/v1/issues`` too) and the log says how many were read."""
    from otel_eval.outputs.deps import Deps
    from otel_eval.outputs.issues import job as issues_job
    from otel_eval.telemetry.metrics import Metrics

    monkeypatch.setattr(issues_job, "WINDOW_RUNS", 4, raising=False)
    store.put_many(_stored(e, T0 - 60 + i) for i, e in enumerate(window(6)))
    registry = CollectorRegistry()
    deps = Deps(Metrics(registry), registry, store, store.path, store.path, None)
    job = issues_job.build(IssuesConfig(), deps)
    assert job is not None
    try:
        with caplog.at_level(logging.WARNING):
            result = job.run_once(T0)
        assert result is not None and result.traces == 4  # the newest four
        assert {a.trace_id for a in result.assignments} == {e["trace_id"]
                                                           for e in window(6)[2:]}
        assert job.latest_json()["window_truncated"] is True
        assert "newest 4 runs" in caplog.text
        monkeypatch.setattr(issues_job, "WINDOW_RUNS", 6)  # within the bound: not cut
        result = job.run_once(T0)
        assert result is not None and result.traces == 6
        assert job.latest_json()["window_truncated"] is False
    finally:
        job.close()


def test_the_job_keeps_no_assignments_nor_events_of_its_runs(store: Store) -> None:
    """The job kept its last run whole: its assignments (one per critique of the window, up to
    WINDOW_RUNS runs' worth) and its events, which no reader of the kept run reads (the API
    and the gauges read the issues; the annotator is given the events by the run). Now the
    kept run holds the issues only; what the readers answer is the same."""
    store.put_many(_stored(e, T0 - 60) for e in window(30))
    job = _job(store, CollectorRegistry(), ManualClock(T0))
    ran = job.run_once()
    assert ran is not None and ran.assignments and ran.events
    latest = job.latest()
    assert latest is not None and (latest.assignments, latest.events) == ((), ())
    assert job.latest_json() == to_json(ran, assignments=False)
    trace_id = ran.issues[0].trace_ids[0]
    assert job.of_run(trace_id) and job.of_run(trace_id) == run_issues(ran, trace_id)
