"""OTLP receivers end to end: official SDK exporters in, stored evaluations out."""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExp
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExp
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts
from support.harness import Harness, emit_agent_run, running_service

from otel_eval.base.model import Span
from otel_eval.decode import encode, otlp_json

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_sdk_exporter_trace_is_evaluated_and_served(tmp_path: Path, protocol: str) -> None:
    with running_service(tmp_path) as h:
        exporter = (GrpcExp(endpoint=h.grpc_target, insecure=True) if protocol == "grpc"
                    else HttpExp(endpoint=h.http_url))
        trace_id = emit_agent_run(exporter, tool_error=True)
        assert h.svc.engine.open_traces() == 1
        assert h.release() == 1
        body = json.load(urllib.request.urlopen(f"{h.admin_url}/v1/evaluations/{trace_id}"))
        assert body["trace_id"] == trace_id and body["status"] == "complete"
        assert body["service"] == "travel-agent" and body["agent"] == "planner"
        assert [s["kind"] for s in body["steps"]] == ["agent", "llm", "tool"]
        assert body["steps"][2]["arguments"] == {"city": "Paris"}
        assert body["steps"][2]["status"] == "error"
        assert body["usage"]["input_tokens"] == 120
        listed = json.load(urllib.request.urlopen(f"{h.admin_url}/v1/evaluations?limit=5"))
        assert [e["trace_id"] for e in listed["evaluations"]] == [trace_id]
        assert h.sample("otel_eval_receiver_spans_received_total", protocol=protocol) == 3
        assert h.sample("otel_eval_receiver_spans_accepted_total", protocol=protocol) == 3


Answer = tuple[ts.ExportTraceServiceResponse | None, grpc.RpcError | None]


def _raw_export(h: Harness, body: bytes) -> Answer:
    with grpc.insecure_channel(h.grpc_target) as ch:
        call = ch.unary_unary(EXPORT, request_serializer=None,
                              response_deserializer=ts.ExportTraceServiceResponse.FromString)
        try:
            return call(body, timeout=10), None
        except grpc.RpcError as e:
            return None, e


def _spans(n: int, trace: str = "ab" * 16, **kw: object) -> list[Span]:
    return [Span(trace, f"{i + 1:016x}", None if i == 0 else f"{1:016x}", f"s{i}", 1, 2,
                 attributes=dict(kw)) for i in range(n)]


def test_grpc_malformed_protobuf_is_invalid_argument_and_counted(tmp_path: Path) -> None:
    with running_service(tmp_path) as h:
        resp, err = _raw_export(h, b"\x0a\xff\xff\xff\xff garbage")
        assert resp is None and err is not None
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "ExportTraceServiceRequest" in (err.details() or "")
        assert h.sample("otel_eval_receiver_spans_rejected_total", protocol="grpc",
                        reason="malformed_request") == 0  # its spans cannot be counted
        # the request is (the dashboard's drops and refusals showed nothing of a sender whose
        # every request was refused)
        assert h.sample("otel_eval_receiver_requests_refused_total", protocol="grpc",
                        reason="malformed_request") == 1
        assert h.svc.engine.open_traces() == 0


def test_grpc_partial_success_for_bad_ids_bad_utf8_and_duplicates(tmp_path: Path) -> None:
    with running_service(tmp_path) as h:
        good = _spans(3)
        req = encode.encode_spans([*good, good[1]])  # a duplicate of span 2
        spans = req.resource_spans[0].scope_spans[0].spans
        bad_trace = spans.add()
        bad_trace.CopyFrom(spans[0])
        bad_trace.trace_id = b"\x01\x02"
        empty = spans.add()
        empty.CopyFrom(spans[0])
        empty.trace_id = b""
        utf8 = spans.add()
        utf8.CopyFrom(spans[0])
        utf8.span_id = bytes.fromhex("00000000000000ff")
        utf8.name = "MARKERX"
        body = req.SerializeToString().replace(b"MARKERX", b"MARK\xffRX")
        resp, err = _raw_export(h, body)
        assert err is None and resp is not None
        assert resp.partial_success.rejected_spans == 4
        msg = resp.partial_success.error_message
        for reason in ("2 invalid_trace_id", "1 invalid_utf8", "1 duplicate_span"):
            assert reason in msg
        assert h.release() == 1
        stored = h.svc.store.get("ab" * 16)
        assert stored is not None and stored["counts"]["spans"] == 3
        received = h.sample("otel_eval_receiver_spans_received_total", protocol="grpc")
        accepted = h.sample("otel_eval_receiver_spans_accepted_total", protocol="grpc")
        assert (received, accepted) == (7, 3)


