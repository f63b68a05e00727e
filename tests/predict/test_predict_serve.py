"""``serve --model``: runs sent by the official OTel SDK exporter over OTLP/gRPC get a
prediction and the predictor metrics; outcomes (attribute, then POST /v1/feedback) feed the
rolling AUC of its own predictions."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode
from sklearn.metrics import roc_auc_score
from support.harness import Harness, running_service

from otel_eval.base.configcheck import ConfigError
from otel_eval.evaluate.predict import load_model

AGENT = "booker"


def _run(target: str, tool_errors: int, outcome: str | None = None) -> str:
    """One agent run (an LLM call, three tool calls of which ``tool_errors`` fail, a final
    answer) exported by the SDK's OTLP/gRPC exporter; returns its trace id."""
    provider = TracerProvider(resource=Resource.create({"service.name": "travel"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=target,
                                                                     insecure=True)))
    tracer = provider.get_tracer("test-agent")
    attrs: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT}
    if outcome is not None:
        attrs["otel_eval.outcome"] = outcome
    with tracer.start_as_current_span(f"invoke_agent {AGENT}", attributes=attrs) as root:
        with tracer.start_as_current_span("chat gpt-4o", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                "gen_ai.usage.input_tokens": 300, "gen_ai.usage.output_tokens": 40}):
            pass
        for i in range(3):
            with tracer.start_as_current_span("execute_tool book", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "book",
                    "gen_ai.tool.call.arguments": json.dumps({"seat": i})}) as tool:
                if i < tool_errors:
                    tool.set_status(Status(StatusCode.ERROR, "no such seat"))
        trace_id = f"{root.get_span_context().trace_id:032x}"
    provider.shutdown()
    return trace_id


def _feedback(h: Harness, trace_id: str, outcome: bool) -> dict[str, Any]:
    req = urllib.request.Request(f"{h.admin_url}/v1/feedback", method="POST",
                                 data=json.dumps({"trace_id": trace_id,
                                                  "outcome": outcome}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
        body: dict[str, Any] = json.loads(resp.read())
        return body


def test_serve_with_a_model_predicts_and_tracks_its_auc(tmp_path: Path,
                                                        tau_model: Path) -> None:
    label = load_model(tau_model).label
    with running_service(tmp_path, **{"prediction.model_path": str(tau_model),
                                      "prediction.auc_min_per_class": 1}) as h:
        ids = [_run(h.grpc_target, errors, "success" if errors == 0 else None)
               for errors in (0, 1, 3)]
        assert h.release() == 3
        p = {}
        for tid in ids:
            body = h.svc.store.get(tid)
            assert body is not None and body["prediction"]["model"] == label
            p[tid] = body["prediction"]["p_success"]
            assert 0.0 <= p[tid] <= 1.0
        assert h.sample("otel_eval_prediction_p_success_count", service="travel",
                        agent=AGENT) == 3
        below = sum(v < 0.5 for v in p.values())  # prediction.pass_threshold's default
        assert (h.svc.registry.get_sample_value(
            "otel_eval_prediction_runs_predicted_to_fail_total",
            {"service": "travel", "agent": AGENT}) or 0) == below
        assert h.sample("otel_eval_prediction_labelled_total", service="travel", agent=AGENT,
                        outcome="success") == 1  # from the outcome attribute
        auc_gauge = "otel_eval_prediction_rolling_auc"
        assert h.svc.registry.get_sample_value(auc_gauge, {"service": "travel",
                                                           "agent": AGENT}) is None
        after = _feedback(h, ids[1], False)
        assert after["prediction"]["p_success"] == p[ids[1]]  # kept through the re-verdict
        want = roc_auc_score([1, 0], [p[ids[0]], p[ids[1]]])
        assert h.sample(auc_gauge, service="travel", agent=AGENT) == pytest.approx(want)
        _feedback(h, ids[2], True)
        want = roc_auc_score([1, 0, 1], [p[t] for t in ids])
        assert h.sample(auc_gauge, service="travel", agent=AGENT) == pytest.approx(want)
        metrics = urllib.request.urlopen(f"{h.admin_url}/metrics", timeout=10).read().decode()
        assert f'otel_eval_prediction_rolling_auc{{agent="{AGENT}",service="travel"}}' in metrics


def test_serve_with_the_model_turned_off_adds_no_prediction(tmp_path: Path) -> None:
    with running_service(tmp_path, **{"prediction.model_path": ""}) as h:
        tid = _run(h.grpc_target, 1)
        assert h.release() == 1
        body = h.svc.store.get(tid)
        assert body is not None and "prediction" not in body
        assert h.sample("otel_eval_prediction_p_success_count", service="travel",
                        agent=AGENT) == 0


def test_serve_refuses_to_start_with_a_bad_model(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    with pytest.raises(ConfigError, match=r"prediction\.model_path: model file .*JSON object"), \
            running_service(tmp_path, **{"prediction.model_path": str(bad)}):
        pass
