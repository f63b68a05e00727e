"""``serve --workers N``: evaluation in worker processes keeps the engine's promises.

A real ``Service`` (gRPC receiver on port 0, spool, SQLite store) with two worker processes.
Work is held inside the workers without sleeping: the test takes the store's write lock
(``BEGIN IMMEDIATE`` on its own connection), so a worker evaluates its first trace and then
waits in ``put_many``; releasing the lock lets every worker commit. While they wait the test
observes the in-flight bound, the receiver's throttling, and kills a worker with SIGKILL.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import signal
import sqlite3
import subprocess
import sys
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry
from support.clock import ManualClock
from support.harness import Harness, running_service
from support.poll import poll
from test_receivers import _raw_export

from otel_eval.app import worker as child
from otel_eval.app.config import Config, replace
from otel_eval.app.service import Service
from otel_eval.app.workers import WorkerPool
from otel_eval.assemble.engine import Engine
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.base.model import LogEvent, Span, Trace, content_digest
from otel_eval.decode import encode, otlp
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.handoff import Done, Job, Outcome
from otel_eval.evaluate.stage import ALREADY_EVALUATED, InProcess, evaluate_and_store
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics

SPANS = 3  # per trace: a root and two children, all ended


def _trace(trace_id: str) -> list[Span]:
    resource = {"service.name": "agents"}
    root = Span(trace_id, f"{1:016x}", None, "invoke_agent", 1, 10, resource=resource,
                attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"})
    return [root] + [Span(trace_id, f"{k + 2:016x}", f"{1:016x}", "chat", 2, 3,
                          resource=resource) for k in range(SPANS - 1)]


def _ids(per_worker: int, workers: int = 2) -> dict[int, list[str]]:
    """Trace ids, ``per_worker`` routed to each worker (the pool routes by crc32 % N)."""
    out: dict[int, list[str]] = {w: [] for w in range(workers)}
    i = 0
    while any(len(v) < per_worker for v in out.values()):
        i += 1
        tid = f"{i:032x}"
        w = zlib.crc32(tid.encode()) % workers
        if len(out[w]) < per_worker:
            out[w].append(tid)
    return out


def _send(h: Harness, spans: list[Span]) -> grpc.StatusCode | None:
    _, err = _raw_export(h, encode.encode_spans(spans).SerializeToString())
    return None if err is None else err.code()


@contextmanager
def _store_locked(path: Path) -> Iterator[Callable[[], None]]:
    """Hold the store's write lock; yields a function that releases it."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    held = [True]

    def release() -> None:
        if held[0]:
            db.execute("ROLLBACK")
            held[0] = False

    try:
        yield release
    finally:
        release()
        db.close()


def _pool(h: Harness) -> WorkerPool:
    assert isinstance(h.svc.pool, WorkerPool) and h.svc.engine.stage is h.svc.pool
    return h.svc.pool


def _stored(h: Harness) -> dict[str, dict[str, Any]]:
    with sqlite3.connect(h.svc.config.store.path) as db:
        rows = db.execute("SELECT trace_id, revision, body FROM evaluations").fetchall()
    return {tid: {"revision": rev, **json.loads(body)} for tid, rev, body in rows}


def _release(h: Harness) -> None:
    h.clock.now += h.svc.config.assembly.grace_s + 0.001
    h.svc.engine.tick()
    h.svc.engine.process()  # hands the released traces to the pool, returns at once


WORKERS = {"evaluation.workers": 2, "evaluation.max_inflight_traces_per_worker": 2}


def test_workers_bound_in_flight_throttle_and_survive_kill_9(tmp_path: Path) -> None:
    ids = _ids(per_worker=4)
    every = ids[0] + ids[1]
    pending_cap = len(every) * SPANS  # full once every trace below is taken
    with running_service(tmp_path, **WORKERS, **{"assembly.max_pending_spans": pending_cap}
                         ) as h, _store_locked(tmp_path / "otel-eval.db") as unlock:
        pool = _pool(h)
        for tid in every:
            assert _send(h, _trace(tid)) is None  # acknowledged (spooled)
        _release(h)
        # each worker holds its bound (2), the other 2 of its traces wait in this process
        poll(lambda: all(h.sample("otel_eval_workers_inflight_traces", worker=str(w)) == 2
                           for w in (0, 1)),
             "both workers to hold 2 traces")
        assert h.svc.engine.pending_spans() == pending_cap
        # full: a new trace is throttled the way receivers always do, nothing taken
        assert _send(h, _trace("f" * 32)) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert h.sample("otel_eval_receiver_requests_throttled_total", protocol="grpc",
                        reason="pending_spans") == 1
        victim = pool.pids()[0]
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        poll(lambda: h.sample("otel_eval_workers_restarts_total", worker="0") == 1
               and pool.pids()[0] not in (None, victim),
             "worker 0 to be restarted")
        assert h.sample("otel_eval_workers_retried_traces_total") == 2
        assert h.sample("otel_eval_workers_running") == 2
        unlock()
        poll(lambda: h.svc.engine.pending_spans() == 0, "every trace to be stored")
        stored = _stored(h)
        assert set(stored) == set(every)  # none lost; one row per trace id
        assert all(b["counts"]["spans"] == SPANS and b["revision"] == 0
                   and not any(f["kind"] == "evaluation_error" for f in b["findings"])
                   for b in stored.values())
        completed = h.sample("otel_eval_traces_completed_total", service="agents", agent="a",
                             status="complete")
        assert completed == len(every)  # each counted once: none superseded, none twice
        assert h.sample("otel_eval_traces_superseded_total", service="agents", agent="a") == 0
        assert h.svc.spool is not None and h.svc.spool.held() == (0, 0)  # all evaluated
        assert _send(h, _trace("f" * 32)) is None  # room again


