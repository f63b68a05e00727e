"""The judge inside ``serve``: a trace received over OTLP/gRPC is evaluated by the detectors,
stored, then judged through litellm against the scripted loopback LLM; the judge object lands
in the stored evaluation, its grades go out as gen_ai.evaluation.result events, and a judge
that is down or returns garbage never stops ingestion."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from judge_fake_llm import FakeLLM, Reply, completion, error, good
from judge_fixtures import combined_reply, judged_service
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from support.otlp_capture import Capture

from otel_eval.app.service import Service
from otel_eval.base import model
from otel_eval.decode.encode import encode_spans
from otel_eval.decode.otlp import attributes_to_dict
from otel_eval.evaluate.judge import Judge
from otel_eval.store import Store

TRACE_ID = "5bf92f3577b34da6a3ce929d0e0e4736"
ROOT, LLM1, TOOL, LLM2 = "a0f067aa0ba902b7", "a111111111111111", "a222222222222222", \
    "a333333333333333"


def _spans() -> list[model.Span]:
    res = {"service.name": "shop-agent"}
    call = [{"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "search",
                                             "arguments": {"q": "red shoes"}}]}]
    answer = [{"role": "assistant", "parts": [{"type": "text", "content": "Found them."}]}]
    user = [{"role": "user", "parts": [{"type": "text", "content": "find red shoes"}]}]
    llm = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
           "gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 10}
    return [
        model.Span(TRACE_ID, ROOT, None, "invoke_agent shop", 1_000, 9_000, resource=res,
                   attributes={"gen_ai.operation.name": "invoke_agent",
                               "gen_ai.agent.name": "shop"}),
        model.Span(TRACE_ID, LLM1, ROOT, "chat gpt-4o", 2_000, 3_000, resource=res,
                   attributes={**llm, "gen_ai.input.messages": json.dumps(user),
                               "gen_ai.output.messages": json.dumps(call)}),
        model.Span(TRACE_ID, TOOL, ROOT, "execute_tool search", 4_000, 5_000, resource=res,
                   attributes={"gen_ai.operation.name": "execute_tool",
                               "gen_ai.tool.name": "search", "gen_ai.tool.call.id": "c1"}),
        model.Span(TRACE_ID, LLM2, ROOT, "chat gpt-4o", 6_000, 7_000, resource=res,
                   attributes={**llm, "gen_ai.input.messages": json.dumps(user),
                               "gen_ai.output.messages": json.dumps(answer)}),
    ]


def _scripted(body: dict[str, Any]) -> Reply:
    text = body["messages"][-1]["content"]
    steps = re.search(r"steps ([\d, ]+)\.", text)
    assert steps is not None, text
    return good(combined_reply([int(i) for i in steps.group(1).split(",")]))


@contextmanager
def _serve(tmp_path: Path, llm: FakeLLM, events: Capture | None = None
           ) -> Iterator[Service]:
    changes: dict[str, Any] = {"judge.backoff_initial_s": 0.0}
    if events is not None:
        changes["export.events_endpoint"] = f"127.0.0.1:{events.port}"
    now = [1000.0]
    with judged_service(tmp_path, llm.api_base, clock=lambda: now[0], **changes) as svc:
        assert svc.grpc is not None
        with grpc.insecure_channel(f"127.0.0.1:{svc.grpc.port}") as ch:
            trace_service_pb2_grpc.TraceServiceStub(ch).Export(encode_spans(_spans()),
                                                               timeout=10)
        now[0] += svc.config.assembly.grace_s + 1
        svc.engine.tick()
        assert svc.engine.process() == 1  # the detectors' verdict is stored at once
        yield svc  # shut down on exit: drains the judge queue before it returns


def _stored(tmp_path: Path) -> dict[str, Any]:
    store = Store(str(tmp_path / "r.db"))
    try:
        body = store.get(TRACE_ID)
    finally:
        store.close()
    assert body is not None
    return body


def _sample(svc: Service, name: str, **labels: str) -> float:
    return svc.registry.get_sample_value(name, labels) or 0.0


def test_serve_judges_stored_traces_and_emits_judge_events(llm: FakeLLM,
                                                           tmp_path: Path) -> None:
    llm.route = _scripted
    with Capture() as ds, _serve(tmp_path, llm, ds) as svc:
        pass
    body = _stored(tmp_path)
    judge = body["judge"]
    assert judge["overall"]["status"] == "ok" and judge["mode"] == "combined"
    assert judge["judges"]["trace"]["scores"] == {"trace": 0.7}
    assert judge["judges"]["outcome"]["scores"] == {"outcome": 1.0}
    step_spans = {c["span_id"] for c in judge["judges"]["step"]["critiques"]}
    assert step_spans == {LLM1, LLM2}
    assert body["verdict"] is not None  # the detectors' result is kept beside the judge's
    assert len(llm.requests) == 1
    assert _sample(svc, "otel_eval_judge_calls_total", judge="combined", status="ok") == 1
    assert _sample(svc, "otel_eval_judge_tokens_total", judge="combined",
                   direction="input") == 1000
    assert _sample(svc, "otel_eval_judge_score_count", judge="trace", dimension="trace") == 1
    records = [r for req in ds.logs for rl in req.resource_logs for sl in rl.scope_logs
               for r in sl.log_records]
    judged = {}
    for r in records:
        attrs = attributes_to_dict(r.attributes)
        if "otel_eval.judge.model" in attrs:
            judged.setdefault(attrs["gen_ai.evaluation.name"], []).append((r.span_id.hex(),
                                                                            attrs))
    assert {"trace", "outcome", "step", "process.goal_alignment",
            "process.result_verification"} <= set(judged)
    (span, trace_attrs), = judged["trace"]
    assert span == ROOT and trace_attrs["gen_ai.evaluation.score.value"] == 0.7
    assert trace_attrs["gen_ai.evaluation.explanation"] == "Cancelled without confirmation."
    # one grade per turn on its LLM span, and the trace's mean on the root
    verification = dict(judged["process.result_verification"])
    assert set(verification) == {LLM1, LLM2, ROOT}
    assert verification[LLM1]["gen_ai.evaluation.explanation"] == "did not confirm"
    assert all(a["gen_ai.evaluation.score.label"] == "fail"
               for a in verification.values())  # 0.2 < 0.5


def test_garbage_from_the_judge_is_a_parse_error_not_a_score(llm: FakeLLM,
                                                             tmp_path: Path) -> None:
    llm.route = lambda body: completion("this is not JSON at all")
    with _serve(tmp_path, llm) as svc:
        pass
    body = _stored(tmp_path)
    entry = body["judge"]["judges"]["combined"]
    assert entry["status"] == "parse_error" and entry["scores"] == {}
    assert body["judge"]["overall"]["status"] != "ok"
    assert len(llm.requests) == 2  # one repair retry, then parse_error
    assert _sample(svc, "otel_eval_judge_calls_total", judge="combined",
                   status="parse_error") == 1
    assert _sample(svc, "otel_eval_traces_completed_total", service="shop-agent", agent="shop",
                   status="complete") == 1


def test_judge_down_leaves_the_detectors_verdict_and_says_why(llm: FakeLLM,
                                                              tmp_path: Path) -> None:
    llm.route = lambda body: error(500)
    with _serve(tmp_path, llm) as svc:
        pass
    body = _stored(tmp_path)
    assert body["verdict"] is not None
    assert body["judge"]["judges"]["combined"]["status"] not in ("ok", "skipped")
    assert _sample(svc, "otel_eval_receiver_spans_accepted_total", protocol="grpc") == 4


def test_the_queue_depth_comes_back_to_zero_after_a_judgement_that_raised(
        llm: FakeLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``otel_eval_judge_queue_depth`` was set when an evaluation was queued and when one was
    judged, never when one was skipped: after a judgement that raised (``worker_error``) it
    kept saying 1 waiting, with none left, for as long as no other trace came."""
    llm.route = _scripted

    async def broken(self: Judge, evaluation: Any, spent: Any = None) -> dict[str, Any]:
        raise RuntimeError("a bug in the judge")

    monkeypatch.setattr(Judge, "judge", broken)
    with _serve(tmp_path, llm) as svc:
        pass
    assert _stored(tmp_path)["judge"]["overall"]["reason"] == "worker_error"
    assert _sample(svc, "otel_eval_judge_skipped_total", reason="worker_error") == 1
    assert _sample(svc, "otel_eval_judge_queue_depth") == 0
