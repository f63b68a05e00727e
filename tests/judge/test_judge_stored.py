"""What the judge stores is bounded and never silently lost (issue 33, findings 7 and 9): a
judgement is cut to fit the stored result (a 10 MB critique gave a 20.9 MB body, limit
4 MiB), and the work a killed process held is marked skipped ``restart`` at the next start
and counted (kill -9 lost 190 of 393 judge jobs without a mark). A judgement's events the
process could not deliver go out after the restart, from the store."""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
from judge_fake_llm import FakeLLM, Reply, good
from judge_fixtures import combined_reply, config, evaluation
from prometheus_client import CollectorRegistry
from support.otlp_capture import Capture
from support.poll import poll

from otel_eval.base.aio import LoopThread
from otel_eval.base.model import Trace
from otel_eval.decode.otlp import attributes_to_dict
from otel_eval.evaluate.judge.fit import fit, size
from otel_eval.evaluate.judge.journal import PendingJournal
from otel_eval.evaluate.judge.stage import JudgeStage
from otel_eval.outputs.config import ExportConfig
from otel_eval.outputs.events import EvaluationEvents
from otel_eval.store import SqliteStore
from otel_eval.telemetry.metrics import Metrics

SHAPE = {"mode": "combined", "model": "m", "overall": {"status": "ok", "passed": True},
         "totals": {"calls": 1}}


def _judge(critique: str, n: int = 3) -> dict[str, Any]:
    entry = {"status": "ok", "scores": {"trace": 0.5},
             "critiques": [{"dimension": "trace", "score": 0.5, "text": critique}] * n}
    return {**SHAPE, "judges": {"trace": entry}}


def test_fit_cuts_each_text_then_the_whole_object_keeping_the_verdict() -> None:
    small = _judge("fine")
    assert fit(small, 10_000, 1024) is small  # nothing cut: the same object, no mark
    out = fit(_judge("é" * 50_000), 1_000_000, 1024)
    texts = [c["text"] for c in out["judges"]["trace"]["critiques"]]
    assert all(len(t.encode()) <= 1024 and t.endswith("…") for t in texts)
    assert out["truncated"]["texts_cut"] == 3 and out["truncated"]["dropped"] is None
    out = fit(_judge("x" * 5000, n=50), 2000, 1024)  # 50 texts of 64 bytes do not fit either
    assert size(out) <= 2000 and out["truncated"]["dropped"] == "details"
    assert out["judges"]["trace"]["scores"] == {"trace": 0.5}
    out = fit(_judge("x"), 10, 1024)  # no room at all: the verdict and totals stay
    assert {k: out[k] for k in SHAPE} == SHAPE and out["truncated"]["dropped"] == "judges"
    assert out["judges"] == {}


def _scripted(critique: str) -> Any:
    def route(body: dict[str, Any]) -> Reply:
        steps = re.search(r"steps ([\d, ]+)\.", body["messages"][-1]["content"])
        assert steps is not None
        reply = combined_reply([int(i) for i in steps.group(1).split(",")])
        reply["trace"]["critique"] = critique
        return good(reply)
    return route


def _wait_judged(store: SqliteStore, trace_id: str) -> dict[str, Any]:
    """Poll the row until its judge object is stored."""
    judge = poll(lambda: (store.get(trace_id) or {}).get("judge"),
                 f"trace {trace_id} to get a judge object", interval_s=0.02)
    return dict(judge)


def _journaled(stage: JudgeStage) -> None:
    poll(lambda: stage._journal is not None and stage._journal.pending(),
         "the queued trace to reach the journal", interval_s=0.02)


def test_a_huge_critique_is_stored_cut(llm: FakeLLM, tmp_path: Path) -> None:
    llm.route = _scripted("z" * 600_000)  # under max_reply_bytes (1 MiB), over a value's 16 KiB
    store = SqliteStore(str(tmp_path / "s.db")).open()
    ev = evaluation(trace_id="a1" * 16)
    store.put_many([ev])
    loop = LoopThread()
    loop.start()
    stage = JudgeStage(config(llm.api_base, combined=True), loop, store,
                       Metrics(CollectorRegistry()), cache_path=str(tmp_path / "s.db"))
    try:
        stage.start()
        stage.export(Trace(ev.trace_id, [], "complete"), ev)
        judge = _wait_judged(store, ev.trace_id)
        text = judge["judges"]["trace"]["critiques"][0]["text"]
        assert len(text) <= 16 * 1024 and text.startswith("zzz")
        assert judge["truncated"]["texts_cut"] == 1
        assert judge["judges"]["trace"]["scores"]["trace"] == 0.7
    finally:
        stage.shutdown(5.0)
        loop.stop()
        store.close()


