"""A store that refuses writes throttles serve instead of killing it.

SQLite's real "database or disk is full" (``SQLITE_FULL``), raised by capping the writer's own
connection at the pages the file has (``SqliteStore.limit_pages``: ``PRAGMA max_page_count``),
in a ``Service`` on loopback port 0 with a hand-driven clock: the batch is kept (not stored,
still spooled), exports are refused with gRPC RESOURCE_EXHAUSTED and HTTP 429 + Retry-After,
/readyz answers 503 naming the store and why, writes are retried on a capped exponential
back-off of the injected clock, and once the store takes writes again every acknowledged
trace is evaluated and stored once.
"""

from __future__ import annotations

import itertools
import json
import signal
import socket
import sqlite3
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts
from prometheus_client import CollectorRegistry
from support.harness import Harness, running_service
from support.poll import poll

from otel_eval.app.config import Config, replace
from otel_eval.app.service import Service
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.base.model import Span, Trace
from otel_eval.decode import encode
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.stage import evaluate_and_store
from otel_eval.store.failures import write_failure
from otel_eval.store.sqlite import SQLITE_MAX_PAGES, SqliteStore

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
# a tool call's arguments kept in the stored body: a row larger than a page, so storing it
# needs pages the capped file does not have
ARGUMENTS = json.dumps({"query": "q" * 12_000})


def _spans(trace: str) -> list[Span]:
    return [Span(trace, "01" * 8, None, "invoke_agent planner", 1, 9,
                 attributes={"gen_ai.operation.name": "invoke_agent",
                             "gen_ai.agent.name": "planner"}),
            Span(trace, "02" * 8, "01" * 8, "execute_tool search", 2, 8,
                 attributes={"gen_ai.operation.name": "execute_tool",
                             "gen_ai.tool.name": "search",
                             "gen_ai.tool.call.arguments": ARGUMENTS})]


def _request(trace: str) -> bytes:
    return encode.encode_spans(_spans(trace)).SerializeToString()


def _grpc_export(h: Harness, body: bytes) -> grpc.RpcError | None:
    with grpc.insecure_channel(h.grpc_target) as ch:
        call = ch.unary_unary(EXPORT, request_serializer=None,
                              response_deserializer=ts.ExportTraceServiceResponse.FromString)
        try:
            call(body, timeout=10)
        except grpc.RpcError as e:
            return e
    return None