def test_a_write_under_way_when_its_worker_dies_never_reaches_the_next_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CI failure: the receiver closed a dead worker's socket while its sender was inside a
    write, the descriptor's number already read. The restarted worker's socket pair got that
    number, the stale batch reached it, and its answer named a message id the pool no longer
    held (KeyError in ``_done``; the pool stopped finishing results). Here the sender is held
    just after reading the number, as the OS may preempt it there, until the worker is
    restarted: the number must still be the dead worker's socket when the write goes on."""
    tid = _ids(per_worker=1)[0][0]
    real_send = Connection.send
    held, gate = threading.Event(), threading.Event()
    reused: list[bool] = []

    def send(conn: Connection, obj: Any) -> None:
        if isinstance(obj, tuple) and obj[0] == "batch" and not held.is_set():
            fd = conn.fileno()
            socket_id = os.fstat(fd).st_ino
            held.set()
            gate.wait()
            try:
                reused.append(os.fstat(fd).st_ino != socket_id)
            except OSError:  # closed and not reused (yet): as wrong
                reused.append(True)
        real_send(conn, obj)

    monkeypatch.setattr(Connection, "send", send)
    with running_service(tmp_path, **WORKERS) as h:
        pool = _pool(h)
        assert _send(h, _trace(tid)) is None
        _release(h)
        poll(held.is_set, "worker 0's sender to be inside its write")
        victim = pool.pids()[0]
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        poll(lambda: pool.pids()[0] not in (None, victim), "worker 0 to be restarted")
        gate.set()
        poll(lambda: reused, "the held write to go on")
        poll(lambda: h.svc.engine.pending_spans() == 0, "the trace to be stored")
        assert reused == [False]
        assert pool.failure is None
        assert set(_stored(h)) == {tid}
        assert h.sample("otel_eval_workers_retried_traces_total") == 1


def test_a_trace_whose_worker_keeps_dying_is_stored_as_an_error(tmp_path: Path) -> None:
    ids = _ids(per_worker=1)
    with running_service(tmp_path, **WORKERS, **{"evaluation.max_attempts": 1}) as h, \
            _store_locked(tmp_path / "otel-eval.db") as unlock:
        pool = _pool(h)
        assert _send(h, _trace(ids[0][0]) + _trace(ids[1][0])) is None
        _release(h)
        poll(lambda: all(h.sample("otel_eval_workers_inflight_traces", worker=str(w)) == 1
                           for w in (0, 1)),
             "each worker to hold its trace")
        victim = pool.pids()[0]
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        # out of attempts: the main process stores it as an error once it can write
        unlock()
        poll(lambda: h.svc.engine.pending_spans() == 0, "both traces to be stored")
        stored = _stored(h)
        lost, fine = stored[ids[0][0]], stored[ids[1][0]]
        assert [f["attributes"]["error"] for f in lost["findings"]
                if f["kind"] == "evaluation_error"] == ["WorkerLost"]
        assert "WorkerLost" in lost["error"]
        assert not any(f["kind"] == "evaluation_error" for f in fine["findings"])
        assert h.sample("otel_eval_evaluation_failures_total", stage="evaluate",
                        reason="WorkerLost") == 1
        assert h.sample("otel_eval_workers_retried_traces_total") == 0


def test_a_record_delivered_again_waits_for_its_trace_through_a_worker_death(
        tmp_path: Path) -> None:
    """A Kafka record fetched again while its trace is in a worker (tests/kafka/
    test_kafka_redelivery.py): its waiter rides on that trace, re-sent when the worker dies,
    and is called only once the next worker stored it."""
    tid = _ids(per_worker=1)[0][0]
    calls: list[str] = []
    with running_service(tmp_path, **WORKERS) as h, \
            _store_locked(tmp_path / "otel-eval.db") as unlock:
        pool, engine = _pool(h), h.svc.engine
        engine.submit(_trace(tid), "kafka", on_stored=lambda: calls.append("first"))
        _release(h)
        poll(lambda: h.sample("otel_eval_workers_inflight_traces", worker="0") == 1,
             "worker 0 to hold the trace")
        again = engine.submit(_trace(tid), "kafka", on_stored=lambda: calls.append("again"))
        assert dict(again.rejected) == {"duplicate_span": SPANS}
        victim = pool.pids()[0]
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        poll(lambda: h.sample("otel_eval_workers_retried_traces_total") == 1,
             "the trace to be handed to the restarted worker")
        assert calls == []  # before: ["again"], the record committed with nothing stored
        unlock()
        poll(lambda: sorted(calls) == ["again", "first"], "both deliveries to be stored")
        assert set(_stored(h)) == {tid}


def test_one_worker_evaluates_in_the_serving_process(tmp_path: Path) -> None:
    with running_service(tmp_path) as h:  # the harness asks for evaluation.workers: 1
        assert h.svc.pool is None
        assert _send(h, _trace("a" * 32)) is None
        assert h.release() == 1
        assert set(_stored(h)) == {"a" * 32}  # stored before process() returned


def test_an_in_memory_store_is_evaluated_into_by_the_serving_process(tmp_path: Path) -> None:
    # ":memory:" is a database of the process that opens it: a worker process's evaluations
    # went to its own, never seen by the results API, feedback or the session job
    with running_service(tmp_path, **{"evaluation.workers": 2, "store.path": ":memory:"}) as h:
        assert h.svc.pool is None
        assert _send(h, _trace("a" * 32)) is None
        assert h.release() == 1
        assert h.svc.store.get("a" * 32) is not None  # what GET /v1/evaluations/{id} reads


def test_a_retried_trace_the_dead_worker_had_stored_is_evaluated_and_not_superseded(
        tmp_path: Path) -> None:
    """The worker died after its commit, before answering: nothing counted, exported or
    judged that trace, so the retry evaluates it (its digest is the stored one, as every
    released trace's is) and it is no re-evaluation. Before, the retry came back
    ``already_evaluated``: stored, and never counted, exported or judged. A row of that
    content from before the hand-out (another process's) is skipped as usual."""
    now = [100.0]
    evaluator = Evaluator(Config(), wall_clock=lambda: now[0])
    store = Store(str(tmp_path / "s.db"))
    trace = Trace("b" * 32, _trace("b" * 32), "complete")
    trace.digest = content_digest(trace)
    handed_out_ns = int(150.0 * 1e9)
    try:
        now[0] = 200.0
        [dead] = evaluate_and_store(evaluator, store, [trace])  # its answer died with it
        [retry] = evaluate_and_store(evaluator, store, [trace], {trace.trace_id: handed_out_ns})
        assert dead.evaluation is not None and not dead.superseded
        assert retry.evaluation is not None and retry.skipped is None and not retry.superseded
        # the same content delivered again later, or retried after a hand-out later than the
        # row, or as another revision, is what the store holds already
        for since in (None, {trace.trace_id: int(300e9)}):
            [again] = evaluate_and_store(evaluator, store, [trace], since)
            assert again.skipped == ALREADY_EVALUATED
        newer = Trace(trace.trace_id, trace.spans, "complete", revision=1, digest=trace.digest)
        [rev] = evaluate_and_store(evaluator, store, [newer], {trace.trace_id: handed_out_ns})
        assert rev.skipped == ALREADY_EVALUATED
        # without a digest (not released by assembly) a retry of another revision supersedes
        [other] = evaluate_and_store(evaluator, store, [Trace(trace.trace_id, trace.spans,
                                                               "complete", revision=1)],
                                     {trace.trace_id: handed_out_ns})
        assert other.evaluation is not None and other.superseded
    finally:
        store.close()


