"""One engine, offline and live: a recording of a real stack written as the collector's file
exporter writes it (one exporter in the traces, logs and metrics pipelines: a request per
line, every signal in one file) gives ``otel-eval eval`` the evaluation ``serve`` stores
for the same requests received over OTLP."""

from __future__ import annotations

import copy
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from conformance import corpus
from conformance.replay import replay
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from support.harness import running_service

from otel_eval.app.config import Config
from otel_eval.app.offline import EvalRun
from otel_eval.decode.otlp_json import message_from_dict

_METRICS_LINE = {"resourceMetrics": [{"resource": {}, "scopeMetrics": [{"metrics": [
    {"name": "gen_ai.client.token.usage", "sum": {"dataPoints": [{"asInt": "3"}]}}]}]}]}


def _compared(body: dict[str, Any]) -> dict[str, Any]:
    keep = ("trace_id", "agent", "agent_source", "status", "input", "output", "counts",
            "usage", "verdict", "session_id")
    return {**{k: body.get(k) for k in keep},
            "findings": sorted((f["detector"], f["kind"], f["severity"], f["message"])
                               for f in body["findings"]),
            "steps": [(s["kind"], s["name"], s.get("tool_name"), s.get("arguments"))
                      for s in body["steps"]]}


def _file_exporter_output(rec: dict[str, Any], path: Path) -> Path:
    lines = [json.dumps(item["body"]) for item in rec["requests"]]
    lines.insert(1, json.dumps(_METRICS_LINE))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("scenario", ["loop", "clean", "wrong_tool"])
def test_a_file_exporter_file_with_log_records_is_evaluated_as_serve_evaluates_it(
        tmp_path: Path, scenario: str) -> None:
    rec = corpus.recording("openai-v2-events", scenario)
    assert {item["signal"] for item in rec["requests"]} == {"traces", "logs"}
    run = EvalRun(Config(), [str(_file_exporter_output(rec, tmp_path / "otel.jsonl"))])
    offline = [json.loads(json.dumps(e.to_json())) for e in run.evaluations()]
    assert run.failed_files == 0
    with running_service(tmp_path) as h:
        replay(h, rec)
        h.release(after_s=h.svc.config.assembly.idle_timeout_s + 1)
        live = h.svc.store.latest(100)
    assert [_compared(e) for e in offline] == [_compared(e) for e in live]
    assert offline[0]["input"]  # the content, only in the log records, was read


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_otel_eval_replay_of_such_a_file_sends_its_log_records_too(
        tmp_path: Path, protocol: str) -> None:
    """`otel-eval replay` (backfill) sent the spans only: the content, in the log records,
    never reached serve, which stored the run without its input, output, arguments or
    results (`unrecorded`), while `eval` of the same file read them."""
    from otel_eval.app.replay import Rejections
    from otel_eval.app.replay import replay as sdk_replay
    from otel_eval.receive.loaders import load_paths

    rec = corpus.recording("openai-v2-events", "loop")
    path = _file_exporter_output(rec, tmp_path / "otel.jsonl")
    run = EvalRun(Config(), [str(path)])
    offline = [json.loads(json.dumps(e.to_json())) for e in run.evaluations()]
    with running_service(tmp_path / "serve") as h:
        target = h.grpc_target if protocol == "grpc" else h.http_url.removesuffix("/v1/traces")
        rejected = Rejections()
        sdk_replay(load_paths([path]), target, protocol=protocol,  # type: ignore[arg-type]
                   rejections=rejected)
        h.release(after_s=h.svc.config.assembly.idle_timeout_s + 1)
        live = h.svc.store.latest(100)
    assert offline[0]["input"] and "unrecorded" not in offline[0]
    assert [_compared(e) for e in live] == [_compared(e) for e in offline]
    assert (rejected.spans, rejected.log_records) == (0, 0)


def _halves(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """One request's spans cut in two requests (each scope's first half, then the rest), as
    a rotating file exporter cuts a run's spans over two files."""
    first, rest = copy.deepcopy(body), copy.deepcopy(body)
    for rs_a, rs_b in zip(first["resourceSpans"], rest["resourceSpans"], strict=True):
        for ss_a, ss_b in zip(rs_a["scopeSpans"], rs_b["scopeSpans"], strict=True):
            k = len(ss_a["spans"]) // 2
            ss_a["spans"], ss_b["spans"] = ss_a["spans"][:k], ss_a["spans"][k:]
    return first, rest


def _evaluated(paths: list[Path]) -> tuple[list[dict[str, Any]], EvalRun]:
    run = EvalRun(Config(), [str(p) for p in paths])
    return [json.loads(json.dumps(e.to_json())) for e in run.evaluations()], run


@pytest.mark.parametrize("stack", ["langgraph", "openai-agents", "pydantic-ai"])
def test_a_run_split_over_two_files_is_one_trace_as_serve_assembles_it(
        tmp_path: Path, stack: str) -> None:
    (body,) = [r["body"] for r in corpus.recording(stack, "clean")["requests"]
               if r["signal"] == "traces"]
    whole, _ = _evaluated([_lines(tmp_path / "whole.jsonl", [body])])
    first, rest = _halves(body)
    parts = tmp_path / "rotated"
    parts.mkdir()
    _lines(parts / "traces-1.jsonl", [first])
    _lines(parts / "traces-2.jsonl", [rest])
    split, run = _evaluated([parts])
    assert run.failed_files == 0
    assert [_compared(e) for e in split] == [_compared(e) for e in whole]
    assert [(e["status"], e["verdict"]["passed"]) for e in split] == [("complete", True)]


def test_log_records_in_their_own_file_join_the_spans_of_another(tmp_path: Path) -> None:
    rec = corpus.recording("openai-v2-events", "loop")
    by_signal = {s: [r["body"] for r in rec["requests"] if r["signal"] == s]
                 for s in ("traces", "logs")}
    _lines(tmp_path / "logs.jsonl", by_signal["logs"])  # file/logs and file/traces exporters
    _lines(tmp_path / "traces.jsonl", by_signal["traces"])
    offline, run = _evaluated([tmp_path])
    assert run.failed_files == 0
    with running_service(tmp_path / "serve") as h:
        replay(h, rec)
        h.release(after_s=h.svc.config.assembly.idle_timeout_s + 1)
        live = h.svc.store.latest(100)
    assert [_compared(e) for e in offline] == [_compared(e) for e in live]
    assert [f["kind"] for f in offline[0]["findings"]] == ["repeated_call"]


def test_the_same_trace_in_two_files_is_evaluated_once(tmp_path: Path) -> None:
    (body,) = [r["body"] for r in corpus.recording("langgraph", "clean")["requests"]
               if r["signal"] == "traces"]
    one = _lines(tmp_path / "a.jsonl", [body])
    again = _lines(tmp_path / "b.jsonl", [body])  # an export given twice
    evaluations, run = _evaluated([one, again])
    assert len(evaluations) == 1
    assert (evaluations[0]["status"], evaluations[0]["verdict"]["passed"]) == ("complete", True)
    assert run.failed_files == 1  # the copy's spans refused (late) and reported, as serve


def _lines(path: Path, bodies: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(b) + "\n" for b in bodies), encoding="utf-8")
    return path


