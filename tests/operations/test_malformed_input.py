"""Issue 21 (answers that never come): every malformed input gets a 4xx naming what is wrong.

Before, ``Content-Length: \\xb2`` (str.isdigit takes "²", int() does not), ``limit=²`` and a
forged cursor holding a number past int64 raised inside the handler: the connection closed
with a traceback and no answer. A span ending at 2^64-1 ns was accepted and added 1.8e10 s to
the trace duration histogram.
"""

from __future__ import annotations

import base64
import json
import socket
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from support.harness import Harness, running_service

from otel_eval.base.model import Span
from otel_eval.decode import encode


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    with running_service(tmp_path) as harness:
        yield harness  # type: ignore[misc]


def _exchange(port: int, raw: bytes) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(raw)
        data = b""
        while piece := s.recv(65536):
            data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    return (int(head.split(b" ", 2)[1]) if head else 0), body


@pytest.mark.parametrize(("listener", "path", "ctype"), [
    ("http", "/v1/traces", "application/json"),
    ("admin", "/v1/feedback", "application/json"),
])
def test_a_content_length_of_non_ascii_digits_is_a_400_naming_it(
        h: Harness, listener: str, path: str, ctype: str) -> None:
    assert h.svc.http is not None
    port = h.svc.http.port if listener == "http" else h.svc.admin.port
    status, body = _exchange(port, f"POST {path} HTTP/1.1\r\nHost: localhost\r\n"
                             f"Content-Type: {ctype}\r\nContent-Length: ".encode()
                             + b"\xb2\r\n\r\n{}")
    assert status == 400
    assert "Content-Length" in json.loads(body)["message" if listener == "http" else "error"]


def _get(h: Harness, target: str) -> tuple[int, dict[str, object]]:
    status, body = _exchange(h.svc.admin.port, f"GET {target} HTTP/1.1\r\nHost: localhost\r\n"
                             "Connection: close\r\n\r\n".encode())
    return status, json.loads(body)


def _cursor(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


@pytest.mark.parametrize(("target", "param"), [
    ("/v1/evaluations?limit=%C2%B2", "limit"),  # "²"
    ("/v1/evaluations?limit=%D9%A1%D9%A2", "limit"),  # Arabic-Indic "12": int() reads it
    ("/v1/evaluations?limit=" + "9" * 5000, "limit"),  # past int()'s digit limit
    ("/v1/evaluations?cursor=" + _cursor("9" * 30 + ":" + "ab" * 16), "cursor"),
    ("/v1/evaluations?cursor=" + _cursor(str(2**63) + ":" + "ab" * 16), "cursor"),
    ("/v1/evaluations?cursor=" + _cursor("12:not-a-trace-id"), "cursor"),
    ("/v1/evaluations?cursor=" + _cursor("\u00b2:" + "ab" * 16), "cursor"),
], ids=["limit-superscript", "limit-arabic-indic", "limit-5000-digits", "cursor-30-digits",
        "cursor-2^63", "cursor-bad-trace-id", "cursor-superscript"])
def test_a_bad_query_parameter_is_a_400_naming_it(h: Harness, target: str, param: str) -> None:
    status, body = _get(h, target)
    assert status == 400
    assert body["parameter"] == param


def test_the_cursor_the_api_returns_still_pages(h: Harness) -> None:
    status, body = _get(h, "/v1/evaluations?cursor=" + _cursor(f"{2**63 - 1}:" + "ab" * 16))
    assert status == 200 and body["evaluations"] == []


def test_a_span_ending_at_2_64_ns_is_rejected_with_a_reason_not_measured(h: Harness) -> None:
    trace = "cd" * 16
    spans = [Span(trace, f"{1:016x}", None, "invoke_agent", 1_700_000_000 * 10**9,
                  1_700_000_001 * 10**9),
             Span(trace, f"{2:016x}", f"{1:016x}", "chat", 1_700_000_000 * 10**9, 2**64 - 1),
             Span(trace, f"{3:016x}", f"{1:016x}", "chat", 1_700_000_000 * 10**9,
                  (1_700_000_000 + 400 * 86400) * 10**9)]  # a span of 400 days
    assert h.svc.http is not None
    body = encode.encode_spans(spans).SerializeToString()
    status, answer = _exchange(h.svc.http.port, (
        "POST /v1/traces HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-protobuf\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body)
    assert status == 200
    resp = ExportTraceServiceResponse.FromString(answer)
    assert resp.partial_success.rejected_spans == 2
    assert "invalid_timestamp" in resp.partial_success.error_message
    assert h.sample("otel_eval_receiver_spans_rejected_total", protocol="http",
                    reason="invalid_timestamp") == 2
    assert h.release() == 1
    stored = h.svc.store.get(trace)
    assert stored is not None and stored["duration_s"] == 1.0
    sums = [s.value for m in h.svc.registry.collect()
            if m.name == "otel_eval_trace_duration_seconds"
            for s in m.samples if s.name.endswith("_sum")]
    assert sums == [1.0]  # not 1.8e10 s