def test_a_trace_stored_from_the_same_content_is_not_evaluated_again(tmp_path: Path) -> None:
    """A redelivered trace (a Kafka record after a rebalance, a spool row after a crash, a
    dead worker's retry) whose content the store already holds an evaluation of is skipped;
    other content of the same trace id (a late span, one more log record) is evaluated."""
    evaluator = Evaluator(Config())
    store = Store(str(tmp_path / "s.db"))

    def released(spans: list[Span], logs: tuple[LogEvent, ...] = ()) -> Trace:
        t = Trace("c" * 32, spans, "complete", logs=list(logs))
        t.digest = content_digest(t)
        return t

    spans = _trace("c" * 32)
    record = LogEvent("c" * 32, spans[1].span_id, "gen_ai.choice", 5, {}, {"content": "hi"})
    try:
        [first] = evaluate_and_store(evaluator, store, [released(spans, (record,))])
        stamp = store.stamp("c" * 32)
        other = Trace("d" * 32, _trace("d" * 32), "complete")
        # the same spans and record, redelivered in another order and batch
        [again, fresh] = evaluate_and_store(
            evaluator, store, [released(spans[::-1], (record,)), other])
        assert (again.evaluation, again.skipped) == (None, ALREADY_EVALUATED)
        assert fresh.evaluation is not None and fresh.skipped is None
        assert store.stamp("c" * 32) == stamp
        late = Span("c" * 32, f"{99:016x}", f"{1:016x}", "chat", 4, 5,
                    resource={"service.name": "agents"})
        # each holds every span and record stored before it (without them: late, below)
        more = (record, dataclasses.replace(record, time_unix_nano=6))
        for changed in (released(spans, more), released([*spans, late], more)):
            [out] = evaluate_and_store(evaluator, store, [changed])
            assert out.evaluation is not None and out.superseded, changed
    finally:
        store.close()
    assert first.evaluation is not None and first.evaluation.content_digest


def test_what_travels_to_and_from_a_worker_arrives_whole(datasets: Path) -> None:
    """Traces go as packed tuples, evaluations come back through multiprocessing's pickler
    rebuilt by their constructors: the worker's evaluation equals the one made here, and a
    lean one keeps what the metrics read."""
    from otel_eval.receive.loaders import load_path

    evaluator = Evaluator(Config())
    path = sorted((datasets / "trail" / "GAIA" / "traces").glob("*.json.gz"))[0]
    [loaded] = load_path(str(path))
    # as the receivers have them: decoded from OTLP, attributes still protobuf bytes
    request = encode.encode_spans(loaded.spans).SerializeToString()
    spans = otlp.decode_request(otlp.parse_request(request)[0]).spans
    assert spans and all(s._lazy is not None for s in spans)
    trace = Trace(loaded.trace_id, spans, "complete")
    trace.digest = content_digest(trace)
    sent = pickle.loads(ForkingPickler.dumps(child.pack_trace(trace)))
    back = child.unpack_trace(sent)
    assert back.digest == trace.digest
    assert [(s.span_id, s.attributes, s.events, s.resource) for s in back.spans] == \
        [(s.span_id, s.attributes, s.events, s.resource) for s in trace.spans]
    here = evaluator.evaluate(trace)
    there = evaluator.evaluate(back)
    there.evaluated_at_ns = here.evaluated_at_ns
    got = pickle.loads(ForkingPickler.dumps(there))
    assert got == here and got.to_json() == here.to_json()
    lean = pickle.loads(ForkingPickler.dumps(child.lean(there)))
    assert (lean.trajectory.usage(), lean.trajectory.counts(), lean.verdict,
            lean.findings) == (here.trajectory.usage(), here.trajectory.counts(),
                               here.verdict, here.findings)
    assert all(s.input_text is None and s.result is None for s in lean.trajectory.steps)


def test_when_the_workers_cannot_start_serve_evaluates_in_its_own_process(
        tmp_path: Path) -> None:
    cfg = replace(Config(), **{
        "receiver.grpc_endpoint": "127.0.0.1:0", "receiver.http_endpoint": "",
        "admin.endpoint": "127.0.0.1:0", "store.path": str(tmp_path / "otel-eval.db"),
        "evaluation.workers": 2})
    clock = ManualClock()
    svc = Service(cfg, registry=CollectorRegistry(), clock=clock)
    assert svc.pool is not None
    # a store the worker processes cannot open (a directory), the serving process can
    svc.pool.spec = dataclasses.replace(svc.pool.spec, store_target=str(tmp_path))
    svc.start(worker=False)
    try:
        h = Harness(svc, clock)
        assert svc.pool is None and isinstance(svc.engine.stage, InProcess)
        assert _send(h, _trace("c" * 32)) is None
        assert h.release() == 1
        assert set(_stored(h)) == {"c" * 32}
    finally:
        svc.shutdown(deadline_s=5)


def test_the_revisions_of_a_trace_are_stored_in_order(tmp_path: Path) -> None:
    """Late spans re-open a trace while its first evaluation is still inside a worker: both
    revisions go to the same worker, in order, so the stored row is the later one."""
    tid = "d" * 32
    late = Span(tid, f"{9:016x}", f"{1:016x}", "chat", 4, 5, resource={"service.name": "agents"})
    with running_service(tmp_path, **WORKERS) as h, \
            _store_locked(tmp_path / "otel-eval.db") as unlock:
        assert _send(h, _trace(tid)) is None
        _release(h)  # revision 0, held in its worker by the lock
        assert _send(h, [late]) is None  # re-opens it: revision 1
        _release(h)
        worker = str(zlib.crc32(tid.encode()) % 2)
        poll(lambda: h.sample("otel_eval_workers_inflight_traces", worker=worker) == 2,
             "both revisions to be inside the same worker")
        unlock()
        poll(lambda: h.svc.engine.pending_spans() == 0, "both revisions to be stored")
        [row] = _stored(h).values()
        assert (row["revision"], row["counts"]["spans"]) == (1, SPANS + 1)
        assert h.sample("otel_eval_traces_superseded_total", service="agents", agent="a") == 1
        assert h.sample("otel_eval_traces_completed_total", service="agents", agent="a",
                        status="complete") == 1