def test_huge_attribute_over_limit_is_refused_under_limit_is_kept(tmp_path: Path) -> None:
    big = "x" * (10 * 1024 * 1024)
    with running_service(tmp_path, **{"receiver.max_message_bytes": 32 * 1024 * 1024}) as h:
        resp, err = _raw_export(h, encode.encode_spans(_spans(2, payload=big)).SerializeToString())
        assert err is None and resp is not None and resp.partial_success.rejected_spans == 0
        assert h.release() == 1
    with running_service(tmp_path / "small", **{"receiver.max_message_bytes": 1024 * 1024}) as h:
        resp, err = _raw_export(h, encode.encode_spans(_spans(2, payload=big)).SerializeToString())
        assert err is not None and err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert h.svc.engine.open_traces() == 0


def _post(url: str, body: bytes, ctype: str, **headers: str) -> tuple[int, bytes, dict[str, str]]:
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": ctype, **headers})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def _refusals(h: Harness, protocol: str = "http") -> dict[str, float]:
    """``receiver_requests_refused_total`` of ``protocol`` by reason (those counted)."""
    return {s.labels["reason"]: s.value
            for m in h.svc.registry.collect() if m.name == "otel_eval_receiver_requests_refused"
            for s in m.samples if s.name.endswith("_total") and s.value
            and s.labels["protocol"] == protocol}


