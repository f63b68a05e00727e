"""Mixing conventions never adds a conclusion: for every recording of the corpus, stripping
one convention's keys from the spans that carry several, or duplicating a field under a
second convention's key with the same value, leaves the evaluation as it is or only less
certain (more ``unrecorded``), never with a finding it did not have.

Recordings are decoded and evaluated offline (the spans of each trace as one ``Trace``): what
is compared is the same engine on the original and the altered spans.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from conformance import corpus

from otel_eval.app.config import Config
from otel_eval.base.model import Span, Trace
from otel_eval.decode.otlp import decode_request
from otel_eval.decode.otlp_json import request_from_dict
from otel_eval.decode.otlp_logs import decode_logs, logs_request_from_json
from otel_eval.evaluate.conventions import ADAPTERS
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.trajectory import build_trajectory

CONFIG = Config()
# The keys of each convention a span may carry (its marker included).
_OWN = {a.name: a for a in ADAPTERS}
_PREFIXES = {"openinference": ("openinference.", "input.", "output.", "llm.", "tool.",
                               "tool_call.", "agent.", "graph."),
             "openllmetry": ("traceloop.", "gen_ai.prompt.", "gen_ai.completion.",
                             "llm.request.", "llm.usage."),
             "vercel_ai": ("ai.",)}


def _traces(stack: str, scenario: str) -> list[Trace]:
    spans: list[Span] = []
    logs = []
    for item in corpus.recording(stack, scenario)["requests"]:
        if item["signal"] == "traces":
            spans += decode_request(request_from_dict(item["body"])).spans
        else:
            logs += decode_logs(logs_request_from_json(json.dumps(item["body"]).encode())).records
    by_trace: dict[str, Trace] = {}
    for s in spans:
        by_trace.setdefault(s.trace_id, Trace(s.trace_id, [], "complete")).spans.append(s)
    for record in logs:
        if record.trace_id in by_trace:
            by_trace[record.trace_id].logs.append(record)
    return list(by_trace.values())


def _copy(trace: Trace, edit: Callable[[Span, dict[str, Any]], dict[str, Any]]) -> Trace:
    spans = [Span(s.trace_id, s.span_id, s.parent_span_id, s.name, s.start_ns, s.end_ns,
                  kind=s.kind, status=s.status, status_message=s.status_message,
                  attributes=edit(s, dict(s.attributes)), events=list(s.events),
                  resource=s.resource, scope=s.scope, parent_remote=s.parent_remote)
             for s in trace.spans]
    return Trace(trace.trace_id, spans, trace.status, logs=list(trace.logs))


def _findings(trace: Trace) -> tuple[Counter[str], dict[str, int]]:
    ev = Evaluator(CONFIG).evaluate(trace)
    if ev is None:  # no agent run (only setup operations): nothing concluded
        return Counter(), {}
    return (Counter(f"{f.detector}/{f.kind}" for f in ev.findings),
            dict(ev.trajectory.unrecorded))


def _conventions(attrs: dict[str, Any]) -> list[str]:
    found = [name for name, prefixes in _PREFIXES.items()
             if any(k.startswith(prefixes) for k in attrs)]
    if any(k.startswith("gen_ai.") and not k.startswith(_PREFIXES["openllmetry"][1:3])
           for k in attrs):
        found.append("genai")
    return found


def _strip(convention: str) -> Callable[[Span, dict[str, Any]], dict[str, Any]]:
    def edit(span: Span, attrs: dict[str, Any]) -> dict[str, Any]:
        if len(_conventions(attrs)) < 2:
            return attrs  # only spans that carry several conventions
        if convention == "genai":
            return {k: v for k, v in attrs.items() if not k.startswith("gen_ai.")
                    or k.startswith(_PREFIXES["openllmetry"][1:3])}
        return {k: v for k, v in attrs.items() if not k.startswith(_PREFIXES[convention])}
    return edit


def _duplicate(trace: Trace) -> Callable[[Span, dict[str, Any]], dict[str, Any]]:
    """Each tool span's arguments as read, also under ``gen_ai.tool.call.arguments``; each LLM
    span's model also under ``gen_ai.request.model`` (when the span has no such key)."""
    steps = {s.span_id: s for s in build_trajectory(trace, CONFIG.trajectory).steps
             if not s.rebuilt}

    def edit(span: Span, attrs: dict[str, Any]) -> dict[str, Any]:
        step = steps.get(span.span_id)
        if step is None:
            return attrs
        if (step.kind == "tool" and isinstance(step.arguments, dict)
                and "gen_ai.tool.call.arguments" not in attrs):
            attrs["gen_ai.tool.call.arguments"] = json.dumps(step.arguments)
        if step.kind == "llm" and step.model and "gen_ai.request.model" not in attrs \
                and "gen_ai.response.model" not in attrs:
            attrs["gen_ai.request.model"] = step.model
        return attrs
    return edit


def _less_certain(base: tuple[Counter[str], dict[str, int]],
                  got: tuple[Counter[str], dict[str, int]]) -> list[str]:
    new = got[0] - base[0]
    return [f"new finding {k} x{n}" for k, n in new.items()]


@pytest.mark.parametrize(("stack", "scenario"), corpus.recorded(),
                         ids=[f"{a}/{b}" for a, b in corpus.recorded()])
def test_mixing_conventions_adds_no_finding(stack: str, scenario: str) -> None:
    problems = []
    for trace in _traces(stack, scenario):
        base = _findings(trace)
        present = {c for s in trace.spans if len(_conventions(s.attributes)) >= 2
                   for c in _conventions(s.attributes)}
        for convention in sorted(present):
            got = _findings(_copy(trace, _strip(convention)))
            problems += [f"without {convention}: {p}" for p in _less_certain(base, got)]
        got = _findings(_copy(trace, _duplicate(trace)))
        if got[0] != base[0]:
            problems.append(f"duplicated fields: {dict(base[0])} -> {dict(got[0])}")
    wrong = corpus.known_wrong().get(f"{stack}/{scenario}")
    if problems and wrong and "selection" in corpus.known_wrong_checks(stack, scenario):
        # a finding otel-eval misses as recorded (a tool span's own definition read as an
        # offer) may appear once a convention's keys are gone: the right one, not a new claim
        pytest.xfail(f"{wrong} ({problems})")
    assert not problems, problems
