"""SIGTERM on a real ``otel-eval serve`` process loses nothing that was acknowledged, and
judges nothing that has not ended.

The client is the official SDK exporter (``OTLPSpanExporter.export``); a span counts as
acknowledged when ``export`` returned SUCCESS for its batch. Ended runs are stored at shutdown
as ``complete``; runs still going (root sent without an end time, or root not sent yet) are
left unjudged in the spool: nothing of them is stored. The next serve on the same store
resumes them with their timers, and stores every acknowledged span. Read back from the SQLite
file after the process has exited with code 0.

A run cut in half by SIGTERM, the rest sent after the restart, is evaluated once, whole,
without a non-termination finding (issue 30), with one serve process and with ``--workers 2``.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanContext, TraceFlags
from support.poll import poll
from support.served import (
    RESOURCE,
    Served,
    exporter,
    ids,
    sdk_span,
    serve,
    stored,
    stored_span_ids,
)

pytestmark = pytest.mark.slow

# Long idle timeout: open traces can only be released by the shutdown itself. Two evaluation
# worker processes (serve --workers 2), whatever the machine's cores.
CONFIG = {"assembly": {"grace_s": 0.3, "idle_timeout_s": 600.0,
                       "max_trace_duration_s": 3600.0}, "evaluation": {"workers": 2}}
# The restart that checks nothing was lost: runs still open are due at once (their spans came
# more than a second ago: the spool keeps the time they were received at).
RESUME = {**CONFIG, "assembly": {**CONFIG["assembly"], "idle_timeout_s": 1.0}}


def _trace(kind: str, children: int = 4) -> tuple[str, list[ReadableSpan]]:
    """``complete``: ended root; ``open_root``: root sent un-ended; ``no_root``: children only."""
    tid, root = os.urandom(16), os.urandom(8)
    now = time.time_ns()
    spans = [sdk_span(tid, os.urandom(8), root, f"chat {i}", True, now + i)
             for i in range(children)]
    if kind != "no_root":
        spans.append(sdk_span(tid, root, b"", "invoke_agent", kind == "complete", now))
    return tid.hex(), spans


def _check_store(srv: Served, acked: set[tuple[str, str]],
                 expected_status: dict[str, str]) -> None:
    bodies = stored(srv.store)
    lost = acked - stored_span_ids(bodies)
    assert not lost, f"{len(lost)} acknowledged spans not stored, e.g. {sorted(lost)[:3]}"
    for tid, status in expected_status.items():
        assert bodies[tid]["status"] == status, tid


def _resume(tmp: Path, acked: set[tuple[str, str]], expected_status: dict[str, str]) -> None:
    """A second serve on the same store (and spool) stores the runs the stop left open."""
    with serve(tmp, RESUME) as srv:
        poll(lambda: not acked - stored_span_ids(stored(srv.store)),
             "the runs left open to be stored", timeout_s=60)
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(60) == 0, srv.log_tail()
    _check_store(srv, acked, expected_status)


def test_sigterm_stores_ended_runs_and_leaves_open_ones_to_the_next_start(
        tmp_path: Path) -> None:
    kinds = ["complete"] * 10 + ["open_root"] * 15 + ["no_root"] * 15
    traces = dict(_trace(k) for k in kinds)
    status = {tid: "complete" if k == "complete" else "incomplete"
              for tid, k in zip(traces, kinds, strict=True)}
    acked: set[tuple[str, str]] = set()
    with serve(tmp_path, CONFIG) as srv:
        client = exporter(srv.grpc_target)
        items = list(traces.values())
        for i in range(0, len(items), 8):  # requests mixing several traces
            batch = [s for spans in items[i:i + 8] for s in spans]
            assert client.export(batch) == SpanExportResult.SUCCESS
            acked |= ids(batch)
        client.shutdown()
        m = srv.metrics()  # the SDK does not surface partial success: the server's count does
        assert m.get("otel_eval_receiver_spans_rejected_total", 0.0) == 0
        assert m["otel_eval_receiver_spans_accepted_total"] == len(acked)
        # Acknowledged means held by assembly, so the open traces are there already.
        assert m["otel_eval_assembly_open_traces"] >= sum(k != "complete" for k in kinds)
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(60) == 0, srv.log_tail()
    # a stop is no verdict: only the ended runs are stored, every one of them
    ended = {tid for tid, st in status.items() if st == "complete"}
    assert set(stored(srv.store)) == ended
    _check_store(srv, {a for a in acked if a[0] in ended}, {t: "complete" for t in ended})
    _resume(tmp_path, acked, status)
    assert len(acked) == sum(len(s) for s in traces.values())


def _stream(target: str, acked: set[tuple[str, str]], stop: threading.Event) -> None:
    """An agent fleet's exporter: requests of fresh traces (half of them still running, root
    not sent) until the service stops answering; only SUCCESS counts as acknowledged."""
    client = exporter(target, timeout_s=5.0)
    n = 0
    try:
        while not stop.is_set():
            batch = [s for j in range(5)
                     for s in _trace("complete" if (n + j) % 2 else "no_root")[1]]
            n += 5
            if client.export(batch) != SpanExportResult.SUCCESS:
                return  # the service is going away: this batch was not acknowledged
            acked |= ids(batch)
    finally:
        client.shutdown()


def test_sigterm_under_load_loses_no_acknowledged_span_across_the_restart(
        tmp_path: Path) -> None:
    per_client: list[set[tuple[str, str]]] = [set() for _ in range(3)]
    stop = threading.Event()
    with serve(tmp_path, CONFIG) as srv:
        clients = [threading.Thread(target=_stream, args=(srv.grpc_target, acked, stop))
                   for acked in per_client]
        for c in clients:
            c.start()
        try:
            poll(lambda: sum(len(a) for a in per_client) >= 1500, "1500 acknowledged spans",
                 timeout_s=60)
            srv.proc.send_signal(signal.SIGTERM)  # while the clients keep sending
            assert srv.proc.wait(60) == 0, srv.log_tail()
        finally:
            stop.set()
            for c in clients:
                c.join(60)
    assert not any(c.is_alive() for c in clients)
    acked = set().union(*per_client)
    assert len(acked) >= 1500
    assert all(b["status"] == "complete" for b in stored(srv.store).values())
    _resume(tmp_path, acked, {})


def test_sigterm_waits_for_the_worker_processes_to_store_what_they_hold(tmp_path: Path) -> None:
    """The store's write lock, taken by the test, holds released traces inside the workers:
    SIGTERM must wait for the workers to store all of it (the runs still open stay open)."""
    kinds = ["complete"] * 10 + ["no_root"] * 5
    traces = dict(_trace(k) for k in kinds)
    status = {tid: "complete" if k == "complete" else "incomplete"
              for tid, k in zip(traces, kinds, strict=True)}
    acked: set[tuple[str, str]] = set()
    with serve(tmp_path, CONFIG) as srv:
        client = exporter(srv.grpc_target)
        batch = [s for spans in traces.values() for s in spans]
        assert client.export(batch) == SpanExportResult.SUCCESS
        acked |= ids(batch)
        client.shutdown()
        lock = sqlite3.connect(srv.store, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        try:
            poll(lambda: srv.metrics().get("otel_eval_workers_inflight_traces", 0) > 0,
                 "released traces to be inside the workers", timeout_s=60)
            srv.proc.send_signal(signal.SIGTERM)
            poll(lambda: not srv.ready(), "serve to begin shutting down", timeout_s=60)
            assert srv.proc.poll() is None  # waiting for its workers, which cannot store yet
            assert not stored(srv.store)
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        assert srv.proc.wait(60) == 0, srv.log_tail()
    ended = {tid for tid, st in status.items() if st == "complete"}
    assert set(stored(srv.store)) == ended
    _resume(tmp_path, acked, status)


def _agent_run(steps: int) -> tuple[str, list[ReadableSpan]]:
    """A run in the order the SDK exports it: per step a model call (100 input tokens) and a
    tool call, each ended, then the root agent span."""
    tid, root = os.urandom(16), os.urandom(8)
    t0 = time.time_ns()

    def span(name: str, sid: bytes, parent: bytes, start: int, attrs: dict[str, Any]
             ) -> ReadableSpan:
        def ctx(s: bytes) -> SpanContext:
            return SpanContext(int.from_bytes(tid), int.from_bytes(s), is_remote=False,
                               trace_flags=TraceFlags(TraceFlags.SAMPLED))
        end = t0 + 10_000_000 * (2 * steps + 1) if not parent else start + 4_000_000
        return ReadableSpan(name, context=ctx(sid), parent=ctx(parent) if parent else None,
                            resource=RESOURCE, attributes=attrs, start_time=start,
                            end_time=end)

    spans = []
    for i in range(steps):
        spans.append(span("chat gpt-4o", os.urandom(8), root, t0 + 10_000_000 * (2 * i + 1), {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
            "gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 10}))
        spans.append(span(f"execute_tool lookup{i}", os.urandom(8), root,
                          t0 + 10_000_000 * (2 * i + 2), {
                              "gen_ai.operation.name": "execute_tool",
                              "gen_ai.tool.name": f"lookup{i}"}))
    spans.append(span("invoke_agent planner", root, b"", t0, {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"}))
    return tid.hex(), spans


@pytest.mark.parametrize("workers", [1, 2])
def test_a_run_cut_by_sigterm_is_evaluated_once_whole_after_the_restart(
        tmp_path: Path, workers: int) -> None:
    config = {**CONFIG, "evaluation": {"workers": workers}}
    tid, spans = _agent_run(6)  # 13 spans: 6 model calls, 6 tool calls, the root
    head, tail = spans[:7], spans[7:]  # stopped after the 4th model call
    with serve(tmp_path, config) as srv:
        client = exporter(srv.grpc_target)
        assert client.export(head) == SpanExportResult.SUCCESS
        client.shutdown()
        assert srv.metrics()["otel_eval_assembly_open_traces"] == 1
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(60) == 0, srv.log_tail()
    assert stored(srv.store) == {}  # no verdict on a run cut by a stop
    assert "1 run(s) in flight left unjudged" in srv.log.read_text()

    with serve(tmp_path, config) as srv:
        assert srv.metrics()["otel_eval_spool_spans_replayed_total"] == len(head)
        client = exporter(srv.grpc_target)
        assert client.export(tail) == SpanExportResult.SUCCESS
        client.shutdown()
        body = poll(lambda: stored(srv.store).get(tid), "the whole run to be stored",
                    timeout_s=60)
        m = srv.metrics()
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(60) == 0, srv.log_tail()
    assert body["status"] == "complete" and body["revision"] == 0
    assert body["counts"] == {"spans": 13, "steps": 6, "llm_calls": 6, "tool_calls": 6,
                              "errors": 0}
    assert body["usage"]["input_tokens"] == 600
    assert not [f for f in body["findings"] if f["detector"] == "non_termination"]
    assert m.get("otel_eval_traces_non_terminated_total", 0.0) == 0
    assert m.get("otel_eval_traces_superseded_total", 0.0) == 0
    assert m["otel_eval_assembly_traces_released_total"] == 1
    assert list(stored(srv.store)) == [tid]  # evaluated once