def test_work_of_a_killed_process_is_marked_restart_and_counted(llm: FakeLLM,
                                                                tmp_path: Path) -> None:
    llm.route = lambda body: Reply(hang=True)  # the judge call never ends: then the "kill"
    path = str(tmp_path / "s.db")
    store = SqliteStore(path).open()
    ev = evaluation(trace_id="b2" * 16)
    store.put_many([ev])
    dead_loop, loop = LoopThread(), LoopThread()
    dead_loop.start()
    # its call hangs past the test (no timeout, no retry): nothing of it is ever stored
    dead = JudgeStage(config(llm.api_base, combined=True, timeout_s=600.0, max_retries=0),
                      dead_loop, store, Metrics(CollectorRegistry()), cache_path=path)
    registry = CollectorRegistry()
    restarted = JudgeStage(config(llm.api_base, combined=True), loop, store,
                           Metrics(registry), cache_path=path)
    try:
        dead.start()
        dead.export(Trace(ev.trace_id, [], "complete"), ev)
        assert llm.arrived.wait(30)  # queued and being judged when the process "dies",
        _journaled(dead)  # its journal entry written (the writer thread's, after the submit)
        loop.start()  # nothing of it is stored; a new process starts on the same files
        restarted.start()
        judge = _wait_judged(store, ev.trace_id)
        assert judge["overall"] == {"status": "skipped", "reason": "restart"}
        assert registry.get_sample_value("otel_eval_judge_skipped_total",
                                         {"reason": "restart"}) == 1.0
    finally:
        llm.released.set()
        restarted.shutdown(5.0)
        dead.shutdown(5.0)
        loop.stop()
        dead_loop.stop()
        store.close()


def test_a_run_the_replay_stored_anew_is_not_marked_restart(llm: FakeLLM,
                                                             tmp_path: Path) -> None:
    """The dead process queued revision 0 of a run for the judge and died; late spans had
    re-opened the run, so the restart's spool replay evaluates it whole and stores it anew,
    at revision 0 again, and queues it for this process's judge. The start's journal pass
    ran on the writer thread, not waited for: when the replay's row was stored before it
    read, it took the new evaluation for the dead one's, stored it skipped ``restart`` and
    counted it (the real judgement came over it later). An entry now names the evaluation
    it was queued for (its evaluation time): a row evaluated since is another's work."""
    llm.route = lambda body: Reply(hang=True)
    path = str(tmp_path / "s.db")
    store = SqliteStore(path).open()
    ev = evaluation(trace_id="e7" * 16)
    ev.evaluated_at_ns = 1_000
    store.put_many([ev])
    dead_loop, loop = LoopThread(), LoopThread()
    dead_loop.start()
    dead = JudgeStage(config(llm.api_base, combined=True, timeout_s=600.0, max_retries=0),
                      dead_loop, store, Metrics(CollectorRegistry()), cache_path=path)
    registry = CollectorRegistry()
    restarted = JudgeStage(config(llm.api_base, combined=True), loop, store,
                           Metrics(registry), cache_path=path)
    try:
        dead.start()
        dead.export(Trace(ev.trace_id, [], "complete"), ev)
        assert llm.arrived.wait(30)
        _journaled(dead)
        llm.route = _scripted("fine")  # the dead one's call still hangs
        replayed = evaluation(trace_id=ev.trace_id)  # the whole run, evaluated anew
        replayed.evaluated_at_ns = 2_000
        store.put_many([replayed])  # the replay's write, before the start's journal pass
        loop.start()
        restarted.start()
        restarted.export(Trace(ev.trace_id, [], "complete"), replayed)
        judge = _wait_judged(store, ev.trace_id)
        assert judge["overall"]["status"] == "ok", judge["overall"]
        assert (registry.get_sample_value("otel_eval_judge_skipped_total",
                                          {"reason": "restart"}) or 0.0) == 0.0
    finally:
        llm.released.set()
        restarted.shutdown(5.0)
        dead.shutdown(5.0)
        loop.stop()
        dead_loop.stop()
        store.close()


def test_a_judgement_is_not_stored_onto_another_workers_replay_of_the_run(
        llm: FakeLLM, tmp_path: Path) -> None:
    """This process judges its evaluation of a run; while the judge's call is under way,
    another worker of the fleet (a Kafka replay after a rebalance) evaluates the run again,
    at revision 0 too, and stores it. Before, the judgement matched the revision only and
    was stored onto the other worker's evaluation (whose own judge had not written yet); now
    it is written onto the evaluation it judged, or nowhere."""
    path = str(tmp_path / "s.db")
    store, worker = SqliteStore(path).open(), SqliteStore(path).open()
    ev = evaluation(trace_id="c3" * 16)
    ev.evaluated_at_ns = 1_000
    store.put_many([ev])
    replayed = evaluation(trace_id=ev.trace_id)
    replayed.evaluated_at_ns = 2_000

    def route(body: dict[str, Any]) -> Reply:  # the other worker stores, mid-call
        if worker.stamp(ev.trace_id) == (0, 1_000):
            worker.put_many([replayed])
        return _scripted("fine")(body)
    llm.route = route
    loop = LoopThread()
    loop.start()
    stage = JudgeStage(config(llm.api_base, combined=True), loop, store,
                       Metrics(CollectorRegistry()), cache_path=path)
    try:
        stage.start()
        stage.export(Trace(ev.trace_id, [], "complete"), ev)
        assert llm.arrived.wait(30)
    finally:
        stage.shutdown(10.0)  # the judgement, and its write, done
        loop.stop()
    try:
        assert worker.stamp(ev.trace_id) == (0, 2_000)
        stored = worker.get(ev.trace_id)
        assert stored is not None and "judge" not in stored
    finally:
        worker.close()
        store.close()


