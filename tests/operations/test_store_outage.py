"""A PostgreSQL store that goes away under a real ``otel-eval serve`` (two worker processes)
and comes back: the server stopped with ``pg_ctl`` and started again on the same port.

While it is gone, the trace acknowledged before is kept (spooled, not stored), new exports
are refused with gRPC RESOURCE_EXHAUSTED and HTTP 429 + Retry-After, /readyz answers 503
naming the store; once it is back every acknowledged trace is stored. When it stays away past
``store.write_retry_max_elapsed_s``, serve exits 1 with one line naming the store, and the
next serve stores what the first had acknowledged. Before: serve exited with code 0 after
refusing nothing.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts
from support.poll import poll
from support.ports import free_port
from support.postgresql_server import PostgresServer

from otel_eval.base.model import Span
from otel_eval.decode import encode

ROOT = Path(__file__).resolve().parents[2]
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
pytestmark = pytest.mark.postgres  # a server of its own, stopped and started mid-test
WAIT_S = 90.0  # a bound on waiting for a condition on a loaded machine, not a timing


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    """A server of this module's own: it is stopped and started again mid-test."""
    with PostgresServer() as server:
        yield server


class Serve:
    def __init__(self, tmp_path: Path, url: str, max_elapsed_s: float) -> None:
        self.grpc, self.http, self.admin = free_port(), free_port(), free_port()
        self.db = tmp_path / "otel-eval.db"
        config = tmp_path / "config.yaml"
        config.write_text(json.dumps({  # JSON is YAML
            "receiver": {"grpc_endpoint": f"127.0.0.1:{self.grpc}",
                         "http_endpoint": f"127.0.0.1:{self.http}", "retry_after_s": 2},
            "admin": {"endpoint": f"127.0.0.1:{self.admin}"},
            "store": {"url": url, "path": str(self.db),
                      "write_retry_initial_interval_s": 0.2,
                      "write_retry_max_interval_s": 0.5,
                      "write_retry_max_elapsed_s": max_elapsed_s},
            "assembly": {"grace_s": 0.1},
            "evaluation": {"workers": 2},
            "issues": {"interval_s": 0}}))
        self.stderr = tmp_path / "serve.stderr"
        self._err = self.stderr.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "otel_eval", "serve", "--config", str(config)],
            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
            stderr=self._err)

    def get(self, path: str) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}{path}", timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except OSError:
            return 0, b""

    def export(self, body: bytes) -> grpc.RpcError | None:
        with grpc.insecure_channel(f"127.0.0.1:{self.grpc}") as ch:
            call = ch.unary_unary(EXPORT, request_serializer=None,
                                  response_deserializer=ts.ExportTraceServiceResponse.FromString)
            try:
                call(body, timeout=10)
            except grpc.RpcError as e:
                return e
        return None

    def post(self, body: bytes) -> tuple[int, dict[str, str]]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.http}/v1/traces", data=body,
                                     headers={"Content-Type": "application/x-protobuf"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers)

    def spooled(self) -> int:
        with sqlite3.connect(f"{self.db}-spool") as c:
            return int(c.execute("SELECT count(*) FROM spool_requests").fetchone()[0])

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(WAIT_S)
        finally:
            self._err.close()


def _request(trace: str) -> bytes:
    root = Span(trace, "01" * 8, None, "invoke_agent planner", 1, 9,
                attributes={"gen_ai.operation.name": "invoke_agent",
                            "gen_ai.agent.name": "planner"})
    chat = Span(trace, "02" * 8, "01" * 8, "chat gpt-4o", 2, 8,
                attributes={"gen_ai.operation.name": "chat"})
    return encode.encode_spans([root, chat]).SerializeToString()


def _stored(serve: Serve, trace: str) -> bool:
    return serve.get(f"/v1/evaluations/{trace}")[0] == 200


def test_store_goes_away_and_comes_back(pg: PostgresServer, tmp_path: Path) -> None:
    url = pg.create_database()
    serve = Serve(tmp_path, url, max_elapsed_s=0)
    try:
        poll(lambda: serve.get("/readyz")[0] == 200, "serve is ready", timeout_s=WAIT_S)
        pg.pause()
        first, second = "c1" * 16, "d2" * 16
        assert serve.export(_request(first)) is None  # acknowledged: spooled
        poll(lambda: serve.get("/readyz")[0] == 503, "the store's refusal shows", timeout_s=WAIT_S)
        reason = json.loads(serve.get("/readyz")[1])["reason"]
        assert f"127.0.0.1:{pg.port}" in reason and "unavailable" in reason
        assert serve.get("/healthz")[0] == 200
        err = serve.export(_request(second))
        assert err is not None and err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        code, headers = serve.post(_request(second))
        assert code == 429 and headers["Retry-After"] == "2"
        assert serve.spooled() == 1  # the acknowledged one, kept
        assert serve.proc.poll() is None  # still serving
        pg.resume()
        poll(lambda: _stored(serve, first), "the kept trace is stored", timeout_s=WAIT_S)
        poll(lambda: serve.get("/readyz")[0] == 200, "ready again", timeout_s=WAIT_S)
        assert serve.export(_request(second)) is None
        poll(lambda: _stored(serve, second), "the second trace is stored", timeout_s=WAIT_S)
        poll(lambda: serve.spooled() == 0, "the spool is empty", timeout_s=WAIT_S)
        metrics = serve.get("/metrics")[1].decode()
        assert 'otel_eval_store_write_failures_total{reason="unavailable"}' in metrics
    finally:
        code = serve.stop()
        if pg.paused:
            pg.resume()
    assert code == 0, serve.stderr.read_text()


def test_serve_gives_up_with_exit_1_naming_the_store(pg: PostgresServer,
                                                     tmp_path: Path) -> None:
    url = pg.create_database()
    serve = Serve(tmp_path, url, max_elapsed_s=1.0)
    trace = "e3" * 16
    try:
        poll(lambda: serve.get("/readyz")[0] == 200, "serve is ready", timeout_s=WAIT_S)
        pg.pause()
        assert serve.export(_request(trace)) is None  # acknowledged: spooled
        code = serve.proc.wait(WAIT_S)
    finally:
        serve.stop()
        if pg.paused:
            pg.resume()
    stderr = serve.stderr.read_text()
    assert code == 1, stderr
    said = [line for line in stderr.splitlines() if line.startswith("otel-eval:")]
    assert len(said) == 1 and "Traceback" not in stderr, stderr
    assert f"127.0.0.1:{pg.port}" in said[0] and "giving up" in said[0], said
    assert serve.spooled() == 1  # nothing acknowledged lost: the next serve stores it
    restarted = Serve(tmp_path, url, max_elapsed_s=0)
    try:
        poll(lambda: _stored(restarted, trace), "the next serve stored it", timeout_s=WAIT_S)
        poll(lambda: restarted.spooled() == 0, "the spool is empty", timeout_s=WAIT_S)
    finally:
        assert restarted.stop() == 0, restarted.stderr.read_text()
