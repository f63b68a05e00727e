"""The corpus' runs that went right, as an SDK with an attribute value length limit exports
them (``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``: every string value, and every string of an array,
cut at the limit): they must still pass. A tool definition cut there is no longer JSON; the
tools offered are then unknown, not the ones that could be read (BeeAI offers get_weather and
final_answer as ``llm.tools.N.tool.json_schema``: with the longer one cut, its call read as
a tool that was not offered, an error). An agent one of whose spans recorded an offer cut so
is one whose offer is unknown, whatever its other spans offered (LangChain.js's coordinator
calls the weather agent as a tool under the same node: the weather agent's offer is not the
coordinator's)."""

from __future__ import annotations

from typing import Any

import pytest
from conformance import corpus
from conformance.hung import load

from otel_eval.app.config import Config
from otel_eval.base.model import Span, Trace
from otel_eval.evaluate.evaluator import Evaluator

LIMIT = 300  # characters; BeeAI's final_answer definition is 321
_WENT_RIGHT = ("clean", "distinct", "tool_error", "parallel", "streaming", "remote_parent",
               "multi_agent")


def _cut(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return value[:limit]
    if isinstance(value, list | tuple):
        return [_cut(v, limit) for v in value]
    return value


def _limited(span: Span, limit: int = LIMIT) -> Span:
    return Span(span.trace_id, span.span_id, span.parent_span_id, span.name, span.start_ns,
                span.end_ns, kind=span.kind, status=span.status,
                status_message=span.status_message,
                attributes={k: _cut(v, limit) for k, v in span.attributes.items()},
                events=span.events, resource=span.resource, scope=span.scope,
                parent_remote=span.parent_remote)


_CELLS = [(s, c) for s, c in corpus.recorded() if c in _WENT_RIGHT]


@pytest.mark.parametrize(("stack", "scenario"), _CELLS, ids=[f"{s}/{c}" for s, c in _CELLS])
def test_a_run_that_went_right_passes_under_an_attribute_length_limit(stack: str,
                                                                      scenario: str) -> None:
    spans, logs = load(stack, scenario)
    limited = [_limited(s) for s in spans]
    ev = Evaluator(Config()).evaluate(Trace(spans[0].trace_id, limited, "complete", logs=logs))
    assert ev is not None and ev.verdict is not None
    calls = [f"{f.detector}/{f.kind}: {f.message}" for f in ev.findings
             if f.detector == "tool_call" and f.kind in ("selection", "arguments")]
    assert not calls


# smolagents' tool spans record the call as {"args": [], "sanitize_inputs_outputs": true,
# "kwargs": {"city": "Paris"}}: cut at 64 characters, before the city, every call's text is
# the same; the model's calls (its LLM spans) are whole
_CUT_CALLS = [(s, c) for s in ("smolagents", "smolagents-code")
              for c in ("distinct", "parallel", "tool_error")]


@pytest.mark.parametrize(("stack", "scenario"), _CUT_CALLS,
                         ids=[f"{s}/{c}" for s, c in _CUT_CALLS])
def test_arguments_cut_at_the_limit_are_no_repeated_call(stack: str, scenario: str) -> None:
    spans, logs = load(stack, scenario)
    limited = [_limited(s, 64) for s in spans]
    ev = Evaluator(Config()).evaluate(Trace(spans[0].trace_id, limited, "complete", logs=logs))
    assert ev is not None
    assert not [f.message for f in ev.findings if f.kind == "repeated_call"]
    want = corpus.expectation(stack, scenario)["cities"]
    got = [(s.arguments or {}).get("city") for s in ev.trajectory.tool_steps
           if s.tool_name == "get_weather" and isinstance(s.arguments, dict)]
    assert got in ([], want)  # the model's calls, or unknown: never the cut text


# At a short limit (128 characters and less, as some users set) every LLM output recorded as
# JSON text is cut inside its first message: DSPy's six turns, each naming another city after
# the same opening thought, or GenAI's output messages cut before the call's name, read the
# same. Such a text is known only in part, never alike (``values.cut_json``).
_SHORT = [(s, c, n) for n in (128, 64) for s, c in _CELLS]


@pytest.mark.parametrize(("stack", "scenario", "limit"), _SHORT,
                         ids=[f"{s}/{c}@{n}" for s, c, n in _SHORT])
def test_outputs_cut_at_a_short_limit_are_no_stagnation(stack: str, scenario: str,
                                                       limit: int) -> None:
    spans, logs = load(stack, scenario)
    limited = [_limited(s, limit) for s in spans]
    ev = Evaluator(Config()).evaluate(Trace(spans[0].trace_id, limited, "complete", logs=logs))
    assert ev is not None
    assert not [f.message for f in ev.findings if f.detector == "loop"]