@contextmanager
def _service_with_poison(tmp_path: Path, seam: str = "poison_span_name",
                         **changes: Any) -> Iterator[Harness]:
    """``running_service`` whose workers kill themselves (SIGKILL, as the OOM killer would)
    on a trace with a span named ``poison`` (the worker's test seam, off outside tests; with
    ``seam="hang_span_name"`` they hang on it instead)."""
    cfg = replace(Config(), **{
        "receiver.grpc_endpoint": "127.0.0.1:0", "receiver.http_endpoint": "",
        "admin.endpoint": "127.0.0.1:0", "store.path": str(tmp_path / "otel-eval.db"),
        **changes})
    clock = ManualClock()
    svc = Service(cfg, registry=CollectorRegistry(), clock=clock)
    assert svc.pool is not None
    svc.pool.spec = dataclasses.replace(svc.pool.spec, **{seam: "poison"})
    svc.start(worker=False)
    try:
        yield Harness(svc, clock)
    finally:
        svc.shutdown(deadline_s=5)


def test_a_poison_trace_takes_down_only_itself(tmp_path: Path) -> None:
    """Issue 21: 44-54 of 100 clean traces sent right after a trace that kills its worker
    were stored as WorkerLost: every retry of the poison went into the worker beside the
    others, so each death counted against all of them. Retried traces now go one at a time:
    only the poison is stored as an error; every trace in flight beside it is evaluated."""
    ids = _ids(per_worker=13)
    poison, clean = ids[0][0], ids[0][1:] + ids[1]
    bad = _trace(poison)
    bad[1].name = "poison"
    with _service_with_poison(tmp_path, **{
            "evaluation.workers": 2, "evaluation.max_inflight_traces_per_worker": 8,
            "evaluation.max_attempts": 3}) as h:
        assert _send(h, bad) is None
        assert _send(h, [s for tid in clean for s in _trace(tid)]) is None
        _release(h)
        poll(lambda: h.svc.engine.pending_spans() == 0, "every trace to be stored", timeout_s=120)
        stored = _stored(h)
        assert set(stored) == {poison, *clean}
        errors = {tid for tid, b in stored.items()
                  if any(f["kind"] == "evaluation_error" for f in b["findings"])}
        assert errors == {poison}
        assert "WorkerLost" in stored[poison]["error"]
        assert h.sample("otel_eval_evaluation_failures_total", stage="evaluate",
                        reason="WorkerLost") == 1
        # it died with others in it once, then alone max_attempts times
        assert h.sample("otel_eval_workers_restarts_total", worker="0") >= 3
        assert h.sample("otel_eval_workers_retried_traces_total") > 3
        assert h.sample("otel_eval_workers_restarts_total", worker="1") == 0


