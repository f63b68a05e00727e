"""A clean stop judges nothing that has not ended (issue 30), in process; time by hand.

``shutdown`` evaluates what was released and the runs that ended; a run still going stays in
the spool, with no evaluation, metric or sink call. The next engine on the same store and
spool resumes it with the times its spans were received at: finished, it is evaluated once,
whole; never finished, it is reported once, ``idle_timeout_s`` after the restart (the time
otel-eval was down is no silence of the run's, nor time it was seen open). A span that comes
after the restart for a run stored before it is late: the stored run stands. What pass-through
could not deliver before a stop or a crash goes out after the restart, stamped as stored. The
same through ``otel-eval serve`` and SIGTERM: tests/load/test_sigterm.py.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry
from support.otlp_capture import Capture

from otel_eval.app.config import Config, replace
from otel_eval.assemble.engine import Engine
from otel_eval.assemble.spool import Spool
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.base.model import LogEvent, Span, Trace
from otel_eval.base.results import Evaluation
from otel_eval.decode import otlp
from otel_eval.decode.encode import encode_spans
from otel_eval.decode.otlp import attributes_to_dict
from otel_eval.decode.otlp_logs import encode_logs
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.stage import InProcess
from otel_eval.outputs.config import ExportConfig
from otel_eval.outputs.events import EvaluationEvents
from otel_eval.outputs.forward import Forwarder
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics

T = "5a" * 16
DONE = "6b" * 16  # a run that ended before the stop
GRACE, IDLE = 5.0, 60.0
WALL0 = 1_800_000_000.0  # wall-clock seconds when the first process received the spans


def _span(trace: str, i: int, parent: int | None, op: str, start: int, end: int,
          **attrs: Any) -> Span:
    return Span(trace, f"{i:016x}", f"{parent:016x}" if parent else None, f"{op} {i}",
                start, end, attributes={"gen_ai.operation.name": op, **attrs})


def run(trace: str, end: int) -> list[Span]:
    """A root agent span (ending at ``end``; 0: not ended) over 4 model calls and 4 tool
    calls, in the order an exporter sends them (children first, the root last)."""
    spans = []
    for k in range(4):
        spans.append(_span(trace, 10 + k, 1, "chat", 10 + 10 * k, 14 + 10 * k))
        spans.append(_span(trace, 20 + k, 1, "execute_tool", 15 + 10 * k, 18 + 10 * k,
                           **{"gen_ai.tool.name": f"tool{k}"}))
    return [*spans, _span(trace, 1, None, "invoke_agent", 1, end,
                          **{"gen_ai.agent.name": "planner"})]


class Recording:
    """A sink: what reached events, forward, judge."""

    def __init__(self) -> None:
        self.exported: list[str] = []

    def export(self, trace: Trace, evaluation: Evaluation) -> None:
        self.exported.append(trace.trace_id)

    def pass_on(self, trace: Trace) -> None:
        self.exported.append(trace.trace_id)


class Process:
    """One serve's engine on the store and spool in ``tmp``; its clocks by hand."""

    def __init__(self, tmp: Path, wall: float, sinks: list[Any] | None = None,
                 **assembly: float) -> None:
        self.now = 1000.0  # the engine's monotonic clock starts anywhere
        self.wall = wall
        self.metrics = Metrics(CollectorRegistry())
        cfg = replace(Config(), **{"assembly.grace_s": GRACE, "assembly.idle_timeout_s": IDLE,
                                   **{f"assembly.{k}": v for k, v in assembly.items()}})
        self.store = Store(str(tmp / "store.db"))
        self.spool = Spool(str(tmp / "store.db-spool"), 1 << 30, self.metrics.spool,
                           wall=lambda: self.wall).open()
        self.sink = Recording()
        self.engine = Engine(InProcess(Evaluator(cfg), self.store),
                             StoreHealth(self.store.location, clock=lambda: self.now),
                             self.metrics, assembly=cfg.assembly,
                             clock=lambda: self.now, spool=self.spool,
                             sinks=[self.sink, *(sinks or [])],
                             stored=self.store.get_stamped)
        self.engine.replay()

    def send(self, spans: list[Span]) -> None:
        adm = self.engine.submit(spans, request=encode_spans(spans).SerializeToString())
        assert adm.throttled is None and adm.accepted == len(spans)

    def advance(self, seconds: float) -> int:
        """Both clocks on by ``seconds``; the traces evaluated then."""
        self.now += seconds
        self.wall += seconds
        self.engine.tick()
        return self.engine.process()

    def stop(self) -> dict[str, dict[str, Any]]:
        """Shut down as serve does on SIGTERM; what the store holds then."""
        self.engine.shutdown(5.0)
        stored = self.stored()
        self.store.close()
        self.spool.close()
        return stored

    def stored(self) -> dict[str, dict[str, Any]]:
        return {e["trace_id"]: e for e in self.store.latest(100)}

    def sample(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0

    def total(self, name: str) -> float:
        """A counter's sum over all its label values."""
        return sum(s.value for m in self.metrics.registry.collect() for s in m.samples
                   if s.name == name)


def test_a_stop_leaves_a_run_in_flight_unjudged_and_the_restart_evaluates_it_whole(
        tmp_path: Path) -> None:
    first = Process(tmp_path, WALL0)
    whole = run(T, end=100)
    first.send(whole[:5])  # half the run: 3 model calls and 2 tool calls so far
    first.send(run(DONE, end=90))  # ended, still in its grace period
    first.advance(1.0)
    # the ended run is evaluated at the stop; the run in flight is not judged at all
    assert set(first.stop()) == {DONE}
    assert first.sink.exported == [DONE]
    assert first.sample("otel_eval_assembly_traces_released_total",
                        status="complete", reason="shutdown") == 1
    assert first.sample("otel_eval_assembly_traces_released_total",
                        status="incomplete", reason="shutdown") == 0
    assert first.total("otel_eval_traces_non_terminated_total") == 0
    assert first.spool.held()[0] == 1  # its request: kept for the next start

    second = Process(tmp_path, WALL0 + 30.0)  # restarted 30 s later
    assert second.engine.open_traces() == 1
    assert second.advance(1.0) == 0  # idle 31 s of 60: still waiting for the rest
    second.send(whole[5:])
    assert second.advance(GRACE) == 1
    ev = second.stored()[T]
    assert ev["counts"] == {"spans": 9, "steps": 4, "llm_calls": 4, "tool_calls": 4,
                           "errors": 0}
    assert ev["status"] == "complete" and ev["revision"] == 0
    assert [f["detector"] for f in ev["findings"]] == []
    assert second.sink.exported == [T]
    assert second.total("otel_eval_traces_superseded_total") == 0
    assert second.total("otel_eval_traces_non_terminated_total") == 0
    assert second.spool.held() == (0, 0)
    second.stop()


def test_a_run_that_never_ends_is_reported_once_idle_timeout_after_the_restart(
        tmp_path: Path) -> None:
    """While otel-eval was down nothing could arrive: that silence is not the run's, so its
    idle clock restarts with the process, and a run that truly hangs is reported once,
    ``idle_timeout_s`` after the restart (later than it would have been, never falsely)."""
    first = Process(tmp_path, WALL0)
    first.send(run(T, end=100)[:5])
    first.advance(10.0)  # stopped 10 s after its last span
    assert first.stop() == {}

    second = Process(tmp_path, WALL0 + 20.0)  # restarted 20 s after that span
    assert second.advance(IDLE - 1.0) == 0
    assert second.advance(1.0) == 1
    ev = second.stored()[T]
    assert ev["status"] == "incomplete" and ev["counts"]["spans"] == 5
    assert [(f["detector"], f["kind"]) for f in ev["findings"]
            if f["detector"] == "non_termination"] == [("non_termination", "incomplete")]
    assert second.total("otel_eval_traces_non_terminated_total") == 1
    assert second.advance(IDLE * 2) == 0  # once
    second.stop()

    third = Process(tmp_path, WALL0 + 500.0)  # nothing left to resume
    assert third.engine.open_traces() == 0 and third.stored()[T]["revision"] == 0
    third.stop()


def test_a_stop_longer_than_the_idle_timeout_is_no_non_termination(tmp_path: Path) -> None:
    """Down for longer than ``idle_timeout_s`` while the agent went on (its collector queued
    the rest of the run). Before, the first tick released the run ``incomplete``, counted it
    non-terminated (the paging alert's metric) and then stored the whole run over it."""
    first = Process(tmp_path, WALL0)
    spans = run(T, end=100)
    first.send(spans[:5])
    first.stop()
    second = Process(tmp_path, WALL0 + IDLE * 5)
    assert second.advance(0.0) == 0  # the run waits for the rest
    second.send(spans[5:])  # the collector's retries deliver it
    assert second.advance(GRACE) == 1
    ev = second.stored()[T]
    assert (ev["status"], ev["revision"], ev["counts"]["spans"]) == ("complete", 0, 9)
    assert second.total("otel_eval_traces_non_terminated_total") == 0
    second.stop()


def test_a_stop_past_the_maximum_duration_is_no_truncation(tmp_path: Path) -> None:
    """A run 80 s into its 100 s maximum at the stop, down 60 s: before, the first tick after
    the replay cut it ``truncated`` (a non-termination, the paging alert's metric) although
    its root had ended meanwhile and waited in the sender's queue. It now gets
    ``idle_timeout_s`` after the restart for the rest, and is cut then if nothing comes."""
    for rest_comes in (True, False):
        first = Process(tmp_path / str(rest_comes), WALL0, max_trace_duration_s=100.0)
        spans = run(T, end=100)
        first.send(spans[:4])
        first.advance(50.0)
        first.send(spans[4:5])
        first.advance(30.0)
        assert first.stop() == {}
        second = Process(tmp_path / str(rest_comes), WALL0 + 140.0, max_trace_duration_s=100.0)
        assert second.advance(0.0) == 0 and second.advance(IDLE - 1.0) == 0
        if rest_comes:
            second.send(spans[5:])
            assert second.advance(GRACE) == 1
            ev = second.stored()[T]
            assert (ev["status"], ev["counts"]["spans"]) == ("complete", 9)
            assert second.total("otel_eval_traces_non_terminated_total") == 0
        else:
            assert second.advance(1.0) == 1
            assert second.stored()[T]["status"] == "truncated"
            assert second.sample("otel_eval_assembly_traces_released_total",
                                 status="truncated", reason="max_duration") == 1
        second.stop()


def test_a_span_after_the_restart_for_a_stored_run_is_late_and_the_run_stands(
        tmp_path: Path) -> None:
    """Assembly remembers released runs in memory (a late span re-opens one whole, or is
    refused as ``late``); a restart forgets them. Before, a straggler arriving after the
    restart opened a new one-span trace whose evaluation (``incomplete``, a non-termination)
    replaced the whole stored run. The store now stands in for that memory."""
    first = Process(tmp_path, WALL0)
    first.send(run(T, end=100))
    assert first.advance(GRACE) == 1
    assert first.stop()[T]["counts"]["spans"] == 9

    second = Process(tmp_path, WALL0 + 30.0)
    second.send([_span(T, 40, 1, "chat", 60, 70)])  # a straggler of the stored run
    assert second.advance(IDLE) == 1
    ev = second.stored()[T]
    assert (ev["status"], ev["revision"], ev["counts"]["spans"]) == ("complete", 0, 9)
    assert second.sample("otel_eval_evaluation_skipped_total", reason="late") == 1
    assert second.total("otel_eval_traces_superseded_total") == 0
    assert second.total("otel_eval_traces_non_terminated_total") == 0
    assert second.sink.exported == [T]  # its span passes on, unstamped
    assert second.spool.held() == (0, 0)
    # a second straggler re-opens what the first one opened: still late (it re-opened a
    # revision skipped as late; before, revision 1 was evaluated and its 2 spans replaced
    # the stored run)
    second.send([_span(T, 41, 1, "chat", 70, 80)])
    assert second.advance(IDLE) == 1
    assert second.stored()[T]["counts"]["spans"] == 9
    assert second.sample("otel_eval_evaluation_skipped_total", reason="late") == 2
    assert second.total("otel_eval_traces_superseded_total") == 0
    # a run the store does not hold still starts here as usual, and a late span of it
    # re-opens it whole as before
    second.send(run(DONE, end=90))
    assert second.advance(GRACE) == 1 and DONE in second.stored()
    second.send([_span(DONE, 42, 1, "chat", 91, 92)])
    assert second.advance(GRACE) == 1
    assert second.stored()[DONE]["revision"] == 1
    second.stop()


@pytest.mark.parametrize("crash", [False, True])
def test_a_straggler_left_open_by_a_second_stop_is_still_late_after_the_next_restart(
        tmp_path: Path, crash: bool) -> None:
    """A straggler of a stored run reaches the restarted serve (late if stored), which stops
    (or is killed) before the straggler's idle timeout: it stays open, in the spool. Before,
    the next start's replay made it a resumed run, no longer late: evaluated as a one-span
    fragment that replaced the whole stored run (superseded). It is late there too now; a
    run re-opened by late spans and left open by a stop still resumes whole and supersedes."""
    first = Process(tmp_path, WALL0)
    first.send(run(T, end=100))
    assert first.advance(GRACE) == 1
    first.send(run(DONE, end=90))
    assert first.advance(GRACE) == 1
    first.send([_span(DONE, 41, 77, "chat", 91, 92)])  # re-opens DONE; its parent is absent
    first.advance(1.0)
    assert first.stop()[T]["counts"]["spans"] == 9

    second = Process(tmp_path, WALL0 + 30.0)
    assert second.advance(1.0) == 1  # the re-opened run resumed whole: it supersedes
    assert second.stored()[DONE]["counts"]["spans"] == 10
    assert second.total("otel_eval_traces_superseded_total") == 1
    second.send([_span(T, 40, 77, "chat", 60, 70)])  # a straggler of the stored run
    second.advance(1.0)
    if crash:  # the files as a kill -9 leaves them
        second.store.close()
        second.spool.close()
    else:
        second.stop()

    third = Process(tmp_path, WALL0 + 60.0)
    assert third.engine.open_traces() == 1
    assert third.advance(IDLE) == 1
    ev = third.stored()[T]
    assert (ev["status"], ev["revision"], ev["counts"]["spans"]) == ("complete", 0, 9)
    assert third.sample("otel_eval_evaluation_skipped_total", reason="late") == 1
    assert third.total("otel_eval_traces_superseded_total") == 0
    assert third.total("otel_eval_traces_non_terminated_total") == 0
    assert third.spool.held() == (0, 0)
    third.stop()


def test_a_straggler_an_earlier_version_left_in_the_spool_stays_late_after_the_upgrade(
        tmp_path: Path) -> None:
    """An upgrade keeps the spool: a version-2 spool (written before pairs said whether they
    carry a stored revision's spans) holding a straggler of a stored run, left open by the
    earlier version's stop. Before, every pair of such a spool was taken as carried: the
    straggler resumed as a whole run, was evaluated as a one-span fragment (``incomplete``)
    and replaced the stored run, the fault the ``carried`` column was added to stop. A pair
    not known to carry a stored revision is now a straggler's: late if its run is stored."""
    first = Process(tmp_path, WALL0)
    first.send(run(T, end=100))
    assert first.advance(GRACE) == 1
    first.stop()
    second = Process(tmp_path, WALL0 + 30.0)
    second.send([_span(T, 40, 1, "chat", 60, 70)])  # a straggler of the stored run
    second.advance(1.0)
    second.stop()
    with sqlite3.connect(tmp_path / "store.db-spool") as db:  # as the earlier version left it
        db.execute("ALTER TABLE spool_traces DROP COLUMN cut")
        db.execute("ALTER TABLE spool_traces DROP COLUMN foreign_sender")
        db.execute("ALTER TABLE spool_traces DROP COLUMN carried")
        db.execute("PRAGMA user_version = 2")
    db.close()

    third = Process(tmp_path, WALL0 + 60.0)
    assert third.engine.open_traces() == 1
    assert third.advance(IDLE) == 1
    ev = third.stored()[T]
    assert (ev["status"], ev["revision"], ev["counts"]["spans"]) == ("complete", 0, 9)
    assert third.sample("otel_eval_evaluation_skipped_total", reason="late") == 1
    assert third.total("otel_eval_traces_superseded_total") == 0
    assert third.total("otel_eval_traces_non_terminated_total") == 0
    assert third.spool.held() == (0, 0)
    third.stop()


def _delivering(ds: Capture, metrics: Metrics, events: Capture | None = None) -> list[Any]:
    """Pass-through and the evaluation events to ``ds`` (the events to ``events`` if given),
    started; retries for a minute: only the stop ends them."""
    cfg = ExportConfig(forward_endpoint=f"127.0.0.1:{ds.port}",
                       events_endpoint=f"127.0.0.1:{(events or ds).port}", max_retry_s=60.0,
                       initial_backoff_s=0.01, max_backoff_s=0.05)
    sinks = [Forwarder(cfg, metrics), EvaluationEvents(cfg, metrics)]
    for sink in sinks:
        sink.start()
    return sinks


def _stored_while_away(tmp: Path, ds: Capture) -> tuple[Process, list[Any]]:
    """A process that stored run ``T`` while ``ds`` refuses everything; its delivering sinks."""
    ds.fail_next = [grpc.StatusCode.UNAVAILABLE] * 10_000
    sinks = _delivering(ds, Metrics(CollectorRegistry()))
    first = Process(tmp, WALL0, sinks=sinks)
    first.send(run(T, end=100))
    assert first.advance(GRACE) == 1
    return first, sinks


def _stop(sinks: list[Any], deadline_s: float) -> None:
    """The sinks stopped, their sender threads ended: a process that stops ends its threads,
    and these share the test's process (on a loaded machine a sender past its deadline could
    still deliver after the next "process" began, seen once in CI)."""
    for sink in sinks:
        sink.shutdown(deadline_s)
    for sink in sinks:
        thread = sink._sender._thread
        if thread is not None:
            thread.join(30)
            assert not thread.is_alive()


def _verdicts(ds: Capture) -> list[dict[str, Any]]:
    """The attributes of every verdict event downstream received."""
    return [a for req in ds.logs for rl in req.resource_logs for sl in rl.scope_logs
            for r in sl.log_records
            if (a := attributes_to_dict(r.attributes)).get("gen_ai.evaluation.name")
            == "otel_eval.verdict"]


def _forwarded_each(ds: Capture) -> list[tuple[str, dict[str, Any]]]:
    """(span id, attributes) of every span downstream received, each time it did."""
    return [(s.span_id.hex(), attributes_to_dict(s.attributes)) for req in ds.traces
            for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]


def _forwarded(ds: Capture) -> dict[str, dict[str, Any]]:
    """span id -> attributes, of every span downstream received."""
    return {s.span_id.hex(): attributes_to_dict(s.attributes) for req in ds.traces
            for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans}


@pytest.mark.parametrize("crash", [False, True])
def test_what_pass_through_could_not_deliver_goes_out_after_the_restart(
        tmp_path: Path, crash: bool) -> None:
    """The downstream collector is away when a run is stored; then otel-eval stops (the
    forward and events queues' flush fails: dropped ``shutdown``) or crashes (the queues are
    memory). Before, the spool had deleted the run at the store's commit, so the user's spans
    and the run's events were lost downstream. Now the spool keeps it until delivered; the
    restart replays it, finds it evaluated (not evaluated or counted again) and sends it
    again with the evaluation stored: spans stamped, the verdict event."""
    with Capture() as down:
        first, sinks = _stored_while_away(tmp_path, down)
        stored = first.stored()[T]
        if crash:  # nothing flushed, nothing deleted: the files as a kill -9 leaves them
            first.store.close()
            first.spool.close()
        else:
            first.stop()
        _stop(sinks, 0.2)
        assert down.traces == [] and down.logs == [] and down.failed
        assert first.spool.held()[0] == 1  # the run's request: kept for the next start
        down.fail_next = []

        sinks = _delivering(down, Metrics(CollectorRegistry()))
        second = Process(tmp_path, WALL0 + 30.0, sinks=sinks)
        assert second.advance(GRACE) == 1
        _stop(sinks, 5.0)
        [verdict] = _verdicts(down)
        assert verdict["gen_ai.evaluation.score.label"] == (
            "pass" if stored["verdict"]["passed"] else "fail")
        spans = _forwarded(down)
        assert set(spans) == {sp.span_id for sp in run(T, end=100)}
        root = spans[f"{1:016x}"]
        assert root["otel_eval.verdict"] == ("pass" if stored["verdict"]["passed"] else "fail")
        assert root["otel_eval.verdict.reasons"] == stored["verdict"]["reasons"]
        assert root["otel_eval.finding_count"] == len(stored["findings"])
        assert second.sample("otel_eval_evaluation_skipped_total",
                             reason="already_evaluated") == 1
        assert second.sink.exported == []  # no second evaluation, event or judge call
        assert second.stored()[T] == stored
        assert second.spool.held() == (0, 0)  # delivered: the spool lets it go
        second.stop()


def test_a_reopened_run_replayed_after_a_crash_counts_no_span_refused(tmp_path: Path) -> None:
    """A late span re-opens a stored run, then a kill -9 before the re-open is released. The
    re-open re-spools what the run held; that copy also held the late span, spooled already
    in its own request, so the replay counted it refused by assembly
    (``spool_spans_rejected_total{reason="duplicate_span"}``, logged as "not evaluated")
    while it was evaluated: a drop that never was. Now the re-spooled copy holds only what
    the run held before the request: the replay refuses nothing and evaluates all 10."""
    first = Process(tmp_path, WALL0)
    first.send(run(T, end=100))
    assert first.advance(GRACE) == 1
    first.send([_span(T, 40, 1, "chat", 60, 70)])  # re-opens the run
    first.store.close()  # a kill -9
    first.spool.close()

    second = Process(tmp_path, WALL0 + 1.0)
    assert second.advance(GRACE) == 1
    assert second.stored()[T]["counts"]["spans"] == 10
    assert second.total("otel_eval_spool_spans_rejected_total") == 0
    assert second.total("otel_eval_spool_spans_replayed_total") == 10
    second.stop()


def test_a_replayed_reopened_run_is_stamped_with_the_revision_stored(tmp_path: Path) -> None:
    """A run re-opened by a late span (revision 1) is stored while the downstream is away,
    then otel-eval stops. The restart's assembler starts every trace at revision 0; before,
    what it sent again from the stored evaluation said ``otel_eval.trace.revision`` 0 (spans
    and events) next to revision 1's findings, so downstream could not tell the up-to-date
    copy. Now the stamps are the stored evaluation's: revision and status as stored."""
    with Capture() as down:
        first, sinks = _stored_while_away(tmp_path, down)
        first.send([_span(T, 40, 1, "chat", 60, 70)])  # a late span re-opens the run
        assert first.advance(GRACE) == 1
        stored = first.stop()[T]
        assert stored["revision"] == 1
        _stop(sinks, 0.2)
        down.fail_next = []

        sinks = _delivering(down, Metrics(CollectorRegistry()))
        second = Process(tmp_path, WALL0 + 30.0, sinks=sinks)
        assert second.advance(GRACE) == 1
        _stop(sinks, 5.0)
        assert second.sample("otel_eval_evaluation_skipped_total",
                             reason="already_evaluated") == 1
        root = _forwarded(down)[f"{1:016x}"]
        assert (root["otel_eval.trace.revision"], root["otel_eval.trace.status"]) == (
            1, stored["status"])
        assert [v["otel_eval.trace.revision"] for v in _verdicts(down)] == [1]
        second.stop()


def test_events_sent_again_after_the_restart_are_timed_at_the_evaluation(
        tmp_path: Path) -> None:
    """A gen_ai.evaluation.result event is timed when the evaluation happened (the logs data
    model's Timestamp: when the event occurred), as the first send times it. The findings
    and verdict of a run stored while the collector was away, sent again by the restart from
    the stored evaluation, carried the time of that sending instead: after the restart."""
    with Capture() as down:
        first, sinks = _stored_while_away(tmp_path, down)
        stamp = first.store.stamp(T)
        assert stamp is not None
        first.stop()
        _stop(sinks, 0.2)
        down.fail_next = []

        sinks = _delivering(down, Metrics(CollectorRegistry()))
        second = Process(tmp_path, WALL0 + 30.0, sinks=sinks)
        assert second.advance(GRACE) == 1
        _stop(sinks, 5.0)
        second.stop()
    times = {(r.time_unix_nano, r.observed_time_unix_nano) for req in down.logs
             for rl in req.resource_logs for sl in rl.scope_logs for r in sl.log_records}
    assert _verdicts(down) and times == {(stamp[1], stamp[1])}


def test_with_pass_through_a_span_past_the_reopen_window_is_passed_on_not_swallowed(
        tmp_path: Path) -> None:
    """A straggler of a run released longer than ``reopen_window_s`` ago. Assembly refused it
    as ``late`` (partial success), so with otel-eval in the trace path the backend never got
    the user's span, while the same span after a restart was passed on. With pass-through on
    it is now taken as after a restart: acknowledged, not evaluated (the stored run stands),
    skipped ``late`` and forwarded unstamped."""
    with Capture() as down:
        sinks = _delivering(down, Metrics(CollectorRegistry()))
        p = Process(tmp_path, WALL0, sinks=sinks, reopen_window_s=60.0)
        p.send(run(T, end=100))
        assert p.advance(GRACE) == 1
        p.advance(61.0)
        p.send(run(DONE, end=90))  # another release: T is past its window, a tombstone
        assert p.advance(GRACE) == 1
        straggler = _span(T, 40, 1, "chat", 60, 70)
        adm = p.engine.submit([straggler],
                              request=encode_spans([straggler]).SerializeToString())
        assert (adm.accepted, dict(adm.rejected)) == (1, {})
        assert p.advance(IDLE) == 1
        _stop(sinks, 5.0)
        assert p.stored()[T]["counts"]["spans"] == 9 and p.stored()[T]["revision"] == 0
        assert p.sample("otel_eval_evaluation_skipped_total", reason="late") == 1
        forwarded = [s for req in down.traces for rs in req.resource_spans
                     for ss in rs.scope_spans for s in ss.spans
                     if s.span_id.hex() == straggler.span_id]
        assert len(forwarded) == 1
        assert not any(kv.key.startswith("otel_eval.") for kv in forwarded[0].attributes)
        assert p.spool.held() == (0, 0)
        p.stop()


def test_with_pass_through_spans_past_max_spans_per_trace_are_passed_on_not_swallowed(
        tmp_path: Path) -> None:
    """A run larger than ``assembly.max_spans_per_trace``. Assembly refused the spans past the
    limit as ``trace_too_large`` (partial success), so with otel-eval in the trace path the
    backend never got them: otel-eval could not evaluate them, and swallowed them. With
    pass-through on they are taken (acknowledged, spooled, pending), released with the run,
    not evaluated (counted as skipped spans) and forwarded unstamped beside the run's own,
    stamped spans."""
    with Capture() as down:
        sinks = _delivering(down, Metrics(CollectorRegistry()))
        p = Process(tmp_path, WALL0, sinks=sinks, max_spans_per_trace=5)
        whole = run(T, end=100)
        spans = [whole[-1], *whole[:-1]]  # the root first: it and 4 children are evaluated
        adm = p.engine.submit(spans, request=encode_spans(spans).SerializeToString())
        assert (adm.accepted, dict(adm.rejected)) == (9, {})
        assert p.sample("otel_eval_assembly_pending_spans") == 9
        assert p.advance(GRACE) == 1
        _stop(sinks, 5.0)
        assert p.stored()[T]["counts"]["spans"] == 5
        assert p.sample("otel_eval_evaluation_spans_skipped_total",
                        reason="trace_too_large") == 4
        assert p.sample("otel_eval_assembly_spans_released_total") == 9
        assert p.sample("otel_eval_assembly_pending_spans") == 0
        forwarded = _forwarded(down)
        assert set(forwarded) == {s.span_id for s in spans}
        passed = {s.span_id for s in spans[5:]}
        for sid, attrs in forwarded.items():
            own = {k: v for k, v in attrs.items() if not k.startswith("otel_eval.")}
            assert own == next(s.attributes for s in spans if s.span_id == sid)
            if sid in passed:
                assert own == attrs  # unstamped
        assert "otel_eval.verdict" in forwarded[spans[0].span_id]
        assert p.spool.held() == (0, 0)
        p.stop()


def test_with_pass_through_a_foreign_senders_span_is_passed_on_not_evaluated(
        tmp_path: Path) -> None:
    """A sender other than the one that opened a released run (a second service of the same
    distributed trace, its spans coming after the run's grace) may not add to it. With
    pass-through its span is taken (acknowledged), passed on unstamped and never evaluated
    (counted as a skipped span, ``foreign_sender``): the stored run stands, further spans of
    that sender are passed on too and its records refused. Pass-through is invisible: the
    backend gets the run's 9 spans once (stamped), the 2 passed on once (unstamped) and one
    verdict event; before, the re-open went to the delivering sinks again with the run
    (``already_evaluated``): the run's spans and its events a second time. The run's own
    sender still re-opens it: evaluated again and forwarded again whole, as documented."""
    with Capture() as down:
        sinks = _delivering(down, Metrics(CollectorRegistry()))
        p = Process(tmp_path, WALL0, sinks=sinks)
        spans = run(T, end=100)
        p.engine.submit(spans, request=encode_spans(spans).SerializeToString(),
                        sender="agents")
        assert p.advance(GRACE) == 1
        stored = p.stored()[T]
        tools = [_span(T, 40, 1, "execute_tool", 60, 70), _span(T, 41, 1, "chat", 60, 70)]
        for one in tools:
            adm = p.engine.submit([one], request=encode_spans([one]).SerializeToString(),
                                  sender="tools")
            assert (adm.accepted, dict(adm.rejected)) == (1, {})
        rec = LogEvent(T, tools[0].span_id, "gen_ai.choice", 65, {}, {"index": 0})
        adm = p.engine.submit([rec], signal="logs", sender="tools",
                              request=encode_logs([rec]).SerializeToString())
        assert (adm.accepted, dict(adm.rejected)) == (0, {"foreign_sender": 1})
        assert p.advance(GRACE) == 1
        _stop(sinks, 5.0)
        assert p.stored()[T] == stored  # not evaluated: the run its own sender sent stands
        assert p.sample("otel_eval_evaluation_spans_skipped_total",
                        reason="foreign_sender") == 2
        assert p.sample("otel_eval_evaluation_skipped_total", reason="already_evaluated") == 0
        # the release that only passed them on is counted for what it is, not as a trace
        # that holds no run (a create_agent span alone)
        assert p.sample("otel_eval_evaluation_skipped_total", reason="foreign_sender") == 1
        assert p.sample("otel_eval_evaluation_skipped_total", reason="not_a_run") == 0
        assert p.total("otel_eval_assembly_spans_reopened_total") == 0
        sent = _forwarded_each(down)
        assert sorted(sid for sid, _ in sent) == sorted(s.span_id for s in [*spans, *tools])
        forwarded = dict(sent)
        assert "otel_eval.verdict" in forwarded[f"{1:016x}"]  # the run's, stamped
        for one in tools:
            assert forwarded[one.span_id] == one.attributes  # unstamped, as sent
        assert len(_verdicts(down)) == 1
        assert p.spool.held() == (0, 0)
        late = _span(T, 42, 1, "chat", 60, 70)
        adm = p.engine.submit([late], request=encode_spans([late]).SerializeToString(),
                              sender="agents")
        assert (adm.accepted, adm.rejected.total()) == (1, 0)
        assert p.advance(GRACE) == 1  # its own sender's re-open: evaluated again, as before
        # (revision 2: what was passed on was released as revision 1, never stored)
        assert (p.stored()[T]["revision"], p.stored()[T]["counts"]["spans"]) == (2, 10)
        p.stop()


def test_a_foreign_senders_spans_replayed_after_a_crash_are_not_evaluated_into_the_run(
        tmp_path: Path) -> None:
    """Another sender's spans for a released run, taken to pass on (pass-through), and then
    a crash before they went out. Before, taking them re-spooled the run's own spans with
    them as a stored revision's (``carried``), so the restart's replay (which knows no
    sender) evaluated the other sender's spans into the run and stored that over it. Now the
    run is not re-opened for them: the replay holds only them, marked again as another
    sender's (their spool pairs say so), and passes them on unstamped; the stored run
    stands."""
    with Capture() as down:
        sinks = _delivering(down, Metrics(CollectorRegistry()))
        first = Process(tmp_path, WALL0, sinks=sinks)
        spans = run(T, end=100)
        first.engine.submit(spans, request=encode_spans(spans).SerializeToString(),
                            sender="agents")
        assert first.advance(GRACE) == 1
        stored = first.stored()[T]
        tools = [_span(T, 40, 1, "execute_tool", 60, 70), _span(T, 41, 1, "chat", 60, 70)]
        adm = first.engine.submit(tools, request=encode_spans(tools).SerializeToString(),
                                  sender="tools")
        assert (adm.accepted, dict(adm.rejected)) == (2, {})
        _stop(sinks, 5.0)  # the run went out; then a kill -9, the other spans still held
        first.store.close()
        first.spool.close()
        before = len(_forwarded_each(down))

        sinks = _delivering(down, Metrics(CollectorRegistry()))
        second = Process(tmp_path, WALL0 + 30.0, sinks=sinks)
        assert second.advance(IDLE) == 1
        _stop(sinks, 5.0)
        assert second.stored()[T] == stored
        assert second.total("otel_eval_traces_superseded_total") == 0
        assert second.sample("otel_eval_evaluation_skipped_total",
                             reason="foreign_sender") == 1
        again = _forwarded_each(down)[before:]
        assert again == [(one.span_id, one.attributes) for one in tools]  # unstamped
        assert second.spool.held() == (0, 0)
        second.stop()


def test_a_foreign_senders_spans_stay_passed_on_after_a_crash_once_the_run_reopened(
        tmp_path: Path) -> None:
    """Another sender's spans for a released run are taken to pass on (pass-through), then
    the run's own sender re-opens it with a late span, and the process is killed before the
    re-opened run is released. Live, the other sender's spans stay passed on, never part of
    the run (10 spans evaluated). The spool kept no sender per span, so the restart's
    replay (which knows no sender) evaluated them into the run (12 spans) and stamped them.
    Now their spool pairs say they were taken only to pass on: the restart evaluates the
    run as the live process would have, and passes them on unstamped."""
    with Capture() as down:
        sinks = _delivering(down, Metrics(CollectorRegistry()))
        first = Process(tmp_path, WALL0, sinks=sinks)
        spans = run(T, end=100)
        first.engine.submit(spans, request=encode_spans(spans).SerializeToString(),
                            sender="agents")
        assert first.advance(GRACE) == 1
        tools = [_span(T, 40, 1, "execute_tool", 60, 70), _span(T, 41, 1, "chat", 60, 70)]
        adm = first.engine.submit(tools, request=encode_spans(tools).SerializeToString(),
                                  sender="tools")
        assert (adm.accepted, dict(adm.rejected)) == (2, {})
        late = _span(T, 42, 1, "chat", 60, 70)
        adm = first.engine.submit([late], request=encode_spans([late]).SerializeToString(),
                                  sender="agents")
        assert (adm.accepted, adm.rejected.total()) == (1, 0)
        _stop(sinks, 5.0)  # the run went out; then a kill -9, its re-open still open
        first.store.close()
        first.spool.close()
        before = len(_forwarded_each(down))

        sinks = _delivering(down, Metrics(CollectorRegistry()))
        second = Process(tmp_path, WALL0 + 1.0, sinks=sinks)
        assert second.advance(GRACE) == 1
        _stop(sinks, 5.0)
        assert second.stored()[T]["counts"]["spans"] == 10  # the run and its late span
        assert second.sample("otel_eval_evaluation_spans_skipped_total",
                             reason="foreign_sender") == 2
        again = dict(_forwarded_each(down)[before:])
        assert sorted(again) == sorted(s.span_id for s in [*spans, late, *tools])
        for one in tools:
            assert again[one.span_id] == one.attributes  # unstamped, as sent
        assert second.spool.held() == (0, 0)
        second.stop()


def test_passing_another_senders_spans_on_keeps_the_run_until_its_events_are_delivered(
        tmp_path: Path) -> None:
    """The run's verdict event is still being retried (the events endpoint away) when another
    sender's spans for it are passed on and delivered. What they are released as (a revision
    after the run's, holding none of its spans) must let only its own spool rows go, not the
    trace's up to it (a later revision's rule: it holds the earlier ones): else a crash then
    leaves the restart nothing to send the run's events from. The run's rows stay until its
    events are delivered, and the restart sends them."""
    with Capture() as fwd, Capture() as ev:
        ev.fail_next = [grpc.StatusCode.UNAVAILABLE] * 10_000
        sinks = _delivering(fwd, Metrics(CollectorRegistry()), events=ev)
        p = Process(tmp_path, WALL0, sinks=sinks)
        spans = run(T, end=100)
        p.engine.submit(spans, request=encode_spans(spans).SerializeToString(),
                        sender="agents")
        assert p.advance(GRACE) == 1
        tool = _span(T, 40, 1, "execute_tool", 60, 70)
        adm = p.engine.submit([tool], request=encode_spans([tool]).SerializeToString(),
                              sender="tools")
        assert adm.accepted == 1
        assert p.advance(GRACE) == 1
        _stop(sinks[:1], 5.0)  # the spans went out; the events sink still retries
        assert tool.span_id in _forwarded(fwd)
        assert p.spool.held()[0] == 1  # the run's request, for its undelivered events
        p.store.close()  # a kill -9
        p.spool.close()
        _stop(sinks[1:], 0.2)
        assert _verdicts(ev) == []

        # the restart sends to an endpoint of its own: the killed process's exporter thread,
        # still retrying after its stop's timeout, keeps failing on ``ev`` (never delivered)
        with Capture() as ev_after:
            sinks = _delivering(fwd, Metrics(CollectorRegistry()), events=ev_after)
            second = Process(tmp_path, WALL0 + 30.0, sinks=sinks)
            assert second.advance(GRACE) == 1
            _stop(sinks, 5.0)
            assert len(_verdicts(ev_after)) == 1
            assert second.spool.held() == (0, 0)
            second.stop()


def test_a_replay_whose_stored_evaluation_cannot_be_read_goes_on_unstamped_and_counted(
        tmp_path: Path) -> None:
    """The restart finds the run evaluated but cannot read what the store holds: its spans
    still go on, as they came (no verdict made up), and the failure is counted."""
    with Capture() as down:
        first, sinks = _stored_while_away(tmp_path, down)
        first.store.close()
        first.spool.close()
        _stop(sinks, 0.2)
        down.fail_next = []

        def unreadable(trace_id: str) -> tuple[dict[str, Any], int] | None:
            raise OSError("disk I/O error")

        sinks = _delivering(down, Metrics(CollectorRegistry()))
        second = Process(tmp_path, WALL0 + 30.0, sinks=sinks)
        second.engine.finishing._stored = unreadable
        assert second.advance(GRACE) == 1
        _stop(sinks, 5.0)
        assert _verdicts(down) == []
        spans = _forwarded(down)
        assert set(spans) == {sp.span_id for sp in run(T, end=100)}
        assert not any(k.startswith("otel_eval.") for sp in spans.values() for k in sp)
        assert second.sample("otel_eval_evaluation_failures_total", stage="stored_read",
                             reason="OSError") == 1
        assert second.spool.held() == (0, 0)
        second.stop()


def test_a_waiter_that_fails_is_counted_and_the_trace_still_released(tmp_path: Path) -> None:
    """A waiter's bug (a Kafka offset commit) costs neither the sender's thread nor the
    spool's delete, and is counted."""
    p = Process(tmp_path, WALL0)
    p.send(run(T, end=100))
    p.now += GRACE
    p.wall += GRACE
    p.engine.tick()

    def broken() -> None:
        raise RuntimeError("a bug")

    with p.engine._lock:
        assert p.engine.finishing.wait_for([T], broken) == 1
    assert p.engine.process() == 1
    assert p.sample("otel_eval_evaluation_failures_total", stage="release",
                    reason="RuntimeError") == 1
    assert p.spool.held() == (0, 0)
    p.stop()


def test_a_trace_delivered_downstream_leaves_the_spool(tmp_path: Path) -> None:
    """Delivered: the spool deletes the run (one transaction per sender batch), and a
    restart has nothing to send again."""
    with Capture() as down:
        sinks = _delivering(down, Metrics(CollectorRegistry()))
        first = Process(tmp_path, WALL0, sinks=sinks)
        first.send(run(T, end=100))
        assert first.advance(GRACE) == 1
        _stop(sinks, 5.0)
        assert len(down.traces) == 1 and len(_verdicts(down)) == 1
        assert first.spool.held() == (0, 0)
        first.stop()
        second = Process(tmp_path, WALL0 + 30.0)
        assert second.engine.open_traces() == 0 and second.advance(GRACE) == 0
        second.stop()


def test_with_pass_through_a_span_with_times_otel_eval_cannot_evaluate_is_passed_on(
        tmp_path: Path) -> None:
    """A span longer than a year, or with no start (0), was refused at decode as
    ``invalid_timestamp``, pass-through or not, so with otel-eval in the trace path the
    backend never got it: its times are the user's data, which otel-eval only cannot
    evaluate. With pass-through it is taken (acknowledged, spooled, pending), released with
    its run, never evaluated (counted as a skipped span with the reason) and forwarded
    unstamped, alone in its trace too: a trace of such spans only is no run, never handed to
    the evaluation stage (a worker process is not given the spans passed on, and would
    store an empty run); the run is evaluated from its other spans."""
    other = "7c" * 16
    with Capture() as down:
        sinks = _delivering(down, Metrics(CollectorRegistry()))
        p = Process(tmp_path, WALL0, sinks=sinks)
        stage, handed = p.engine.finishing.stage, []
        run_stage = stage.run
        stage.run = lambda batch, done: (  # type: ignore[method-assign]
            handed.extend(j.trace.trace_id for j in batch), run_stage(batch, done))[1]
        year, now_ns = 400 * 86400 * 10**9, int(WALL0) * 10**9
        odd = [_span(T, 30, 1, "chat", 0, now_ns),  # no start
               _span(T, 31, 1, "execute_tool", 20, 20 + year),  # longer than a year
               _span(other, 32, None, "chat", 0, now_ns)]  # a trace of it alone
        sent = [*run(T, end=100), *odd]
        req = encode_spans(sent)
        decoded = otlp.decode_request(req)
        assert decoded.rejected == 0
        adm = p.engine.submit(decoded.spans, request=req.SerializeToString())
        assert (adm.accepted, dict(adm.rejected)) == (12, {})
        assert p.sample("otel_eval_assembly_pending_spans") == 12
        assert p.advance(IDLE) == 2
        _stop(sinks, 5.0)
        assert set(p.stored()) == {T} and p.stored()[T]["counts"]["spans"] == 9
        assert handed == [T]
        assert p.sample("otel_eval_evaluation_skipped_total", reason="not_a_run") == 1
        assert p.sample("otel_eval_evaluation_spans_skipped_total",
                        reason="invalid_timestamp") == 3
        assert p.sample("otel_eval_assembly_pending_spans") == 0
        forwarded = _forwarded(down)
        assert set(forwarded) == {s.span_id for s in sent}
        for s in odd:
            assert forwarded[s.span_id] == s.attributes  # unstamped
        assert "otel_eval.verdict" in forwarded[f"{1:016x}"]
        assert p.spool.held() == (0, 0)
        p.stop()


def test_without_pass_through_a_span_otel_eval_cannot_evaluate_is_refused(
        tmp_path: Path) -> None:
    """Without pass-through nothing changes: the span is refused as ``invalid_timestamp``."""
    p = Process(tmp_path, WALL0)
    spans = [*run(T, end=100), _span(T, 30, 1, "chat", 0, int(WALL0) * 10**9)]
    decoded = otlp.decode_request(encode_spans(spans))
    adm = p.engine.submit(decoded.spans)
    assert (adm.accepted, dict(adm.rejected)) == (9, {"invalid_timestamp": 1})
    assert p.advance(IDLE) == 1
    assert p.stored()[T]["counts"]["spans"] == 9
    p.stop()


@pytest.mark.parametrize("crash", [False, True])
def test_a_late_span_a_whole_stored_run_has_no_room_for_cuts_it_across_a_crash(
        tmp_path: Path, crash: bool) -> None:
    """A run of exactly ``assembly.max_spans_per_trace`` spans is stored ``complete``; a late
    span of it, within the reopen window, is refused (``trace_too_large``). Before, the
    stored verdict stayed ``complete``: a whole run, its late span lost. Now the run is
    re-opened and stored again ``truncated`` (revision 1, same spans: not skipped as
    already evaluated). After a kill -9 before that release the re-open is replayed (it is
    spooled): oldest request first, the late span before the run, whose root is then taken
    past the limit, so the run is read whole (all 10 spans). Never ``complete`` with a span
    of it lost; the spool is emptied."""
    first = Process(tmp_path, WALL0, max_spans_per_trace=9)
    first.send(run(T, end=100))
    assert first.advance(GRACE) == 1
    assert first.stored()[T]["status"] == "complete"
    late = [_span(T, 40, 1, "chat", 60, 70)]
    adm = first.engine.submit(late, request=encode_spans(late).SerializeToString())
    assert (adm.accepted, dict(adm.rejected)) == (0, {"trace_too_large": 1})
    p = first
    if crash:  # the files as a kill -9 leaves them
        first.store.close()
        first.spool.close()
        p = Process(tmp_path, WALL0 + 1.0, max_spans_per_trace=9)
    assert p.advance(GRACE) == 1
    ev = p.stored()[T]
    if crash:
        assert (ev["status"], ev["counts"]["spans"]) == ("complete", 10)
    else:
        assert (ev["status"], ev["revision"], ev["counts"]["spans"]) == ("truncated", 1, 9)
        assert any(f["kind"] == "spans_cut" for f in ev["findings"])
    assert p.spool.held() == (0, 0)
    p.stop()
