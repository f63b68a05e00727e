"""One engine, offline and live: a recording of a real stack written as the collector's file
exporter writes it (one exporter in the traces, logs and metrics pipelines: a request per
line, every signal in one file) gives ``otel-eval eval`` the evaluation ``serve`` stores
for the same requests received over OTLP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conformance import corpus
from conformance.replay import replay
from support.harness import running_service

from otel_eval.app.config import Config
from otel_eval.app.offline import EvalRun

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