def _events(down: Capture) -> EvaluationEvents:
    cfg = ExportConfig(events_endpoint=f"127.0.0.1:{down.port}", max_retry_s=60.0,
                       initial_backoff_s=0.01, max_backoff_s=0.05)
    events = EvaluationEvents(cfg, Metrics(CollectorRegistry()))
    events.start()
    return events


def _grades(down: Capture) -> list[tuple[str, dict[str, Any]]]:
    """(span id, attributes) of the judge's records downstream received (they name the
    judge's model)."""
    return [(r.span_id.hex(), a) for req in down.logs for rl in req.resource_logs
            for sl in rl.scope_logs for r in sl.log_records
            if "otel_eval.judge.model" in (a := attributes_to_dict(r.attributes))]


@contextmanager
def _serving(llm: FakeLLM, store: SqliteStore, down: Capture,
             registry: CollectorRegistry | None = None,
             back_for_flush: bool = False) -> Iterator[JudgeStage]:
    """One process's judge stage and events sink to ``down``, stopped in serve's order: the
    stage, then the sink's flush (the collector back for it with ``back_for_flush``; a flush
    the collector still refuses drops the events for ``shutdown``)."""
    loop = LoopThread()
    loop.start()
    events = _events(down)
    stage = JudgeStage(config(llm.api_base, combined=True), loop, store,
                       Metrics(registry or CollectorRegistry()), events,
                       cache_path=store.location)
    try:
        stage.start()
        yield stage
    finally:
        stage.shutdown(5.0)
        if back_for_flush:
            down.fail_next = []
        events.shutdown(0.2 if down.fail_next else 5.0)
        loop.stop()


def _judged_while_away(llm: FakeLLM, store: SqliteStore, down: Capture, ev: Any,
                       back_for_flush: bool = False) -> dict[str, Any]:
    """A process judges ``ev`` while the collector refuses the events, and stops; the
    judgement it stored."""
    down.fail_next = [grpc.StatusCode.UNAVAILABLE] * 10_000
    with _serving(llm, store, down, back_for_flush=back_for_flush) as first:
        first.export(Trace(ev.trace_id, [], "complete"), ev)
        judge = _wait_judged(store, ev.trace_id)
        poll(lambda: down.failed, "the events' first delivery to fail", interval_s=0.02)
    return judge


def test_judge_events_a_stop_could_not_deliver_go_out_after_the_restart(
        llm: FakeLLM, tmp_path: Path) -> None:
    """The judgement is stored while the collector is away; the stop's flush fails (dropped
    ``shutdown``). Before, the journal entry went at the store's write, and the events were
    lost downstream; now the entry stays until they are delivered, and the next start sends
    them from the stored judgement: no second judge call, no ``restart`` skip."""
    llm.route = _scripted("fine")
    store = SqliteStore(str(tmp_path / "s.db")).open()
    ev = evaluation(trace_id="c3" * 16)
    ev.trajectory.run_span_id = "0a" * 8
    store.put_many([ev])
    registry = CollectorRegistry()
    try:
        with Capture() as down:
            judge = _judged_while_away(llm, store, down, ev)
            assert _grades(down) == [] and len(llm.requests) == 1
            down.fail_next = []
            with _serving(llm, store, down, registry) as second:
                grades = poll(lambda: _grades(down), "the judgement's events downstream",
                              interval_s=0.02)
                poll(lambda: second._journal is not None and not second._journal.pending(),
                     "the delivered judgement to leave the journal", interval_s=0.02)
    finally:
        store.close()
    scores = {g["gen_ai.evaluation.name"]: (span, g["gen_ai.evaluation.score.value"])
              for span, g in grades}
    # on the run's span, as the first process would have sent it (the journal kept it)
    assert scores["trace"] == ("0a" * 8, judge["judges"]["trace"]["scores"]["trace"])
    assert len(llm.requests) == 1  # sent from the store, not judged again
    assert (registry.get_sample_value("otel_eval_judge_skipped_total", {"reason": "restart"})
            or 0.0) == 0.0