def test_http_json_with_hex_ids_and_gzip(tmp_path: Path) -> None:
    with running_service(tmp_path) as h:
        data = otlp_json.request_to_json(encode.encode_spans(_spans(2)))
        assert data["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] == "ab" * 16
        code, body, _ = _post(h.http_url, gzip.compress(json.dumps(data).encode()),
                              "application/json", **{"Content-Encoding": "gzip"})
        assert code == 200 and json.loads(body) == {}
        assert h.release() == 1
        stored = h.svc.store.get("ab" * 16)
        assert stored is not None
        assert [s["span_id"] for s in stored["steps"]] == [f"{1:016x}", f"{2:016x}"]


@pytest.mark.parametrize(("body", "ctype", "extra", "code", "reason"), [
    (b"{not json", "application/json", {}, 400, "malformed_request"),
    (b"\xff\xfe\x00", "application/json", {}, 400, "malformed_request"),
    (b"\x0a\xff\xff\xff\xff", "application/x-protobuf", {}, 400, "malformed_request"),
    (b"plain", "text/plain", {}, 415, "unsupported_content_type"),
    (b"not gzip", "application/x-protobuf", {"Content-Encoding": "gzip"}, 400,
     "malformed_request"),
    (gzip.compress(b"\x00" * (3 * 1024 * 1024)), "application/x-protobuf",
     {"Content-Encoding": "gzip"}, 413, "too_large"),
    # an encoding not decoded here (brotli, zstd): the sender's setting, not a broken body
    (b"\x0b\x02\x80", "application/x-protobuf", {"Content-Encoding": "br"}, 415,
     "unsupported_content_encoding"),
], ids=["bad-json", "bad-utf8-json", "bad-protobuf", "wrong-content-type", "not-gzip",
        "gzip-bomb", "brotli"])
def test_http_bad_bodies_get_clear_errors(tmp_path: Path, body: bytes, ctype: str,
                                          extra: dict[str, str], code: int,
                                          reason: str) -> None:
    with running_service(tmp_path, **{"receiver.max_message_bytes": 2 * 1024 * 1024}) as h:
        status, payload, _ = _post(h.http_url, body, ctype, **extra)
        assert status == code
        # counted whole, by reason: its spans cannot be (read, they would be rejected spans)
        assert _refusals(h) == {reason: 1}
        if ctype in ("application/json", "application/x-protobuf") and code == 400:
            assert payload  # a google.rpc.Status with the reason
        assert h.svc.engine.open_traces() == 0


def test_throttled_when_pending_spans_full_and_nothing_taken(tmp_path: Path) -> None:
    with running_service(tmp_path, **{"assembly.max_pending_spans": 5,
                                      "receiver.retry_after_s": 2.0}) as h:
        first = encode.encode_spans(_spans(4, trace="01" * 16)).SerializeToString()
        second = encode.encode_spans(_spans(4, trace="02" * 16)).SerializeToString()
        assert _raw_export(h, first)[1] is None
        _, err = _raw_export(h, second)
        assert err is not None and err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        trailers = dict(err.trailing_metadata() or ())
        from google.rpc import error_details_pb2, status_pb2
        st = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
        info = error_details_pb2.RetryInfo()
        assert st.details[0].Unpack(info) and info.retry_delay.seconds == 2
        code, _, headers = _post(h.http_url, second, "application/x-protobuf")
        assert code == 429 and headers["Retry-After"] == "2"
        assert h.svc.engine.open_traces() == 1
        assert h.sample("otel_eval_receiver_requests_throttled_total", protocol="grpc",
                        reason="pending_spans") == 1
        assert h.release() == 1  # once evaluated, the budget frees up
        assert _raw_export(h, second)[1] is None


def test_shutdown_evaluates_every_acknowledged_span(tmp_path: Path) -> None:
    with running_service(tmp_path) as h:
        for i in range(20):
            body = encode.encode_spans(_spans(3, trace=f"{i + 1:032x}")).SerializeToString()
            _raw_export(h, body)
        assert h.svc.engine.open_traces() == 20
        store = h.svc.store
        h.svc.shutdown(deadline_s=5)
        assert h.svc.engine.open_traces() == 0
    from otel_eval.store import Store
    reopened = Store(str(tmp_path / "otel-eval.db"))
    assert reopened.count() == 20
    assert all(e["counts"]["spans"] == 3 for e in reopened.latest(100))
    del store


def test_feedback_outcome_updates_the_stored_verdict(tmp_path: Path) -> None:
    looping = [Span("cd" * 16, f"{1:016x}", None, "invoke_agent", 1, 10,
                    attributes={"gen_ai.operation.name": "invoke_agent",
                                "gen_ai.agent.name": "a"})]
    for i in range(4):
        looping.append(Span("cd" * 16, f"{i + 2:016x}", f"{1:016x}", "execute_tool search",
                            2 + i, 3 + i, attributes={
                                "gen_ai.operation.name": "execute_tool",
                                "gen_ai.tool.name": "search",
                                "gen_ai.tool.call.arguments": '{"q": "same"}',
                                "gen_ai.tool.call.result": "nothing"}))
    with running_service(tmp_path) as h:
        _raw_export(h, encode.encode_spans(looping).SerializeToString())
        h.release()
        before = h.svc.store.get("cd" * 16)
        assert before is not None and before["verdict"]["outcome"] is None
        assert any(f["detector"] == "loop" for f in before["findings"])
        # a score is no outcome (before: 0.5 failure, 2 success); the 400 names the value as
        # sent, JSON (it read "outcome: outcome None is not success/failure" for a null)
        for score in (0.5, 2, -7, None, "maybe", [True]):
            code, body, _ = _post(f"{h.admin_url}/v1/feedback", json.dumps(
                {"trace_id": "cd" * 16, "outcome": score}).encode(), "application/json")
            assert (code, json.loads(body)) == (400, {
                "error": "outcome: expected success or failure (or 1 or 0, true or false), "
                         f"got {json.dumps(score)}", "parameter": "outcome"}), body
        assert h.svc.store.get("cd" * 16) == before
        code, body, _ = _post(f"{h.admin_url}/v1/feedback",
                              json.dumps({"trace_id": "cd" * 16, "outcome": 1}).encode(),
                              "application/json")
        assert code == 200
        after = json.loads(body)
        assert after["verdict"]["outcome"] == "success"
        assert [f["detector"] for f in after["findings"]].count("lucky_pass") == 1
        assert h.svc.store.get("cd" * 16) == after
        code, body, _ = _post(f"{h.admin_url}/v1/feedback", b'{"trace_id": "zz"}',
                              "application/json")
        assert code == 400
        # the path takes no parameter: one is refused, not ignored, and nothing recorded
        code, body, _ = _post(f"{h.admin_url}/v1/feedback?outcome=failure", json.dumps(
            {"trace_id": "cd" * 16, "outcome": 0}).encode(), "application/json")
        assert (code, json.loads(body)["parameter"]) == (400, "outcome"), body
        assert h.svc.store.get("cd" * 16) == after
        # an unknown trace is named as it was sent, not as it was looked up
        code, body, _ = _post(f"{h.admin_url}/v1/feedback", json.dumps(
            {"trace_id": "EF" * 16, "outcome": 0}).encode(), "application/json")
        assert code == 404 and f'"{"EF" * 16}"' in json.loads(body)["error"], body