def test_log_records_in_a_file_read_after_their_spans_still_join_them(tmp_path: Path) -> None:
    """The order of the files does not change the evaluation: records in a file read after
    the one where their run ended join it (``eval traces.jsonl logs.jsonl``), as serve
    re-opens the run for them, instead of being refused as late."""
    rec = corpus.recording("openai-v2-events", "loop")
    by_signal = {s: [r["body"] for r in rec["requests"] if r["signal"] == s]
                 for s in ("traces", "logs")}
    traces = _lines(tmp_path / "traces.jsonl", by_signal["traces"])
    logs = _lines(tmp_path / "logs.jsonl", by_signal["logs"])
    logs_first, _ = _evaluated([logs, traces])
    traces_first, run = _evaluated([traces, logs])
    assert run.failed_files == 0
    assert [_compared(e) for e in traces_first] == [_compared(e) for e in logs_first]
    assert traces_first[0]["input"]  # the content, only in the log records, was read



def test_log_records_that_meet_no_span_are_reported(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Records whose trace has no span anywhere in the input are dropped as serve drops
    them (``no_spans``), and reported as the other rejects are, naming their file."""
    rec = corpus.recording("openai-v2-events", "loop")
    logs = _lines(tmp_path / "logs.jsonl",
                  [r["body"] for r in rec["requests"] if r["signal"] == "logs"])
    evaluations, run = _evaluated([logs])
    assert evaluations == []
    assert run.failed_files == 1
    err = capsys.readouterr().err
    assert str(logs) in err and "no_spans" in err


def _proto_frames(rec: dict[str, Any], path: Path) -> Path:
    """The requests as the collector's file exporter writes them with ``format: proto``:
    each request's protobuf bytes after its size (4 bytes, big-endian), every signal in
    one file."""
    kinds = {"traces": (ExportTraceServiceRequest, "resourceSpans"),
             "logs": (ExportLogsServiceRequest, "resourceLogs")}
    bodies = [message_from_dict(item["body"], kinds[item["signal"]][0](),
                                kinds[item["signal"]][1]).SerializeToString()
              for item in rec["requests"]]
    bodies.insert(1, message_from_dict(_METRICS_LINE, ExportMetricsServiceRequest(),
                                       "resourceMetrics").SerializeToString())
    path.write_bytes(b"".join(struct.pack(">I", len(b)) + b for b in bodies))
    return path


@pytest.mark.parametrize("scenario", ["loop", "clean", "wrong_tool"])
def test_a_file_exporter_proto_file_is_evaluated_as_its_json_lines(
        tmp_path: Path, scenario: str) -> None:
    rec = corpus.recording("openai-v2-events", scenario)
    as_json, _ = _evaluated([_file_exporter_output(rec, tmp_path / "otel.jsonl")])
    as_proto, run = _evaluated([_proto_frames(rec, tmp_path / "otel.binpb")])
    assert run.failed_files == 0
    assert [_compared(e) for e in as_proto] == [_compared(e) for e in as_json]
    assert as_proto[0]["input"]  # the content, only in the log records, was read


def test_a_protobuf_logs_request_file_joins_the_spans_of_another(tmp_path: Path) -> None:
    """A single protobuf request per file (an HTTP body saved), logs as traces."""
    rec = corpus.recording("openai-v2-events", "loop")
    expected, _ = _evaluated([_file_exporter_output(rec, tmp_path / "otel.jsonl")])
    parts = tmp_path / "parts"
    parts.mkdir()
    for n, item in enumerate(rec["requests"]):
        cls, key = ((ExportTraceServiceRequest, "resourceSpans") if item["signal"] == "traces"
                    else (ExportLogsServiceRequest, "resourceLogs"))
        (parts / f"{n:03}.binpb").write_bytes(
            message_from_dict(item["body"], cls(), key).SerializeToString())
    got, run = _evaluated([parts])
    assert run.failed_files == 0
    assert [_compared(e) for e in got] == [_compared(e) for e in expected]