def test_a_store_refusing_a_lost_trace_keeps_it_and_the_pool_healthy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool gives up on a trace that kept killing its worker by storing it as an
    evaluation error here. A store refusing that write marked the pool failed for good
    (health red) and left the trace unstored and pending. Now, as on the in-process path, the
    refusal is counted and the trace kept; once the store takes writes it is stored as
    WorkerLost, without being sent to a worker again."""
    poison = _ids(per_worker=1)[0][0]
    bad = _trace(poison)
    bad[1].name = "poison"
    with _service_with_poison(tmp_path, **{
            "evaluation.workers": 2, "evaluation.max_attempts": 1}) as h:
        store = h.svc.store
        real_put_many, refusing = store.put_many, [True]

        def put_many(evaluations: Any) -> Any:  # this process's writes (the workers' own
            if refusing:  # connections are theirs): the store cannot be reached
                raise OSError("store unreachable")
            return real_put_many(evaluations)

        monkeypatch.setattr(store, "put_many", put_many)
        assert _send(h, bad) is None
        _release(h)
        poll(lambda: h.sample("otel_eval_store_write_failures_total", reason="unavailable"),
             "the store to refuse the trace's error record")
        pool = _pool(h)
        assert pool.failure is None and pool.healthy
        assert h.svc.engine.pending_spans() == SPANS  # kept, still pending
        refusing.clear()
        h.clock.now += 2  # past the store's first back-off (1 s)
        h.svc.engine.process()
        poll(lambda: h.svc.engine.pending_spans() == 0, "the trace to be stored")
        assert "WorkerLost" in _stored(h)[poison]["error"]
        assert h.sample("otel_eval_evaluation_failures_total", stage="evaluate",
                        reason="WorkerLost") == 1
        assert h.sample("otel_eval_workers_restarts_total", worker="0") == 1  # not sent again
        assert pool.failure is None and pool.healthy


def test_a_worker_that_hangs_is_killed_and_its_trace_given_up_on(tmp_path: Path) -> None:
    """A worker alive but never answering held its traces, and every trace routed to it
    stalled, for ever: nothing watched it. Now a worker on one batch past
    evaluation.worker_timeout_s is killed (counted) and restarted as after a crash: the traces
    in flight beside the hanging one are evaluated, and the one that hangs its worker alone
    max_attempts times is stored as WorkerLost."""
    ids = _ids(per_worker=3)
    hang, clean = ids[0][0], ids[0][1:] + ids[1]
    bad = _trace(hang)
    bad[1].name = "poison"
    with _service_with_poison(tmp_path, seam="hang_span_name", **{
            "evaluation.workers": 2, "evaluation.max_inflight_traces_per_worker": 8,
            "evaluation.max_attempts": 2, "evaluation.worker_timeout_s": 1}) as h:
        assert _send(h, bad) is None
        assert _send(h, [s for tid in clean for s in _trace(tid)]) is None
        _release(h)
        poll(lambda: h.svc.engine.pending_spans() == 0, "every trace to be stored")
        stored = _stored(h)
        assert set(stored) == {hang, *clean}
        errors = {tid for tid, b in stored.items()
                  if any(f["kind"] == "evaluation_error" for f in b["findings"])}
        assert errors == {hang}
        assert "WorkerLost" in stored[hang]["error"]
        hung = h.sample("otel_eval_workers_hung_total", worker="0")
        assert hung >= 2 and h.sample("otel_eval_workers_restarts_total", worker="0") == hung
        assert h.sample("otel_eval_workers_hung_total", worker="1") == 0
        assert _pool(h).healthy


@pytest.mark.parametrize("stopped_again", [False, True])
def test_a_span_after_a_restart_for_a_stored_run_is_late_in_a_worker_too(
        tmp_path: Path, stopped_again: bool) -> None:
    """A straggler of a run stored before a restart is a fragment: it lacks spans of the
    stored run, so the stored run stands (``late``), as in process
    (tests/lifecycle/test_clean_stop.py); also when a second stop left it open in the spool
    and the next start replays it. Before, through worker processes the fragment was
    evaluated as a one-span run and replaced the whole stored run."""
    tid = _ids(per_worker=1)[0][0]
    with running_service(tmp_path) as h:  # the run, stored before the restart
        assert _send(h, _trace(tid)) is None
        assert h.release() == 1
    straggler = Span(tid, f"{9:016x}", f"{1:016x}", "chat", 4, 5,
                     resource={"service.name": "agents"})
    if stopped_again:  # taken, spooled, left open by the stop (its parent is not here)
        with running_service(tmp_path, **WORKERS) as h:
            assert _send(h, [straggler]) is None
            h.release()
            assert h.svc.engine.open_traces() == 1
    with running_service(tmp_path, **WORKERS) as h:
        if stopped_again:
            assert h.svc.engine.open_traces() == 1  # replayed from the spool
        else:
            assert _send(h, [straggler]) is None
        h.release(after_s=h.svc.config.assembly.idle_timeout_s + 1)
        poll(lambda: h.svc.engine.pending_spans() == 0, "the straggler to be finished")
        row = _stored(h)[tid]
        assert (row["revision"], row["counts"]["spans"]) == (0, SPANS)
        assert h.sample("otel_eval_evaluation_skipped_total", reason="late") == 1
        assert h.sample("otel_eval_traces_superseded_total", service="agents", agent="a") == 0
        assert h.svc.spool is not None
        poll(lambda: h.svc.spool.held() == (0, 0), "the straggler's spool row to go")


@pytest.mark.parametrize("marked", [False, True])
def test_a_fragment_of_a_stored_run_is_late_and_more_of_it_supersedes(
        tmp_path: Path, marked: bool) -> None:
    """One rule, whatever ``late_if_stored`` says (assembly marks every trace it opened anew,
    a Kafka partition's new owner's replay too; the mark did not reach worker processes): a
    trace that lacks spans the stored run was made from is a fragment of it (``late``, the
    run stands); one that holds them all and more supersedes it (the guide: a redelivery
    with more than was stored is evaluated again). Before, in process a new owner's replay
    with more was skipped as late, and in a worker a straggler replaced the run."""
    evaluator = Evaluator(Config())
    store = Store(str(tmp_path / "s.db"))

    def released(spans: list[Span]) -> Trace:
        t = Trace("c" * 32, spans, "complete", late_if_stored=marked)
        t.digest = content_digest(t)
        return t

    spans = _trace("c" * 32)
    more = [Span("c" * 32, f"{k:016x}", f"{1:016x}", "chat", 4, 5,
                 resource={"service.name": "agents"}) for k in (98, 99)]
    try:
        evaluate_and_store(evaluator, store, [released(spans)])
        [fragment] = evaluate_and_store(evaluator, store, [released(more)])
        assert (fragment.evaluation, fragment.skipped) == (None, "late")
        [whole] = evaluate_and_store(evaluator, store, [released([*spans, more[0]])])
        assert whole.evaluation is not None and whole.superseded
        # what the stored revision held and more: still a fragment without span 98
        [again] = evaluate_and_store(evaluator, store, [released([*spans, more[1]])])
        assert again.skipped == "late"
        stored = store.get("c" * 32)
        assert stored is not None and stored["counts"]["spans"] == SPANS + 1
    finally:
        store.close()


def test_a_replay_with_fewer_log_records_than_stored_is_late(tmp_path: Path) -> None:
    """The stored run's log records count in the one rule as its spans do: a replay or
    redelivery holding the same spans but fewer of the run's GenAI records than were stored
    (records on another Kafka partition, or refused) is no superset of the stored run; it is
    ``late`` and the stored run stands. Before, only span ids were kept, so it superseded the
    row with a poorer evaluation (the guide: only a redelivery with more than was stored is
    evaluated again)."""
    evaluator = Evaluator(Config())
    store = Store(str(tmp_path / "s.db"))

    def released(logs: tuple[LogEvent, ...]) -> Trace:
        t = Trace("c" * 32, _trace("c" * 32), "complete", logs=list(logs))
        t.digest = content_digest(t)
        return t

    spans = _trace("c" * 32)
    first = LogEvent("c" * 32, spans[1].span_id, "gen_ai.choice", 5, {}, {"content": "hi"})
    second = dataclasses.replace(first, time_unix_nano=6, body={"content": "done"})
    try:
        [stored] = evaluate_and_store(evaluator, store, [released((first, second))])
        assert stored.evaluation is not None
        stamp = store.stamp("c" * 32)
        for fewer in ((), (first,), (second,)):
            [out] = evaluate_and_store(evaluator, store, [released(fewer)])
            assert (out.evaluation, out.skipped) == (None, "late"), fewer
            assert store.stamp("c" * 32) == stamp
        other = dataclasses.replace(first, time_unix_nano=7)  # as many, but not the same
        [out] = evaluate_and_store(evaluator, store, [released((first, other))])
        assert out.skipped == "late"
        [more] = evaluate_and_store(evaluator, store, [released((first, second, other))])
        assert more.evaluation is not None and more.superseded
    finally:
        store.close()


def test_a_replay_with_fewer_log_records_than_a_row_of_span_ids_only_is_late(
        tmp_path: Path) -> None:
    """A row stored by an earlier release of schema 16 holds span ids only (no log records'
    keys): a replay or redelivery holding its spans but fewer of its GenAI records holds all
    it lists, and superseded it with a poorer evaluation. The stored digest tells: the
    replay's spans of the row with the replay's records (or none) make it again only when
    the replay holds every record the row was made from (or it had none); otherwise the
    stored run stands (``late``). More spans with the same records, or records added to a
    run stored without any, still supersede."""
    evaluator = Evaluator(Config())
    path = tmp_path / "s.db"
    store = Store(str(path))
    spans = _trace("d" * 32)
    first = LogEvent("d" * 32, spans[1].span_id, "gen_ai.choice", 5, {}, {"content": "hi"})
    second = dataclasses.replace(first, time_unix_nano=6, body={"content": "done"})
    extra = Span("d" * 32, "e" * 16, spans[0].span_id, "chat", 3, 4, resource=spans[0].resource)

    def released(logs: tuple[LogEvent, ...], more: tuple[Span, ...] = ()) -> Trace:
        t = Trace("d" * 32, [*_trace("d" * 32), *more], "complete", logs=list(logs))
        t.digest = content_digest(t)
        return t

    def stored_by_an_earlier_release(trace: Trace) -> None:
        [out] = evaluate_and_store(evaluator, store, [trace])
        assert out.evaluation is not None
        with sqlite3.connect(path) as db:  # span ids only, as rows of earlier releases
            db.execute("UPDATE evaluations SET span_ids = ?",
                       (" ".join(sorted(s.span_id for s in trace.spans)),))
        db.close()

    try:
        stored_by_an_earlier_release(released((first, second)))
        stamp = store.stamp("d" * 32)
        for fewer in ((), (first,), (second,)):
            [out] = evaluate_and_store(evaluator, store, [released(fewer)])
            assert (out.evaluation, out.skipped) == (None, "late"), fewer
            assert store.stamp("d" * 32) == stamp
        [more] = evaluate_and_store(evaluator, store, [released((first, second), (extra,))])
        assert more.evaluation is not None and more.superseded
        with sqlite3.connect(path) as db:  # the same run stored without records, anew
            db.execute("DELETE FROM evaluations")
        db.close()
        stored_by_an_earlier_release(released(()))
        [added] = evaluate_and_store(evaluator, store, [released((first,))])
        assert added.evaluation is not None and added.superseded
    finally:
        store.close()


class _Pipelined:
    """A stage that takes every batch at once and answers them later, in order, as
    ``WorkerPool`` does (several messages in a worker's pipe); ``store`` evaluates and stores
    what it holds in this process."""

    def __init__(self, inner: InProcess) -> None:
        self.inner = inner
        self.held: list[tuple[list[Job], Done]] = []

    def run(self, jobs: list[Job], done: Done) -> None:
        self.held.append((jobs, done))

    def refuse(self) -> None:
        held, self.held = self.held, []
        for jobs, done in held:
            done(jobs, [Outcome(None, False, unstored="disk_full", error="full")
                        for _ in jobs])

    def refuse_first(self) -> None:
        jobs, done = self.held.pop(0)
        done(jobs, [Outcome(None, False, unstored="locked", error="busy") for _ in jobs])

    def store(self) -> None:
        held, self.held = self.held, []
        for jobs, done in held:
            self.inner.run(jobs, done)

    def drain(self, deadline_s: float) -> bool:
        return not self.held

    @property
    def healthy(self) -> bool:
        return True


def test_revisions_refused_in_two_batches_are_stored_in_order(tmp_path: Path) -> None:
    """Two revisions of a trace handed to the worker pool in two batches (both in its pipe),
    both refused by the store. Each refused batch went back to the head of the engine's
    queue, the later one ahead of the earlier, so the retry stored revision 1 and then
    revision 0 over it: the run lost its late span. Kept traces now go back in the order
    they were released."""
    tid = "d" * 32
    clock = ManualClock()
    cfg = Config()
    store = Store(str(tmp_path / "s.db"))
    stage = _Pipelined(InProcess(Evaluator(cfg), store))
    engine = Engine(stage, StoreHealth(store.location, clock=clock),
                    Metrics(CollectorRegistry()), assembly=cfg.assembly, clock=clock)
    late = Span(tid, f"{9:016x}", f"{1:016x}", "chat", 4, 5, resource={"service.name": "agents"})
    try:
        for spans in (_trace(tid), [late]):  # revision 0, then late spans re-open it: 1
            assert engine.submit(spans, "otlp").accepted == len(spans)
            clock.advance(cfg.assembly.grace_s + 1)
            assert engine.tick() == 1
            engine.process()
        assert [[j.trace.revision for j in jobs] for jobs, _ in stage.held] == [[0], [1]]
        stage.refuse()
        clock.advance(cfg.store.write_retry_max_interval_s + 1)  # past the back-off
        engine.process()
        stage.store()
        row = store.get(tid)
        assert row is not None
        assert (row["revision"], row["counts"]["spans"]) == (1, SPANS + 1)
    finally:
        store.close()


# A serve (in a process of its own) whose worker hangs on a span named "poison" (the worker's
# test seam); it prints its worker pids once the worker holds that trace, then waits.
_SERVE_WITH_A_HUNG_WORKER = r"""
import dataclasses, json, sys, time
from prometheus_client import CollectorRegistry
from otel_eval.app.config import Config, replace
from otel_eval.app.service import Service
from otel_eval.base.model import Span

now = [0.0]
cfg = replace(Config(), **{"receiver.grpc_endpoint": "127.0.0.1:0",
                           "receiver.http_endpoint": "", "admin.endpoint": "127.0.0.1:0",
                           "store.path": sys.argv[1], "evaluation.workers": 2})
svc = Service(cfg, registry=CollectorRegistry(), clock=lambda: now[0])
svc.pool.spec = dataclasses.replace(svc.pool.spec, hang_span_name="poison")
svc.start(worker=False)
tid = "a" * 32
svc.engine.submit([Span(tid, "1" * 16, None, "poison", 1, 9)], "otlp")
now[0] += cfg.assembly.grace_s + 1
svc.engine.tick()
svc.engine.process()
while not any(svc.registry.get_sample_value("otel_eval_workers_inflight_traces",
                                            {"worker": str(w)}) for w in (0, 1)):
    time.sleep(0.01)
print(json.dumps(svc.pool.pids()), flush=True)
sys.stdin.read()
"""


def _gone(pid: int) -> bool:
    """Exited (a zombie nobody reaped counts: it runs no more)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_workers_exit_when_serve_is_killed_even_in_the_middle_of_a_trace(
        tmp_path: Path) -> None:
    """The worker promises to exit when the main process goes away, but it saw that only as
    EOF on its pipe between two batches: a worker busy or hung on a trace when serve was
    killed (kill -9, an OOM kill) lived on, ignoring SIGTERM, writing the store the next
    serve owns. It now exits as soon as the main process is gone."""
    serve = subprocess.Popen(
        [sys.executable, "-c", _SERVE_WITH_A_HUNG_WORKER, str(tmp_path / "otel-eval.db")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    pids: list[int] = []
    try:
        assert serve.stdout is not None
        pids = [p for p in json.loads(serve.stdout.readline()) if p is not None]
        assert len(pids) == 2 and not any(_gone(p) for p in pids)
        serve.kill()
        serve.wait()
        poll(lambda: all(_gone(p) for p in pids), "both workers to exit")
    finally:
        serve.kill()
        serve.wait()
        for pid in pids:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(("files", "membership", "cores"), [
    # cgroup v2 in a container (its own cgroup shown as the root): 1.5 CPUs -> 2
    ({"cpu.max": "150000 100000"}, "0::/\n", 2),
    # v2, a systemd unit's CPUQuota=100%: its own cgroup's cpu.max, not the root's
    ({"system.slice/oe.service/cpu.max": "100000 100000"}, "0::/system.slice/oe.service\n", 1),
    # a limit set on a parent holds for the cgroups under it
    ({"a/cpu.max": "200000 100000", "a/b/cpu.max": "max 100000"}, "0::/a/b\n", 2),
    # cgroup v1 (docker --cpus=1 on a v1 host): the cpu controller's quota
    ({"cpu,cpuacct/cpu.cfs_quota_us": "100000", "cpu,cpuacct/cpu.cfs_period_us": "100000"},
     "4:cpu,cpuacct:/docker/abc\n0::/\n", 1),
    # no limit anywhere: the affinity
    ({"cpu,cpuacct/cpu.cfs_quota_us": "-1", "cpu,cpuacct/cpu.cfs_period_us": "100000",
      "cpu.max": "max 100000"}, "4:cpu,cpuacct:/\n0::/\n", 8),
])
def test_evaluation_workers_0_is_capped_by_the_cgroup_cpu_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str],
        membership: str, cores: int) -> None:
    """``evaluation.workers: 0`` is one worker per core the process may use, "capped by a
    cgroup CPU limit". Only /sys/fs/cgroup/cpu.max was read: a CPU limit on a cgroup v1
    host, or on the process's own cgroup v2 below the root (a systemd unit), was not seen,
    and serve started a worker per host core (memory and CPU the limit does not have)."""
    from otel_eval.app.worker_process import available_cores

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(8)))
    for name, text in files.items():
        (tmp_path / "cg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "cg" / name).write_text(text)
    (tmp_path / "self").write_text(membership)
    assert available_cores(str(tmp_path / "cg"), str(tmp_path / "self")) == cores


def test_a_revision_refused_after_a_later_one_was_stored_does_not_replace_it(
        tmp_path: Path) -> None:
    """Revision 1 of a re-opened run refused (another client held a lock a moment),
    revision 2, in the next message of the same worker, stored. Kept, revision 1 was handed
    again after the back-off and stored over revision 2: the run lost its last late span.
    (Revision 0 is protected by ``late_if_stored``; a re-open is not.) A kept revision that
    a later re-open of it (holding its spans) was stored after is now done as
    ``already_evaluated``: its spool rows and waiters go, nothing is stored over it."""
    tid = "d" * 32
    clock = ManualClock()
    cfg = Config()
    store = Store(str(tmp_path / "s.db"))
    stage = _Pipelined(InProcess(Evaluator(cfg), store))
    registry = CollectorRegistry()
    engine = Engine(stage, StoreHealth(store.location, clock=clock), Metrics(registry),
                    assembly=cfg.assembly, clock=clock)
    calls: list[str] = []
    try:
        for spans in (_trace(tid), *([Span(tid, f"{k:016x}", f"{1:016x}", "chat", 4, 5,
                                           resource={"service.name": "agents"})]
                                     for k in (8, 9))):  # revisions 0, 1 and 2
            engine.submit(spans, "kafka", on_stored=lambda: calls.append("record"))
            clock.advance(cfg.assembly.grace_s + 1)
            assert engine.tick() == 1
            engine.process()
            if len(stage.held) == 1 and stage.held[0][0][0].trace.revision == 0:
                stage.store()  # revision 0 stored
        stage.refuse_first()  # revision 1
        stage.store()  # revision 2
        clock.advance(cfg.store.write_retry_max_interval_s + 1)  # past the back-off
        engine.process()
        stage.store()
        row = store.get(tid)
        assert row is not None
        assert (row["revision"], row["counts"]["spans"]) == (2, SPANS + 2)
        assert engine.pending_spans() == 0 and calls == ["record"] * 3
    finally:
        store.close()


def _worker_recv(index: int, fail: Callable[[Any], BaseException | None]
                 ) -> Callable[[Connection], Any]:
    """``Connection.recv`` for the pool's receiver of worker ``index``: each message it
    reads goes to ``fail``, which may return an error to raise instead of the message."""
    real_recv = Connection.recv

    def recv(conn: Connection) -> Any:
        msg = real_recv(conn)
        if threading.current_thread().name == f"otel-eval-worker-{index}-io" and \
                isinstance(msg, tuple) and msg[0] == "done":
            error = fail(msg)
            if error is not None:
                raise error
        return msg

    return recv


def test_a_result_that_cannot_be_read_restarts_its_worker_and_hands_its_traces_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The receiver thread caught only EOFError and OSError from ``recv``: a result that
    could not be unpickled (or a TypeError, a MemoryError) ended the thread without the
    dead-worker path. The worker was never restarted and every trace routed to it stalled
    for ever. Now any failure to read from a worker is its death: killed, counted,
    restarted, its traces handed again."""
    tid = _ids(per_worker=1)[0][0]
    receivers: list[threading.Thread] = []

    def fail(_msg: Any) -> BaseException | None:
        if receivers:
            return None
        receivers.append(threading.current_thread())
        return pickle.UnpicklingError("invalid load key, '\\x00'")

    monkeypatch.setattr(Connection, "recv", _worker_recv(0, fail))
    with running_service(tmp_path, **WORKERS) as h:
        pool = _pool(h)
        first = pool.pids()[0]
        assert _send(h, _trace(tid)) is None
        _release(h)
        poll(lambda: receivers and not receivers[0].is_alive(),
             "worker 0's receiver to have read the result it cannot read")
        assert h.sample("otel_eval_workers_restarts_total", worker="0") == 1
        assert pool.pids()[0] not in (None, first)
        poll(lambda: h.svc.engine.pending_spans() == 0, "the trace to be stored")
        assert set(_stored(h)) == {tid}
        assert h.sample("otel_eval_workers_retried_traces_total") == 1
        assert pool.failure is None and pool.healthy


def test_a_dead_workers_inflight_gauge_is_zero_until_it_is_restarted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """otel_eval_workers_inflight_traces kept the dead worker's count until a restart
    succeeded (minutes with a worker failing to start): it now reads 0 as soon as the
    worker is found dead."""
    tid = _ids(per_worker=1)[0][0]
    with running_service(tmp_path, **WORKERS) as h, \
            _store_locked(tmp_path / "otel-eval.db") as unlock:
        pool = _pool(h)
        seen: list[float | None] = []
        real_restart = pool._restart

        def restart(w: Any) -> None:
            seen.append(h.sample("otel_eval_workers_inflight_traces", worker=str(w.index)))
            real_restart(w)

        monkeypatch.setattr(pool, "_restart", restart)
        assert _send(h, _trace(tid)) is None
        _release(h)
        poll(lambda: h.sample("otel_eval_workers_inflight_traces", worker="0") == 1,
             "worker 0 to hold the trace")
        victim = pool.pids()[0]
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        poll(lambda: seen, "worker 0 to be found dead")
        assert seen == [0]
        unlock()
        poll(lambda: h.svc.engine.pending_spans() == 0, "the trace to be stored")


def test_a_trace_its_worker_stored_before_dying_each_time_keeps_its_evaluation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that died after its commit on every attempt (out of memory pickling a huge
    result): the main process gave up on the trace and stored WorkerLost over the good
    evaluation the worker had stored of that revision. Now the stored evaluation stands
    (done as already evaluated: the delivering sinks get it from the store)."""
    tid = _ids(per_worker=1)[0][0]

    def die(_msg: Any) -> BaseException:  # committed, then killed before its answer is read
        pid = _pool(h).pids()[0]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        return EOFError()

    monkeypatch.setattr(Connection, "recv", _worker_recv(0, die))
    with running_service(tmp_path, **WORKERS, **{"evaluation.max_attempts": 1}) as h:
        assert _send(h, _trace(tid)) is None
        _release(h)
        poll(lambda: h.svc.engine.pending_spans() == 0, "the trace to be finished")
        row = _stored(h)[tid]
        assert not any(f["kind"] == "evaluation_error" for f in row["findings"])
        assert row["counts"]["spans"] == SPANS and not row.get("error")
        assert not h.sample("otel_eval_evaluation_failures_total", stage="evaluate",
                            reason="WorkerLost")
        assert h.sample("otel_eval_evaluation_skipped_total", reason="already_evaluated") == 1
        assert h.sample("otel_eval_workers_restarts_total", worker="0") == 1


def test_a_restarted_worker_predicts_with_the_model_serve_started_with(tmp_path: Path) -> None:
    """A team retraining in place (``otel-eval train --out`` the file serve reads): a worker
    restarted after it (a crash, an OOM kill) loaded the new file, so it predicted with the
    new model under its label while the other worker and the serving process (feedback, the
    rolling AUC) went on with the old one. Every process of one serve predicts with the
    model it started with: the workers get the serving process's model, not its path."""
    from otel_eval.evaluate.predict.config import DEFAULT_MODEL_FILE
    from otel_eval.evaluate.predict.modelfile import write_model

    doc = json.loads(DEFAULT_MODEL_FILE.read_text())
    path = tmp_path / "mine.model.json"
    started = write_model(doc, path).label
    ids = _ids(per_worker=1)
    with running_service(tmp_path, **WORKERS, **{"prediction.model_path": str(path)}) as h:
        pool = _pool(h)
        retrained = write_model({**doc, "intercept": doc["intercept"] + 1.0}, path).label
        assert retrained != started
        victim = pool.pids()[0]
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        poll(lambda: pool.pids()[0] not in (None, victim) and pool.healthy,
             "worker 0 to be restarted")
        for tid in ids[0] + ids[1]:
            assert _send(h, _trace(tid)) is None
        _release(h)
        poll(lambda: h.svc.engine.pending_spans() == 0, "both traces to be stored")
        stored = _stored(h)
        assert {b["prediction"]["model"] for b in stored.values()} == {started}


def test_a_restarted_worker_matches_against_the_references_serve_started_with(
        tmp_path: Path) -> None:
    """A team editing its golden set in place (the file ``detectors.references_path`` names):
    a worker restarted after it (a crash, an OOM kill) read the new file, so its traces were
    matched against the new references while the other worker and the serving process kept
    the old ones. Every process of one serve matches against the references it started
    with: the workers get the serving process's references, not its path."""
    path = tmp_path / "golden.jsonl"
    path.write_text(json.dumps({"task_id": "t1", "calls": []}) + "\n")
    ids = _ids(per_worker=1)
    with running_service(tmp_path, **WORKERS,
                         **{"detectors.references_path": str(path)}) as h:
        pool = _pool(h)
        path.write_text(json.dumps({"task_id": "t1", "calls": [{"name": "search"}]}) + "\n")
        victim = pool.pids()[0]
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        poll(lambda: pool.pids()[0] not in (None, victim) and pool.healthy,
             "worker 0 to be restarted")
        for tid in ids[0] + ids[1]:
            spans = _trace(tid)
            spans[0].attributes["otel_eval.task.id"] = "t1"
            assert _send(h, spans) is None
        _release(h)
        poll(lambda: h.svc.engine.pending_spans() == 0, "both traces to be stored")
        stored = _stored(h)
        assert len(stored) == 2
        assert {b["verdict"]["reference"]["matched"] for b in stored.values()} == {True}


def test_a_truncated_run_the_release_before_stored_is_not_evaluated_again(
        tmp_path: Path) -> None:
    """An upgrade with a truncated run's spool rows left (a kill between the commit and the
    delete, or its forward or events not delivered at the stop): the release before stored
    it with a digest that did not say ``truncated`` (this one's does). Its replay by the new
    release is the same content, so it is ``already_evaluated``: before, it superseded the
    stored run, judged and exported again. A run stored ``complete`` and cut now (a late
    item it had no room for) still supersedes it."""
    evaluator = Evaluator(Config())
    store = Store(str(tmp_path / "s.db"))
    spans = _trace("e" * 32)
    cut = Trace("e" * 32, spans, "truncated")
    # what the release before stored: the digest then hashed a truncated run as complete
    cut.digest = content_digest(dataclasses.replace(cut, status="complete"))
    whole = Trace("f" * 32, _trace("f" * 32), "complete")
    whole.digest = content_digest(whole)
    try:
        [old, kept] = evaluate_and_store(evaluator, store, [cut, whole])
        assert old.evaluation is not None and kept.evaluation is not None
        replay = Trace("e" * 32, spans, "truncated")
        replay.digest = content_digest(replay)
        [out] = evaluate_and_store(evaluator, store, [replay])
        assert (out.evaluation, out.skipped) == (None, ALREADY_EVALUATED)
        now_cut = Trace("f" * 32, whole.spans, "truncated")
        now_cut.digest = content_digest(now_cut)
        [more] = evaluate_and_store(evaluator, store, [now_cut])
        assert more.evaluation is not None and more.superseded
    finally:
        store.close()
