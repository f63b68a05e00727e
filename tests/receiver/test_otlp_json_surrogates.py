"""A lone surrogate in OTLP/JSON (``"\\ud83d"``: a JavaScript SDK that cut a value between the
two halves of an emoji, as its attribute length limit does, then ``JSON.stringify``) is the
JSON spelling of invalid UTF-8: the span or log record holding it is dropped and counted
(``invalid_utf8``), as the protobuf path drops one with invalid UTF-8; the rest of the request
is kept, non-ASCII text and escaped surrogate pairs (astral characters) as sent."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

from support.harness import running_service

from otel_eval.receive.ingest import decode_logs, decode_traces

TID = "ab" * 16
LONE = "\ud83d"  # the first half of 😀 (U+1F600) alone


def _span(sid: int, text: str) -> dict[str, Any]:
    return {"traceId": TID, "spanId": f"{sid:016x}", "name": "chat",
            "startTimeUnixNano": "1", "endTimeUnixNano": "2",
            "attributes": [{"key": "gen_ai.output", "value": {"stringValue": text}}]}


def _traces(*spans: dict[str, Any], service: str = "客服") -> bytes:
    """As JSON.stringify writes it: ASCII escapes (an astral character as a surrogate pair)."""
    return json.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name",
                                     "value": {"stringValue": service}}]},
        "scopeSpans": [{"scope": {"name": "ai"}, "spans": list(spans)}]}]}).encode()


def test_the_span_with_a_lone_surrogate_is_dropped_and_counted_the_rest_kept() -> None:
    body = _traces(_span(1, "你好 😀 مرحبا"), _span(2, "cut at 100 chars: " + LONE),
                   _span(3, "e\u0301 👋🏽"))
    assert b"\\ud83d\\ude00" in body and b"\\ud83d\"" in body
    decoded = decode_traces(body, "otlp_json")
    assert decoded.rejected == {"invalid_utf8": 1}
    assert [s.span_id for s in decoded.items] == [f"{1:016x}", f"{3:016x}"]
    assert [s.attributes["gen_ai.output"] for s in decoded.items] == ["你好 😀 مرحبا",
                                                                        "e\u0301 👋🏽"]


def test_a_resource_with_a_lone_surrogate_drops_its_spans() -> None:
    decoded = decode_traces(_traces(_span(1, "a"), _span(2, "b"), service="svc" + LONE),
                            "otlp_json")
    assert decoded.rejected == {"invalid_utf8": 2}
    assert decoded.items == []


def test_a_log_record_with_a_lone_surrogate_is_dropped_and_counted() -> None:
    def record(text: str) -> dict[str, Any]:
        return {"timeUnixNano": "5", "traceId": TID, "spanId": "01" * 8,
                "eventName": "gen_ai.client.inference.operation.details",
                "body": {"stringValue": text}}
    body = json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [
        record("好的 😀"), record(LONE + "x")]}]}]}).encode()
    decoded = decode_logs(body, "otlp_json")
    assert decoded.rejected == {"invalid_utf8": 1}
    assert len(decoded.items) == 1


def test_over_http_a_partial_success_not_a_refused_batch(tmp_path: Path) -> None:
    body = _traces(_span(1, "你好 😀"), _span(2, LONE), _span(3, "ok"))
    with running_service(tmp_path) as h:
        assert h.svc.http is not None
        conn = http.client.HTTPConnection("127.0.0.1", h.svc.http.port, timeout=10)
        try:
            conn.request("POST", "/v1/traces", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            status, raw = resp.status, resp.read()
        finally:
            conn.close()
        assert status == 200, raw
        assert json.loads(raw)["partialSuccess"]["rejectedSpans"] in (1, "1")
        assert h.sample("otel_eval_receiver_spans_rejected_total", protocol="http",
                        reason="invalid_utf8") == 1

