"""The AI SDK's recordings as ``experimental_telemetry: {recordOutputs: false}`` leaves them:
the runs that went right must still pass. An output that is not recorded is unknown, never a
reason for a finding (OpenInference's span processor sets the root ERROR with the message of
a tool call the run recovered from; the answer after it is unrecorded, not missing)."""

from __future__ import annotations

import pytest
from conformance import corpus
from conformance.hung import load

from otel_eval.app.config import Config
from otel_eval.base.model import Span, Trace
from otel_eval.evaluate.evaluator import Evaluator

# What recordOutputs: false leaves out (the AI SDK's output attributes), and what
# OpenInference's span processor derives from them.
_OUTPUT_KEYS = ("ai.response.text", "ai.response.toolCalls", "ai.response.object",
                "ai.response.reasoning", "ai.toolCall.result", "output.value",
                "output.mime_type")
_OUTPUT_PREFIXES = ("llm.output_messages.",)
_STACKS = ("vercel-ai", "vercel-ai-openinference")
_WENT_RIGHT = ("clean", "distinct", "tool_error", "parallel", "streaming", "remote_parent")


def _without_outputs(span: Span) -> Span:
    attrs = {k: v for k, v in span.attributes.items()
             if k not in _OUTPUT_KEYS and not k.startswith(_OUTPUT_PREFIXES)}
    return Span(span.trace_id, span.span_id, span.parent_span_id, span.name, span.start_ns,
                span.end_ns, kind=span.kind, status=span.status,
                status_message=span.status_message, attributes=attrs, events=span.events,
                resource=span.resource, scope=span.scope, parent_remote=span.parent_remote)


@pytest.mark.parametrize(("stack", "scenario"),
                         [(s, c) for s in _STACKS for c in _WENT_RIGHT
                          if corpus.recording_path(s, c).is_file()])
def test_a_run_that_went_right_passes_without_recorded_outputs(stack: str,
                                                               scenario: str) -> None:
    spans, logs = load(stack, scenario)
    stripped = [_without_outputs(s) for s in spans]
    ev = Evaluator(Config()).evaluate(Trace(spans[0].trace_id, stripped, "complete", logs=logs))
    assert ev is not None and ev.verdict is not None
    assert ev.trajectory.output is None  # the answer is unknown
    errors = [f"{f.detector}/{f.kind}: {f.message}" for f in ev.findings
              if f.severity == "error"]
    assert ev.verdict.passed and not errors, errors