def _http(url: str, body: bytes | None = None) -> tuple[int, dict[str, str], Any]:
    req = urllib.request.Request(url, data=body, method="POST" if body else "GET",
                                 headers={"Content-Type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _failures(h: Harness) -> float:
    return h.sample("otel_eval_store_write_failures_total", reason="disk_full")


def test_a_full_store_throttles_retries_with_backoff_and_loses_nothing(tmp_path: Path) -> None:
    with running_service(tmp_path, **{"store.write_retry_initial_interval_s": 2.0,
                                      "store.write_retry_max_interval_s": 4.0,
                                      "store.write_retry_max_elapsed_s": 0,
                                      "receiver.retry_after_s": 3.0}) as h:
        store = h.svc.store
        assert isinstance(store, SqliteStore)
        store.limit_pages(store.page_count())  # the disk is full from here on
        first, second = "a1" * 16, "b2" * 16
        assert _grpc_export(h, _request(first)) is None  # acknowledged: spooled
        h.release()
        assert store.get(first) is None  # SQLITE_FULL: not stored ...
        assert _failures(h) == 1
        assert h.svc.engine.pending_spans() == 2  # ... but kept, still pending
        assert h.sample("otel_eval_spool_requests") == 1  # and still in the spool

        err = _grpc_export(h, _request(second))
        assert err is not None and err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "store_unavailable" in (err.details() or "")
        code, headers, _ = _http(h.http_url, _request(second))
        assert code == 429 and headers["Retry-After"] == "3"
        assert h.sample("otel_eval_receiver_requests_throttled_total", protocol="grpc",
                        reason="store_unavailable") == 1
        code, _, body = _http(f"{h.admin_url}/readyz")
        reason = json.loads(body)["reason"]
        assert code == 503 and store.location in reason and "disk_full" in reason
        assert "database or disk is full" in reason
        assert _http(f"{h.admin_url}/healthz")[0] == 200  # alive: do not restart it

        # back-off on the engine's clock: 2 s, then 4 s, then capped at 4 s
        for wait_s, failures in ((1.9, 1), (0.2, 2), (3.9, 2), (0.2, 3), (4.1, 4)):
            h.release(after_s=wait_s)
            assert _failures(h) == failures, (wait_s, failures)
        assert store.get(first) is None

        store.limit_pages(SQLITE_MAX_PAGES)  # room again
        h.release(after_s=4.1)
        stored = store.get(first)
        assert stored is not None and stored["steps"][1]["arguments"] == json.loads(ARGUMENTS)
        assert _failures(h) == 4
        assert _http(f"{h.admin_url}/readyz")[0] == 200
        assert _grpc_export(h, _request(second)) is None  # taken again
        h.release()
        assert store.get(second) is not None
        assert h.svc.engine.pending_spans() == 0
        assert h.sample("otel_eval_spool_requests") == 0  # everything acknowledged is done
        completed = [s for m in h.svc.registry.collect() if m.name == "otel_eval_traces_completed"
                     for s in m.samples if s.name.endswith("_total")]
        assert sum(s.value for s in completed) == 2, completed  # each evaluated once


def test_back_off_doubles_to_its_cap_and_gives_up_after_the_bound() -> None:
    now = [0.0]
    health = StoreHealth("s.db", initial_interval_s=1.0, max_interval_s=4.0,
                         max_elapsed_s=10.0, clock=lambda: now[0])
    waits = []
    for _ in range(5):
        health.failed("disk_full", "OperationalError: database or disk is full")
        waits.append(health.retry_in(now[0]))
        now[0] += waits[-1]
    assert waits == [1.0, 2.0, 4.0, 4.0, 4.0]
    now[0] -= 1.0  # a batch handed out before this back-off began, refused inside it
    health.failed("disk_full", "OperationalError: database or disk is full")
    assert health.retry_in(now[0]) == 1.0  # the same attempt: no longer wait
    now[0] += 1.0
    assert health.gave_up(now[0]) and "s.db" in health.give_up_line()
    assert health.recovered() and health.failing is None and not health.gave_up(now[0])
    health.failed("locked", "database is locked")  # a new outage starts its own clock
    assert health.retry_in(now[0]) == 1.0 and not health.gave_up(now[0] + 9.9)


@pytest.mark.parametrize(("error", "reason"), [
    (sqlite3.OperationalError("made by hand, no result code"), "error"),
    (OSError("No space left on device"), "unavailable"),
    (ValueError("a bug, not the store"), None),  # raised, never retried
])
def test_what_counts_as_a_store_error(error: BaseException, reason: str | None) -> None:
    assert write_failure(error) == reason


def test_a_postgresql_server_that_never_answers_is_unavailable_not_one_traces_error() -> None:
    """A connect that times out (psycopg's ``ConnectionTimeout``: no SQLSTATE, a subclass of
    ``OperationalError``; a host gone, an address blackholed) was ``error``, one trace's
    fault: the batch was stored trace by trace, each trace waiting for two connects and its
    error record two more, then kept as ``error``, with the engine's thread held meanwhile
    (here 20 s for two traces; 40 s a trace at the default connect_timeout). Now the store
    refuses the batch at once as ``unavailable``, as any lost connection."""
    from otel_eval.store.postgresql import PostgresStore

    traces = [Trace(f"{i:032x}", _spans(f"{i:032x}"), "complete") for i in (1, 2)]
    with socket.create_server(("127.0.0.1", 0)) as silent:  # takes the connect, never answers
        url = f"postgresql://otel@127.0.0.1:{silent.getsockname()[1]}/x?connect_timeout=2"
        outcomes = evaluate_and_store(Evaluator(Config()), PostgresStore(url), traces)
    assert [(o.unstored, o.error) for o in outcomes] == [
        ("unavailable", "ConnectionTimeout: connection timeout expired")] * 2


def test_sqlite_result_codes_name_the_reason(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "full.db", isolation_level=None)
    db.execute("CREATE TABLE t (x)")
    db.execute(f"PRAGMA max_page_count = {db.execute('PRAGMA page_count').fetchone()[0]}")
    with pytest.raises(sqlite3.OperationalError) as full:
        db.execute("INSERT INTO t VALUES (?)", ("x" * 100_000,))
    assert write_failure(full.value) == "disk_full"
    ro = sqlite3.connect(f"file:{tmp_path / 'full.db'}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError) as readonly:
        ro.execute("INSERT INTO t VALUES (1)")
    assert write_failure(readonly.value) == "read_only"


def test_a_stop_while_the_store_is_full_keeps_the_trace_for_the_next_start(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    trace = "f4" * 16
    with running_service(tmp_path) as h:
        store = h.svc.store
        assert isinstance(store, SqliteStore)
        store.limit_pages(store.page_count())
        assert _grpc_export(h, _request(trace)) is None
        h.release()
        assert _failures(h) == 1
        h.svc.shutdown(deadline_s=5)  # SIGTERM during the outage: stops, stores nothing
        assert "1 trace(s) not stored" in caplog.text and "disk_full" in caplog.text
        assert h.sample("otel_eval_spool_requests") == 1
    with running_service(tmp_path) as again:  # room again (a new connection: no cap)
        assert again.svc.store.get(trace) is None
        again.release()  # replayed from the spool at start, released, stored
        stored = again.svc.store.get(trace)
        assert stored is not None and stored["steps"][1]["arguments"] == json.loads(ARGUMENTS)
        assert again.sample("otel_eval_spool_requests") == 0


def test_a_store_lost_after_the_commit_still_finishes_the_stored_trace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``put_many`` committed, then the read of outcomes recorded meanwhile failed (the
    connection lost right after the commit): the batch was reported refused although it was
    stored. Kept and handed again, it came back ``already_evaluated``: the stored trace was
    never counted, exported or judged. A failure after the commit now costs only what it
    would have added (as the agent history's), never the trace's own finish."""
    trace = "ab" * 16
    with running_service(tmp_path) as h:
        store = h.svc.store
        real, reads = store.feedback_many, []

        def feedback_many(trace_ids: Any) -> Any:
            reads.append(trace_ids)
            if len(reads) == 2:  # the read after put_many's commit
                raise OSError("connection lost")
            return real(trace_ids)

        monkeypatch.setattr(store, "feedback_many", feedback_many)
        assert _grpc_export(h, _request(trace)) is None
        h.release()
        h.clock.now += 600  # past any back-off: a kept trace would be handed again
        h.svc.engine.process()
        assert store.get(trace) is not None
        assert h.sample("otel_eval_store_write_failures_total", reason="unavailable") == 0
        assert h.sample("otel_eval_evaluation_skipped_total", reason="already_evaluated") == 0
        assert h.sample("otel_eval_traces_completed_total", service="unknown",
                        agent="planner", status="complete") == 1


def test_readiness_is_false_while_the_spool_refuses_every_export(tmp_path: Path) -> None:
    """A full disk under the spool refuses every export (``spool_error``): /readyz answers
    503 naming the spool, so a load balancer (or the collector's loadbalancing exporter)
    sends to another replica, until an append goes through or its back-off (the store's
    write retries' schedule) ends, so traffic comes back to find out; /healthz stays 200
    (a full disk is no reason to restart). Before, /readyz stayed 200 while every export
    was refused."""
    with running_service(tmp_path, **{"store.write_retry_initial_interval_s": 2.0,
                                      "store.write_retry_max_interval_s": 4.0}) as h:
        spool = h.svc.engine.durability.spool
        assert spool is not None
        assert _http(f"{h.admin_url}/readyz")[0] == 200
        pages = spool._db.execute("PRAGMA page_count").fetchone()[0]
        spool._db.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full
        big = Span("a1" * 16, "01" * 8, None, "invoke_agent planner", 1, 9,
                   attributes={"payload": "x" * 300_000})
        request = encode.encode_spans([big]).SerializeToString()
        err = _grpc_export(h, request)
        assert err is not None and "spool_error" in (err.details() or "")
        code, _, body = _http(f"{h.admin_url}/readyz")
        reason = json.loads(body)["reason"]
        assert code == 503 and spool.path in reason and "full" in reason
        assert _http(f"{h.admin_url}/healthz")[0] == 200  # alive: do not restart it
        h.clock.now += 2.1  # the back-off is over: traffic may come back to find out
        assert _http(f"{h.admin_url}/readyz")[0] == 200
        assert _grpc_export(h, request) is not None  # still full: refused again
        h.clock.now += 2.1  # the next back-off is longer (4 s)
        assert _http(f"{h.admin_url}/readyz")[0] == 503
        spool._db.execute("PRAGMA max_page_count = 1000000")  # room again
        h.clock.now += 2.0
        assert _grpc_export(h, request) is None  # taken: ready at once
        assert _http(f"{h.admin_url}/readyz")[0] == 200


class _Later:
    """An evaluation stage that finishes its batches when told, in any order, as worker
    processes do (``run`` returns at once; each batch is done from the pool's thread)."""

    def __init__(self, stage: Any) -> None:
        self.stage = stage
        self.batches: list[tuple[list[Any], Any]] = []

    def run(self, jobs: list[Any], done: Any) -> None:
        self.batches.append((jobs, done))

    def finish(self, i: int) -> None:
        self.stage.run(*self.batches[i])

    def drain(self, deadline_s: float) -> bool:
        return True

    healthy = True


def test_a_batch_that_writes_nothing_does_not_end_a_full_stores_back_off(tmp_path: Path) -> None:
    """The store refused a batch (a full disk); a batch handed out beside it (worker
    processes hold several) that writes nothing (no agent run in it) is finished after it.
    The store took no write: it is still refusing, /readyz still 503 and the back-off still
    growing towards the give-up. Before, that batch ended the refusal: /readyz answered 200
    and the receivers took data again until the next run was refused, the back-off began
    again at its first interval and the give-up bound never came, while the disk stayed
    full. The refused batch, stored once there is room, ends it."""
    from prometheus_client import CollectorRegistry

    from otel_eval.app.config import Config, replace
    from otel_eval.assemble.engine import Engine
    from otel_eval.evaluate.evaluator import Evaluator
    from otel_eval.evaluate.stage import InProcess
    from otel_eval.store.sqlite import SQLITE_MAX_PAGES
    from otel_eval.telemetry.metrics import Metrics

    now = [0.0]
    cfg = replace(Config(), **{"assembly.grace_s": 1.0})
    store = SqliteStore(str(tmp_path / "store.db")).open()
    health = StoreHealth(store.location, clock=lambda: now[0])
    stage = _Later(InProcess(Evaluator(cfg), store))
    engine = Engine(stage, health, Metrics(CollectorRegistry()), assembly=cfg.assembly,
                    clock=lambda: now[0], batch_size=1)
    try:
        store.limit_pages(store.page_count())  # the disk is full from here on
        run, setup = "a1" * 16, "c3" * 16
        engine.submit([*_spans(run),
                       Span(setup, "03" * 8, None, "create_agent planner", 1, 2,
                            attributes={"gen_ai.operation.name": "create_agent",
                                        "gen_ai.agent.name": "planner"})])
        now[0] += 1000
        engine.tick()
        assert engine.process() == 2 and len(stage.batches) == 2  # both handed out
        first = 0 if stage.batches[0][0][0].trace.trace_id == run else 1
        stage.finish(first)  # refused: the disk is full
        assert health.failing == "disk_full"
        stage.finish(1 - first)  # no run in it: nothing written
        assert health.failing == "disk_full"  # still refusing: /readyz 503
        assert health.describe() is not None
        store.limit_pages(SQLITE_MAX_PAGES)  # room again
        now[0] += 60
        assert engine.process() == 1  # the refused batch, handed again
        stage.finish(2)
        assert store.get(run) is not None and health.failing is None
    finally:
        store.close()


def test_serve_gives_up_in_one_escaped_line(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The give-up line quotes the driver's message, which can quote a value from span
    content (a PostgreSQL error's DETAIL names the row's key): it was printed raw to
    stderr, past the escaping log formatter, so an ESC or a carriage return in it reached
    the operator's terminal. ``serve`` in-process, its clock jumping 10 s a reading (the
    grace and ``write_retry_max_elapsed_s`` pass at once), every write refused with such a
    message."""
    cfg = replace(Config(), **{
        "receiver.grpc_endpoint": "127.0.0.1:0", "receiver.http_endpoint": "127.0.0.1:0",
        "admin.endpoint": "127.0.0.1:0", "store.path": str(tmp_path / "otel-eval.db"),
        "evaluation.workers": 1, "store.write_retry_max_elapsed_s": 1.0})
    ticks = itertools.count(1000, 10)
    svc = Service(cfg, registry=CollectorRegistry(), clock=lambda: float(next(ticks)))

    def refused(*_: object) -> list[bool]:
        raise sqlite3.OperationalError("key (trace_id)=(\x1b]52;c;cHduZWQ=\x07\rPASS) refused")

    svc.store.put_many = refused  # type: ignore[method-assign]

    def export() -> None:  # once serve has bound its port
        port = poll(lambda: svc.http is not None and svc.http.port, "serve's HTTP port")
        _http(f"http://127.0.0.1:{port}/v1/traces", _request("c3" * 16))

    sender = threading.Thread(target=export, daemon=True)
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    sender.start()
    try:
        assert svc.run_until_signal() == 1
    finally:
        signal.signal(signal.SIGTERM, handlers[0])
        signal.signal(signal.SIGINT, handlers[1])
        sender.join(10)
    said = [line for line in capsys.readouterr().err.splitlines()
            if line.startswith("otel-eval:")]
    assert len(said) == 1 and "giving up" in said[0], said
    assert "\\x1b]52;c;cHduZWQ=\\x07" in said[0], said  # escaped, not sent
    assert all(c.isprintable() for c in said[0]), said
