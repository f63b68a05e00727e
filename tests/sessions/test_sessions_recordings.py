"""The conversation id as real instrumentations record it (the pinned conformance corpus):
pydantic-ai stamps ``gen_ai.conversation.id``, Agno (OpenInference) ``session.id``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otel_eval.base.model import Span, Trace
from otel_eval.decode.otlp import decode_request
from otel_eval.decode.otlp_json import request_from_json
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.trajectory.build import build_trajectory

RECORDINGS = Path(__file__).resolve().parents[1] / "conformance" / "recordings"


@pytest.mark.parametrize(("stack", "source"), [
    ("pydantic-ai", "genai gen_ai.conversation.id"),
    ("agno", "openinference session.id"),
])
def test_recorded_conversation_ids(stack: str, source: str) -> None:
    rec = json.loads((RECORDINGS / stack / "clean.json").read_text())
    spans = [s for item in rec["requests"] if item["signal"] == "traces"
             for s in decode_request(request_from_json(json.dumps(item["body"]))).spans]
    by_trace: dict[str, list[Span]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    trace_id, run = max(by_trace.items(), key=lambda kv: len(kv[1]))
    t = build_trajectory(Trace(trace_id, run, "complete"), TrajectoryConfig())
    assert t.session_id
    assert t.conversation_sources["session_id"] == source
