"""The OTLP/HTTP and OTLP/gRPC doors under hostile input (whoever reaches a port is hostile):
a bounded, deterministic Hypothesis run (``derandomize=True``) of requests through the handler the
receiver runs (``receive.http.make_handler``: token check, routing, content types, the body's
framing and compression, the protobuf and OTLP/JSON decoders, ingest) into a running service.

Generated (``otlp_requests``): traces and GenAI-event logs requests whose fields are what no
SDK writes (ids of any length, zero ids, times up to 2^64-1, open enums past their values,
attribute values of every kind nested up to 5,000 deep, 20,000-character strings, JSON and
Python-repr text in attributes), as protobuf or OTLP/JSON; then perhaps damaged (bytes
truncated, flipped or inserted; OTLP/JSON with fields of the wrong kind or 200,000 digits;
random bytes), gzip- or deflate-compressed or a truncated gzip, under any content type,
method and path.

For every answer: one of the statuses the OTLP/HTTP specification gives (200, 400, 404, 405,
413, 415, 429), never a 5xx nor an exception out of the handler; a refusal is a
google.rpc.Status that says why, in the request's encoding where the specification asks for
it, within ``ERROR_BYTES`` whatever the request's size; a 200 is an Export response whose
partial success counts at most the spans sent and says why when it counts any; an undamaged
request is accounted in full (received = accepted + rejected with a reason, the logs' records
as accepted + ignored + rejected). The protobuf bodies also go over the service's gRPC port
through a real channel: OK within what was sent, INVALID_ARGUMENT saying why, or
RESOURCE_EXHAUSTED, never UNKNOWN or INTERNAL (an exception out of the servicer). After it
all, an SDK run is still taken and evaluated, and every run the service stored has a verdict.

What the properties found is kept below them as plain regression tests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from admin_requests import Sent, request_of
from google.protobuf import json_format
from google.rpc import status_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)
from otlp_requests import JSON, METHODS, ODD_CONTENT_TYPES, PATHS, PROTOBUF, Body, bodies
from support.harness import Harness, emit_agent_run, running_service

from otel_eval.receive.grpc import LOGS_SERVICE, SERVICE
from otel_eval.receive.http import make_handler
from otel_eval.receive.httpmessage import Handler, Response

EXAMPLES = {"bodies": 300, "requests": 120, "grpc": 100}
MAX_BODY = 256 * 1024  # receiver.max_message_bytes here: some generated bodies pass it
ERROR_BYTES = 4096  # a refusal: why, with at most a short quote of the input
ANSWER_BYTES = 64 * 1024
SPEC_STATUSES = (200, 400, 404, 405, 413, 415, 429)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Harness, Handler]]:
    with running_service(tmp_path_factory.mktemp("otlp-hostile"),
                         **{"receiver.max_message_bytes": MAX_BODY}) as h:
        assert h.svc.http is not None
        yield h, make_handler(h.svc.http.config, h.svc.http.ingest)


@pytest.fixture(scope="module")
def channel(served: tuple[Harness, Handler]) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(served[0].grpc_target) as ch:
        yield ch


def _sample(h: Harness, name: str, **labels: str) -> float:
    return h.sample(f"otel_eval_{name}_total", **labels)


def _counts(h: Harness, logs: bool, protocol: str = "http") -> tuple[float, ...]:
    if logs:
        return (_sample(h, "receiver_log_records_received", protocol=protocol),)
    return (_sample(h, "receiver_spans_received", protocol=protocol),)


def _encoding(resp: Response) -> str:
    return PROTOBUF if resp.content_type == PROTOBUF else JSON


def _parse(resp: Response, message: Any) -> Any:
    if _encoding(resp) == PROTOBUF:
        return message.FromString(resp.body)
    return json_format.Parse(resp.body, message)


def _check(h: Harness, handler: Handler, sent: Sent, body: Body | None) -> Response:
    """Send ``sent``; the answer must keep every promise of the module docstring."""
    # which answer the path asks for (a fuzzed path is /v1/logs too, with a traces body)
    logs = sent.target.split("?", 1)[0] == "/v1/logs"
    before = _counts(h, logs)
    resp = handler(request_of(sent))  # an exception out of here is a 500 on the wire
    what = f"{sent.method} {sent.target!r} {dict(sent.headers)} {sent.body[:200]!r} -> " \
           f"{resp.status} {resp.body[:300]!r}"
    assert resp.status in SPEC_STATUSES, what
    assert len(resp.body) <= ANSWER_BYTES, what
    asked = next((v for k, v in sent.headers if k == "Content-Type"), "")
    protobuf = asked.split(";")[0].strip().lower() == PROTOBUF
    if resp.status in (200, 400, 413, 429):  # the request's encoding (OTLP/HTTP)
        assert (_encoding(resp) == PROTOBUF) == protobuf, what
    if resp.status != 200:
        assert len(resp.body) <= ERROR_BYTES, what
        assert _parse(resp, status_pb2.Status()).message.strip(), what
        return resp
    answer = _parse(resp, ExportLogsServiceResponse() if logs else ExportTraceServiceResponse())
    partial = answer.partial_success
    rejected = partial.rejected_log_records if logs else partial.rejected_spans
    assert (rejected > 0) == bool(partial.error_message.strip()), what
    assert len(partial.error_message) <= 1000, what
    if body is not None and body.spans is not None:
        assert rejected <= body.spans, what
        assert _counts(h, logs)[0] - before[0] == body.spans, what  # every span accounted
    return resp


def _fuzz(kind: str) -> Any:
    return settings(max_examples=EXAMPLES[kind], derandomize=True, database=None,
                    deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                          HealthCheck.data_too_large])


def _sent(body: Body) -> Sent:
    headers = (("Content-Type", body.content_type),
               *((("Content-Encoding", body.encoding),) if body.encoding else ()),
               ("Content-Length", str(len(body.data))))
    return Sent("POST", body.path, headers, body.data)


# --- the properties ------------------------------------------------------------------------------

@_fuzz("bodies")
@given(body=bodies())
def test_any_export_body_is_taken_or_refused_with_a_reason(
        served: tuple[Harness, Handler], body: Body) -> None:
    h, handler = served
    _check(h, handler, _sent(body), body)


@_fuzz("requests")
@given(body=bodies(), method=METHODS, path=PATHS, content_type=st.one_of(
    st.none(), ODD_CONTENT_TYPES))
def test_any_method_path_and_content_type_is_answered_as_otlp_says(
        served: tuple[Harness, Handler], body: Body, method: str, path: str,
        content_type: str | None) -> None:
    h, handler = served
    sent = _sent(body)
    headers = sent.headers if content_type is None else (
        ("Content-Type", content_type), *sent.headers[1:])
    _check(h, handler, Sent(method, path, headers, sent.body), None)


@_fuzz("grpc")
@given(body=bodies(grpc=True))
def test_any_export_message_over_grpc_is_taken_or_refused_with_a_reason(
        served: tuple[Harness, Handler], channel: grpc.Channel, body: Body) -> None:
    """The same bodies as protobuf messages over the service's gRPC port (a real channel):
    OK with a partial success within what was sent, INVALID_ARGUMENT saying why, or
    RESOURCE_EXHAUSTED (past ``max_message_bytes``, or throttled); never UNKNOWN or INTERNAL
    (an exception out of the servicer)."""
    h, _ = served
    logs = body.path == "/v1/logs"
    before = _counts(h, logs, "grpc")
    service = LOGS_SERVICE if logs else SERVICE
    call = channel.unary_unary(f"/{service}/Export")
    try:
        reply, code, details = call(body.data, timeout=30), grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        reply, code, details = b"", e.code(), e.details() or ""
    what = f"{body!r:.300} -> {code} {details[:300]!r}"
    assert code in (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT,
                    grpc.StatusCode.RESOURCE_EXHAUSTED), what
    assert len(details) <= ERROR_BYTES, what
    if code != grpc.StatusCode.OK:
        assert details.strip(), what
        assert code == grpc.StatusCode.INVALID_ARGUMENT or len(body.data) > MAX_BODY, what
        return
    answer = (ExportLogsServiceResponse if logs else ExportTraceServiceResponse).FromString(reply)
    partial = answer.partial_success
    rejected = partial.rejected_log_records if logs else partial.rejected_spans
    assert (rejected > 0) == bool(partial.error_message.strip()), what
    if body.spans is not None:
        assert rejected <= body.spans, what
        assert _counts(h, logs, "grpc")[0] - before[0] == body.spans, what


def test_after_it_all_a_run_is_taken_and_every_stored_run_has_a_verdict(
        served: tuple[Harness, Handler]) -> None:
    h, _ = served
    trace_id = emit_agent_run(OTLPSpanExporter(endpoint=h.http_url))
    cfg = h.svc.config.assembly
    while h.svc.engine.open_traces() or h.svc.engine.pending_spans():
        h.release(after_s=cfg.idle_timeout_s + cfg.max_trace_duration_s + 1)
    stored = h.svc.store.latest(100_000)
    assert trace_id in {e["trace_id"] for e in stored}
    assert len(stored) > 1  # generated requests held runs, and they were evaluated
    assert all(isinstance(e["verdict"]["passed"], bool) for e in stored)


# --- what the properties found, each as a plain regression test ---------------------------------

@pytest.mark.parametrize("field", ["droppedEventsCount", "attributes"])
def test_a_json_field_of_200000_characters_is_refused_without_being_quoted_back(
        served: tuple[Harness, Handler], field: str) -> None:
    """json_format's message names the field and quotes its whole value: the 400 was as large
    as the body (200 kB here, up to ``max_message_bytes``)."""
    h, handler = served
    value: Any = "9" * 200_000
    if field == "attributes":
        value = [{"key": "a", "value": {"intValue": "1" * 200_000}}]
    span = {"traceId": "01" * 16, "spanId": "02" * 8, "name": "s", field: value}
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()
    resp = _check(h, handler, _sent(Body("/v1/traces", JSON, body, "", 1)), None)
    assert resp.status == 400
    message = json.loads(resp.body)["message"]
    assert message.startswith("not an OTLP ExportTraceServiceRequest: Failed to parse")
    assert len(message) < 500
