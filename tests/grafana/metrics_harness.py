"""Stand-in for ``otel-eval serve`` in the Prometheus end-to-end test.

Serves a ``Metrics`` registry on ``/metrics`` the way the admin server does (``metrics.render``
with content negotiation, so Prometheus gets OpenMetrics and exemplars) and feeds it with
hand-built evaluations: a loop-heavy agent, a clean agent, and ingest / sink activity. When the
real service exists, the test should start ``otel-eval serve --admin-endpoint 127.0.0.1:P`` and
send OTLP traces instead (see the module docstring of test_prometheus_e2e.py).
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from otel_eval.base.results import Evaluation, Finding, Verdict
from otel_eval.base.steps import Step, Trajectory
from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.job import IssuesJob
from otel_eval.store.base import Window
from otel_eval.telemetry.metrics import Metrics, render

LOOPY, CLEAN, SERVICE = "looper", "steady", "shop"
# A service whose runs no span names (agent unknown): it loops as LOOPY does, and pages
# through the per-service alerts only.
UNNAMED_SERVICE = "desk"


def serve(metrics: Metrics) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body, ctype = render(metrics.registry, self.headers.get("Accept"))
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _evaluation(trace_id: str, agent: str | None, findings: list[Finding],
                passed: bool, service: str = SERVICE) -> Evaluation:
    steps = [Step(index=0, span_id="a" * 16, parent_span_id=None, kind="llm", name="chat",
                  input_tokens=900, output_tokens=100, cost_usd=0.02)]
    steps += [Step(index=i, span_id=f"{i:016x}", parent_span_id="a" * 16, kind="tool",
                   name="execute_tool search", tool_name="search") for i in range(1, 4)]
    traj = Trajectory(trace_id, "otlp", "complete", steps, service=service, agent=agent,
                      start_ns=0, end_ns=12_000_000_000)
    return Evaluation(traj, findings, Verdict(passed, []))


def run(trace_id: str, agent: str, service: str, loops: bool) -> Evaluation:
    """One run of ``agent`` of ``service``: a loop finding (failed), or clean (passed)."""
    findings = [Finding("loop", "repeated_tool_call", "error", "search x3")] if loops \
        else []
    return _evaluation(trace_id, agent, findings, passed=not loops, service=service)


def failing(trace_id: str, agent: str = "always-failing") -> Evaluation:
    """A trace of an agent that never passes (no verdict="passed" series for it)."""
    return _evaluation(trace_id, agent, [], passed=False)


def _loopy_findings(i: int) -> list[Finding]:
    out = []
    if i % 2 == 0:  # 50 % of traces loop
        out.append(Finding("loop", "repeated_tool_call", "error", "search x3"))
    if i % 10 in (1, 3, 5):  # 30 % never terminate
        out.append(Finding("non_termination", "halted", "error", "step cap"))
    if i % 5 == 0:  # 20 % overrun the token budget
        out.append(Finding("budget", "tokens_exceeded", "error", "over",
                           attributes={"budget": "tokens"}))
    kind = ("selection", "arguments", "runtime")[i % 3]
    out.append(Finding("tool_call", kind, "warning", "bad call",
                       attributes={"tool": "search"}))
    if i == 9:
        out.append(Finding("lucky_pass", "lucky_pass", "info", "passed despite errors"))
    return out


def feed_sessions(metrics: Metrics, agent: str, completed: int, failed: int = 0,
                  loops: int = 0, hangs: int = 0, turns: int = 4, round_no: int = 0) -> None:
    """Sessions of ``agent`` completed (``failed`` of them failed; ``loops`` / ``hangs`` with
    a session loop / non-termination finding) with ``turns`` turns each, as the session job
    reports a stored session record (``metrics.sessions.completed``); with ``round_no``, one
    of them completed again after a late turn, with a turn cut by ``max_turns``."""
    for i in range(completed):
        findings = []
        if i < loops:
            findings.append({"detector": "loop", "kind": "repeated_across_turns"})
        if i < hangs:
            findings.append({"detector": "non_termination", "kind": "pending_tool_call"})
        record = {"service": SERVICE, "agent": agent, "turns": turns,
                  "traces": [f"{round_no:08x}{i:08x}{t:016x}" for t in range(turns)],
                  "verdict": {"passed": i >= failed}, "findings": findings, "counts": {}}
        metrics.sessions.completed(record, again=False)
    if round_no:
        late = {"service": SERVICE, "agent": agent, "turns": turns + 1,
                "traces": [f"{round_no:08x}{'f' * 24}"], "verdict": {"passed": True},
                "findings": [], "counts": {"turns_cut": 1}, "cut_by": "max_turns"}
        metrics.sessions.completed(late, again=True)


def feed_session_store(metrics: Metrics, round_no: int) -> None:
    """The session job's check of the store: the open sessions, and the oldest completed
    early past ``max_open_sessions``."""
    metrics.sessions.open_sessions(100 + round_no % 5)
    metrics.sessions.evicted("max_open_sessions", 1 + round_no % 2)
    metrics.sessions.evicted("max_session_duration", 1)


def feed_round(metrics: Metrics, round_no: int, traces: int = 10) -> list[str]:
    """One round of traffic; returns the trace ids of every evaluation fed."""
    ids = []
    for i in range(traces):
        tid = f"{round_no:08x}{i:08x}{'1' * 16}"
        ids.append(tid)
        findings = _loopy_findings(i)
        loopy = _evaluation(tid, LOOPY, findings, passed=i == 9)
        # with a success predictor (serve --model): a prediction per trace, half of them
        # with a known outcome, so the rolling AUC has both classes after two rounds
        loopy.prediction = {"p_success": (i + 1) / (traces + 1), "model": "success@harness"}
        assert loopy.verdict is not None
        loopy.verdict.outcome = "success" if i % 2 else "failure"
        metrics.evaluation_stored(loopy, 0.4, False)
        # The clean agent never loops: its loop series never exists, its loop rate reads 0 %
        clean_id = f"{round_no:08x}{i:08x}{'2' * 16}"
        ids.append(clean_id)
        metrics.evaluation_stored(_evaluation(clean_id, CLEAN, [], passed=True), 0.2, False)
        unnamed_id = f"{round_no:08x}{i:08x}{'4' * 16}"
        ids.append(unnamed_id)
        metrics.evaluation_stored(_evaluation(unnamed_id, None, _loopy_findings(i), False,
                                              UNNAMED_SERVICE), 0.2, False)
    metrics.evaluation_stored(_evaluation(ids[0], LOOPY, [], passed=True), 0.3, True)
    spans = traces * 3 * 4
    metrics.ingest.spans_received("grpc", spans + 10)
    metrics.ingest.spans_accepted("grpc", spans)
    metrics.ingest.spans_rejected("grpc", "invalid_span_id", 10)
    metrics.ingest.request_throttled("grpc", "pending_spans")
    metrics.ingest.request_refused("http", "unauthenticated")
    metrics.ingest.request_refused("http", "malformed_request")  # not OTLP: spans unknown
    metrics.ingest.connection_closed("admin", "header_timeout")
    metrics.evaluation.skipped("already_evaluated")
    metrics.evaluation.spans_skipped("trace_too_large", 2)
    metrics.evaluation.store_write_failed("disk_full")
    metrics.evaluation.history_evicted("max_rows", 1 + round_no % 3)
    # the per-metric series cap is reached only past max_series_per_metric combinations
    # (tests/metrics/test_series_cap.py drives that); here the counter is fed as it would be
    metrics.traces.cap.c_series_overflow.labels("otel_eval_traces_completed").inc()
    metrics.ingest.export_duration("grpc", 0.004)
    metrics.ingest.open_traces(3 + round_no % 4)
    metrics.ingest.pending_spans(40 + round_no % 7)
    metrics.ingest.log_records("http", 6, {"not_genai_event": 2}, {"late": 1})
    metrics.ingest.pending_log_records(5 + round_no % 3)
    metrics.ingest.log_records_dropped("no_spans", 1)
    for _ in range(traces * 3):
        metrics.ingest.trace_released("complete", "root_ended", 4)
    metrics.ingest.trace_released("truncated", "overflow", 2)  # cut for room: OtelEvalRunsCut
    metrics.ingest.trace_reopened(1, 1)
    metrics.evaluation.failed("judge", "timeout")
    metrics.sinks.dropped("forward", "retries_exhausted", 2)
    metrics.sinks.forwarded(spans)
    metrics.sinks.events_emitted(traces * 3)
    metrics.spool.bound(1_000_000)
    # what GET /v1/calibration computes from the outcomes people recorded (evaluate.calibration)
    metrics.calibration.calibrated({"groups": [
        {"service": SERVICE, "agent": LOOPY, "score": score, "runs": 20 + round_no,
         "auc": 0.7, "kappa": 0.4} for score in ("trace", "p_success")]})
    # over 80 % of the bound in every round (OtelEvalSpoolFilling answers whichever round the
    # last scrape saw), and still moving
    metrics.spool.held(2 + round_no % 3, 850_000 + 50_000 * (round_no % 3))
    metrics.spool.replayed(spans if round_no == 0 else 0)
    metrics.spool.failed("append")
    metrics.spool.spans_rejected("invalid_link_id", 1 if round_no == 0 else 0)
    metrics.spool.log_records_rejected("invalid_timestamp", 1 if round_no == 0 else 0)
    metrics.workers.running(2)  # serve --workers 2: one restarted each round here
    for worker in (0, 1):
        metrics.workers.inflight(worker, (round_no + worker) % 5)
    metrics.workers.restarted(round_no % 2, 3)
    metrics.workers.hung(round_no % 2)  # the watchdog killed it (evaluation.worker_timeout_s)
    _feed_judge_and_kafka(metrics, round_no, traces)
    # conversations: the looping agent repeats calls across turns, the clean one never does
    feed_sessions(metrics, LOOPY, 2, failed=1, loops=1, hangs=1, turns=3 + round_no % 4,
                  round_no=round_no + 1)
    feed_sessions(metrics, CLEAN, 2)
    feed_session_store(metrics, round_no + 1)
    return ids


def _feed_judge_and_kafka(metrics: Metrics, round_no: int, traces: int) -> None:
    """What serve's judge stage and Kafka consumer/publishers report (same verbs)."""
    j, k = metrics.judge, metrics.kafka
    for i in range(traces):
        # a third of the calls fail: OtelEvalJudgeFailing holds
        j.call("combined", "ok" if i % 3 else "parse_error", 3000, 400, 0.0011, 2.5)
        for dim in ("trace", "outcome", "goal_alignment"):
            j.score("process" if dim == "goal_alignment" else dim, dim, (i % 5) / 5)
    j.usage_implausible("combined", 1)
    j.skip("sampled_out")
    j.skip("queue_full")
    j.queue_depth(round_no % 3)
    k.record_consumed(traces * 8)
    k.record_poison("not_otlp")
    k.throttled("pending_spans")
    k.paused(round_no % 2 == 1)
    for partition in range(3):
        k.lag(partition, 10 * partition + round_no)
        k.committed(partition, 100 * round_no + partition)
    k.commit_failed("RebalanceInProgressError")
    k.metadata_ignored("too_large")
    k.published("spans", traces)
    k.published("results", traces)
    k.publish_dropped("results", "queue_full", 1)


def _window(traces: int) -> list[dict[str, Any]]:
    return [_evaluation(f"{i:032x}", LOOPY, _loopy_findings(i), passed=False).to_json()
            for i in range(traces)]


def issues_job(metrics: Metrics, catalogue: Path, traces: int = 20) -> IssuesJob:
    """The issue clustering stage on the same registry (as serve runs it), run twice over the
    loop-heavy agent's findings: the first run finds the issues, the second gives trends."""
    window = _window(traces)
    job = IssuesJob(IssuesConfig(), str(catalogue), lambda since_ns: Window(window, False),
                    metrics.registry)
    now = time.time()
    for at in (now - 60, now):
        assert job.run_once(at) is not None
    return job


def restarted_issues_job(metrics: Metrics, catalogue: Path, traces: int = 20) -> IssuesJob:
    """``issues_job``'s stage in the next otel-eval process: its first run, at start, over the
    same stored window and catalogue."""
    window = _window(traces)
    job = IssuesJob(IssuesConfig(), str(catalogue), lambda since_ns: Window(window, False),
                    metrics.registry)
    assert job.run_once(time.time()) is not None
    return job
