"""SIGTERM on a real ``otel-eval serve`` process loses nothing that was acknowledged.

The client is the official SDK exporter (``OTLPSpanExporter.export``); a span counts as
acknowledged when ``export`` returned SUCCESS for its batch. Open traces (root sent without an
end time, or root not sent yet - an agent still running) are released at shutdown as
``incomplete`` and stored with every acknowledged span; complete ones as ``complete``. Read back
from the SQLite file after the process has exited with code 0.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from support.poll import poll
from support.served import Served, exporter, ids, sdk_span, serve, stored, stored_span_ids

pytestmark = pytest.mark.slow

# Long idle timeout: open traces can only be released by the shutdown itself. Two evaluation
# worker processes (serve --workers 2), whatever the machine's cores.
CONFIG = {"assembly": {"grace_s": 0.3, "idle_timeout_s": 600.0,
                       "max_trace_duration_s": 3600.0}, "evaluation": {"workers": 2}}


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


def test_sigterm_releases_open_traces_and_keeps_every_acked_span(tmp_path: Path) -> None:
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
    _check_store(srv, acked, status)
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


def test_sigterm_under_load_loses_no_acknowledged_span(tmp_path: Path) -> None:
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
    _check_store(srv, acked, {})


def test_sigterm_waits_for_the_worker_processes_to_store_what_they_hold(tmp_path: Path) -> None:
    """The store's write lock, taken by the test, holds released traces inside the workers:
    SIGTERM must release the open traces and wait for the workers to store all of it."""
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
    _check_store(srv, acked, status)