def test_judge_events_an_older_versions_entry_left_go_on_the_runs_span(
        llm: FakeLLM, tmp_path: Path) -> None:
    """An entry an older version's journal left (no run span column: read as "") for a
    judgement it stored and could not deliver: the next start sends the events on the run's
    span, read from the stored steps as the session job reads a turn's; before, on span id ""
    (attached to no span of the run)."""
    llm.route = _scripted("fine")
    store = SqliteStore(str(tmp_path / "s.db")).open()
    ev = evaluation(trace_id="c5" * 16)
    ev.trajectory.run_span_id = "a" * 16  # the root step's span
    store.put_many([ev])
    try:
        with Capture() as down:
            _judged_while_away(llm, store, down, ev)
            assert _grades(down) == []
            with sqlite3.connect(store.location) as db:  # as the older version wrote it
                db.execute("CREATE TABLE old (trace_id TEXT NOT NULL, revision INTEGER NOT "
                           "NULL, queued_at REAL NOT NULL, PRIMARY KEY (trace_id, revision))")
                db.execute("INSERT INTO old SELECT trace_id, revision, queued_at FROM "
                           "judge_pending")
                db.execute("DROP TABLE judge_pending")
                db.execute("ALTER TABLE old RENAME TO judge_pending")
            db.close()
            down.fail_next = []
            with _serving(llm, store, down):
                grades = poll(lambda: _grades(down), "the judgement's events downstream",
                              interval_s=0.02)
    finally:
        store.close()
    scores = {g["gen_ai.evaluation.name"]: span for span, g in grades}
    assert scores["trace"] == "a" * 16 and "" not in {span for span, _ in grades}
    assert len(llm.requests) == 1  # sent from the store, not judged again


def test_judge_events_the_stop_delivers_leave_the_journal(llm: FakeLLM, tmp_path: Path) -> None:
    """The events sink flushes after the judge stage stopped (and closed its journal): what
    that flush delivers still leaves the journal, so the next start sends nothing again."""
    llm.route = _scripted("fine")
    store = SqliteStore(str(tmp_path / "s.db")).open()
    ev = evaluation(trace_id="d4" * 16)
    store.put_many([ev])
    try:
        with Capture() as down:
            _judged_while_away(llm, store, down, ev, back_for_flush=True)
            delivered = len(_grades(down))
            assert delivered > 0
            with _serving(llm, store, down) as second:
                assert second._journal is not None
                assert second._writer is not None  # behind the start's journal pass:
                assert second._writer.call(lambda: True).result(30)
                assert second._journal.pending() == []
    finally:
        store.close()
    assert len(_grades(down)) == delivered  # nothing sent twice


def test_a_journal_an_older_version_wrote_opens_with_its_entries(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE judge_pending (trace_id TEXT NOT NULL, revision INTEGER NOT "
                   "NULL, queued_at REAL NOT NULL, PRIMARY KEY (trace_id, revision))")
        db.execute("INSERT INTO judge_pending VALUES ('e5', 0, 1.0)")
    db.close()
    journal = PendingJournal(path).open()
    try:
        assert journal.pending() == [("e5", 0, "", None)]
        journal.add("f6", 1, "0b" * 8, 7)
        assert journal.pending()[1] == ("f6", 1, "0b" * 8, 7)
    finally:
        journal.close()
    journal.delivered([("f6", 1)])  # once closed too
    again = PendingJournal(path).open()
    assert again.pending() == [("e5", 0, "", None)]
    again.close()


def test_judge_events_sent_after_the_restart_are_timed_at_the_judgement(
        llm: FakeLLM, tmp_path: Path) -> None:
    """A gen_ai.evaluation.result event is timed when the evaluation happened (the logs data
    model's Timestamp: when the event occurred). The judgement's events the stop could not
    deliver, sent by the next start from the stored judgement, carried the time of that
    sending, after the restart; now the judgement's own time, stored with it."""
    llm.route = _scripted("fine")
    store = SqliteStore(str(tmp_path / "s.db")).open()
    ev = evaluation(trace_id="e5" * 16)
    store.put_many([ev])
    try:
        with Capture() as down:
            judge = _judged_while_away(llm, store, down, ev)
            stopped_ns = time.time_ns()  # every judgement of the first process was before
            down.fail_next = []
            with _serving(llm, store, down):
                poll(lambda: _grades(down), "the judgement's events downstream",
                     interval_s=0.02)
    finally:
        store.close()
    times = {r.time_unix_nano for req in down.logs for rl in req.resource_logs
             for sl in rl.scope_logs for r in sl.log_records
             if "otel_eval.judge.model" in attributes_to_dict(r.attributes)}
    assert times and all(t < stopped_ns for t in times)  # not the sending's, after it
    assert times == {judge.get("judged_at_unix_nano")}
