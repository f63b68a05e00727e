"""A file gives what ``serve`` gives for the same request: the spans and records it drops
are dropped by the loaders too, counted with the same reason and reported, never dropped
unseen nor costing the rest of the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otel_eval.base.model import Trace
from otel_eval.decode.otlp import parse_request as parse_protobuf
from otel_eval.decode.otlp_json import parse_request, request_from_dict
from otel_eval.receive.loaders import LoaderError, load_file

DATA = Path(__file__).resolve().parents[1] / "data" / "loaders"
WEATHER = "5b8efff798038103d269b633813fc60c"
LEGACY = "ab" * 16


def by_id(traces: list[Trace]) -> dict[str, Trace]:
    return {t.trace_id: t for t in traces}


@pytest.mark.parametrize("lines", [False, True], ids=["request", "json-lines"])
def test_a_pre_1_0_exporters_spans_are_reported_as_serve_counts_them(
        tmp_path: Path, lines: bool) -> None:
    """OTLP 0.x's ``instrumentationLibrarySpans`` (before ``scopeSpans``): serve counts its
    spans rejected (``instrumentation_library_spans``); eval dropped them unseen, exit 0,
    as if the run had not been exported at all."""
    doc = json.loads((DATA / "otlp_request.json").read_text())
    entry = doc["resourceSpans"][0]
    span = {**entry["scopeSpans"][0]["spans"][0], "traceId": LEGACY}
    entry["instrumentationLibrarySpans"] = [
        {"instrumentationLibrary": {"name": "old"}, "spans": [span]}]
    text = json.dumps(doc)
    assert parse_request(text)[1] == {"instrumentation_library_spans": 1}  # serve's count
    path = tmp_path / ("old.jsonl" if lines else "old.json")
    path.write_text(text + "\n" + text + "\n" if lines else text)
    errors: list[LoaderError] = []
    traces = by_id(load_file(path, on_error=errors.append))
    assert LEGACY not in traces and WEATHER in traces
    problems = [e.problem for e in errors if "instrumentation_library_spans" in e.problem]
    assert problems, [e.problem for e in errors]


def test_a_pre_1_0_exporters_log_records_are_reported(tmp_path: Path) -> None:
    """``instrumentationLibraryLogs``, as ``otlp_logs.parse_logs_json`` counts them."""
    record = {"timeUnixNano": "1700000001000000000", "traceId": WEATHER,
              "spanId": "eee19b7ec3c1b175", "eventName": "gen_ai.user.message",
              "body": {"stringValue": "hi"}}
    logs = {"resourceLogs": [{"resource": {}, "instrumentationLibraryLogs": [
        {"instrumentationLibrary": {"name": "old"}, "logRecords": [record]}]}]}
    path = tmp_path / "export.jsonl"
    path.write_text((DATA / "collector_export.jsonl").read_text().rstrip("\n") + "\n"
                    + json.dumps(logs) + "\n")
    errors: list[LoaderError] = []
    assert WEATHER in by_id(load_file(path, on_error=errors.append))
    assert any("instrumentation_library_logs" in e.problem for e in errors), \
        [e.problem for e in errors]


@pytest.mark.parametrize("framed", [False, True], ids=["request", "file-exporter-proto"])
def test_a_protobuf_span_with_invalid_utf8_costs_that_span_not_the_file(
        tmp_path: Path, framed: bool) -> None:
    """serve drops a span whose strings are not UTF-8 (``invalid_utf8``) and reads the rest
    of the request; eval refused the whole file ("not a recognised trace file") and every
    run in it went unevaluated."""
    doc = json.loads((DATA / "otlp_request.json").read_text())
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans.append({**spans[1], "traceId": LEGACY, "spanId": "cd" * 8,
                  "attributes": [{"key": "k", "value": {"stringValue": "QQQQ"}}]})
    raw = request_from_dict(doc).SerializeToString()
    assert raw.count(b"QQQQ") == 1
    body = raw.replace(b"QQQQ", b"\xff\xfe\xfd\xfc")
    assert parse_protobuf(body)[1] == {"invalid_utf8": 1}  # serve's count
    path = tmp_path / "traces.binpb"
    path.write_bytes(len(body).to_bytes(4, "big") + body if framed else body)
    errors: list[LoaderError] = []
    traces = by_id(load_file(path, on_error=errors.append))
    assert set(traces) == {WEATHER, "0123456789abcdef0123456789abcdef"}
    assert [e.problem for e in errors] == [
        ("request 1: " if framed else "") + "rejected 1 span(s): 1 invalid_utf8"]


@pytest.mark.parametrize("bad", [
    {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": 5, "name": "x"}]}]}]},
    {"hello": 1},  # JSON, of no signal
], ids=["unparsable-request", "no-request"])
def test_a_line_that_is_no_request_costs_that_line_not_the_file(
        tmp_path: Path, bad: dict[str, object]) -> None:
    """The file exporter's lines are requests, as serve receives them: serve refuses a bad
    one and takes the others; eval dropped every line of the file for it (its runs never
    evaluated)."""
    lines = (DATA / "collector_export.jsonl").read_text().splitlines()
    path = tmp_path / "traces.jsonl"
    path.write_text("\n".join([json.dumps(bad), *lines, json.dumps(bad)]) + "\n")
    errors: list[LoaderError] = []
    assert WEATHER in by_id(load_file(path, on_error=errors.append))
    assert len(errors) == 1 and errors[0].problem.startswith("line 1: not an OTLP")
    assert errors[0].problem.endswith(" (and 1 more lines not read)")


@pytest.mark.parametrize(("field", "value"), [
    ("timestamp", "1965-03-19T16:32:11Z"),  # before 1970: no OTLP time (fixed64) says it
    ("timestamp", "2500-03-19T16:32:11Z"),  # past int64 ns: serve rejects it
    ("duration", "P400D"),  # longer than a year: serve refuses it from the run
    ("events", [{"Timestamp": "2500-01-01T00:00:00Z", "Name": "x"}]),  # an event's time
], ids=["before-1970", "past-int64", "over-a-year", "event-past-int64"])
def test_a_span_tree_span_with_times_serve_rejects_is_reported_not_evaluated(
        tmp_path: Path, field: str, value: object) -> None:
    """A span whose times serve cannot take (before 1970, past int64 ns, an event's, or
    longer than a year) is ``invalid_timestamp`` there, the rest of its run evaluated; an
    OpenInference span tree with one was evaluated whole (a run of 400 days, a start time
    in 2500 in its result, and ``replay`` failing to encode a time before 1970)."""
    doc = json.loads((DATA / "span_tree.json").read_text())
    tool = doc["spans"][0]["child_spans"][0]["child_spans"][1]
    assert tool["span_name"] == "FinalAnswerTool"
    tool[field] = value
    path = tmp_path / "tree.json"
    path.write_text(json.dumps(doc))
    errors: list[LoaderError] = []
    (trace,) = load_file(path, on_error=errors.append)
    assert tool["span_id"] not in {s.span_id for s in trace.spans}
    assert len(trace.spans) == 3
    assert [e.problem for e in errors] == ["1 span(s) rejected: 1 invalid_timestamp"]
