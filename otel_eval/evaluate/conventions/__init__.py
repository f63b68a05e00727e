"""Stage: trajectory (part). Which instrumentation convention a span follows, and what it says.

The span's kind and its ``Step.convention`` come from its marker, by a priority cascade
(first match wins):

1. explicit markers: ``openinference.span.kind`` > ``traceloop.span.kind`` >
   ``gen_ai.operation.name`` > ``ai.operationId`` (Vercel AI SDK) >
   ``langfuse.observation.type`` (Langfuse SDK v3) > ``mlflow.spanType`` (MLflow Tracing);
2. attribute shapes without a marker: OpenLLMetry indexed prompts/completions >
   older GenAI (``gen_ai.system``, ``gen_ai.prompt``, ...) > OpenInference keys
   (``llm.input_messages.N.*``, ``tool.name``, ``llm.model_name``);
3. nothing recognised: kind ``other``, convention ``unknown`` (nothing read: the span is
   not understood).

Its fields are read from every convention present on it, field by field, in one order of
precedence (``conventions.fields``: GenAI first, then the marker's convention, then the
others), each field's source kept in ``Step.sources``.

Promise: ``describe`` never raises on any attribute content (tested with random attributes).
Errors (span status, ``error.type``, exception events, an LLM reply's finish reason ``error``,
a tool's non-zero ``process.exit.code``),
cost (recorded on the span, with its source) and cache-write tokens are
convention-independent (``span_readers``), read after the conventions' fields.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from otel_eval.base.model import Span
from otel_eval.base.steps import Step, StepKind
from otel_eval.evaluate.conventions.adapter import Adapter, Attrs
from otel_eval.evaluate.conventions.fields import Plan, plan, read_fields
from otel_eval.evaluate.conventions.genai import GENAI, GENAI_LEGACY
from otel_eval.evaluate.conventions.langfuse import LANGFUSE
from otel_eval.evaluate.conventions.mlflow import MLFLOW
from otel_eval.evaluate.conventions.openinference import OPENINFERENCE
from otel_eval.evaluate.conventions.openllmetry import OPENLLMETRY
from otel_eval.evaluate.conventions.values import MAX_OUTPUT_CALLS, as_str
from otel_eval.evaluate.conventions.vercel_ai import VERCEL_AI

__all__ = ["ADAPTERS", "UNKNOWN", "Adapter", "classify", "describe", "dominant", "is_setup",
           "merge_tools", "read_span"]

UNKNOWN = "unknown"
_EXPLICIT = (OPENINFERENCE, OPENLLMETRY, GENAI, VERCEL_AI, LANGFUSE, MLFLOW)
_IMPLICIT = (OPENLLMETRY, GENAI_LEGACY, OPENINFERENCE)
ADAPTERS = (OPENINFERENCE, OPENLLMETRY, GENAI, GENAI_LEGACY, VERCEL_AI, LANGFUSE, MLFLOW)
# Where a tool span names the tool call it ran (GenAI, OpenInference, Vercel AI SDK).
_CALL_ID_KEYS = {"gen_ai.tool.call.id": "genai", "tool_call.id": "openinference",
                 "ai.toolCall.id": "vercel_ai"}
# A convention is "dominant" when it labels at least this share of the recognised steps.
_DOMINANT_SHARE = 2 / 3


def classify(span: Span, attrs: Attrs) -> tuple[StepKind, Adapter | None]:
    for adapter in _EXPLICIT:
        kind = adapter.explicit(span, attrs)
        if kind is not None:
            return kind, adapter
    for adapter in _IMPLICIT:
        kind = adapter.implicit(span, attrs)
        if kind is not None:
            return kind, adapter
    return "other", None


def is_setup(span: Span) -> bool:
    """Whether the convention of the span's marker says it is a setup operation (GenAI
    ``create_agent``), no action of a run. Never raises on span content."""
    try:
        adapter = classify(span, span.attributes)[1]
        return adapter is not None and adapter.setup(span, span.attributes)
    except Exception:
        return False  # not understood: not known to be setup


# An exception line of a Python traceback (``Type: message``; one space after the bar of an
# exception group's block, where a frame's lines have two or four), and how much of a
# stack trace is read for them (its end: the innermost exceptions).
_EXCEPTION_LINE = re.compile(r"^[ \t]*\| (?! )([A-Za-z_][\w.]*): (.+)$", re.M)
_GROUP_TAIL = 8192
_GROUP_LEAVES = 3
# Python's traceback of an exception raised from another (``raise ... from cause``): the
# cause's own traceback, its "Type: message" line, then this line, then the exception's
_CAUSED = "\nThe above exception was the direct cause of the following exception:"
_CAUSE_LINE = re.compile(r"^([A-Za-z_][\w.]*): (.+)$", re.M)


def _group_leaves(event_attrs: Attrs) -> str | None:
    """The exceptions inside a Python exception group, from its stack trace: an
    ``asyncio`` / ``anyio`` TaskGroup's message says only how many there were ("unhandled
    errors in a TaskGroup (1 sub-exception)"), and the error that ended the run is one of
    them (an MCP client session is such a group)."""
    trace = as_str(event_attrs.get("exception.stacktrace"))
    if not trace:
        return None
    leaves = [f"{t}: {m.strip()}" for t, m in _EXCEPTION_LINE.findall(trace[-_GROUP_TAIL:])
              if not t.endswith("ExceptionGroup")]
    return "; ".join(leaves[:_GROUP_LEAVES]) or None


def _cause(event_attrs: Attrs) -> str | None:
    """The exception an exception was raised from, from its stack trace (BeeAI's
    ``ChatModelError: Chat Model error`` is raised from the API's error, which says what
    happened): the last "Type: message" line before the last cause marker, in the trace's
    last 8 KB."""
    trace = as_str(event_attrs.get("exception.stacktrace"))
    if not trace or _CAUSED not in trace:
        return None
    tail = trace[-_GROUP_TAIL:]
    at = tail.rfind(_CAUSED)
    found = _CAUSE_LINE.findall(tail, 0, at) if at >= 0 else []
    return f"{found[-1][0]}: {found[-1][1].strip()}" if found else None


def _error(span: Span, attrs: Attrs) -> str | None:
    """The error a span reports, or None: status ERROR, ``error.type``, exception events
    (an exception group's with the exceptions inside it; an exception's, when the status
    says nothing, with the exception it was raised from). A span whose status is OK reports
    none: OK is set on purpose, to say the operation succeeded, so an exception recorded on
    it was handled (AutoGen's agent span records the CancelledError of its closed message
    stream and ends OK)."""
    if span.status == "ok":
        return None
    exception = leaves = None
    if span.events:
        for event in span.events:
            if event.name == "exception":
                ea = event.attributes
                parts = (as_str(ea.get("exception.type")), as_str(ea.get("exception.message")))
                exception = ": ".join(x for x in parts if x) or "exception"
                if parts[0] is not None and parts[0].endswith("ExceptionGroup"):
                    leaves = _group_leaves(ea)
                elif not span.status_message:
                    leaves = _cause(ea)
                break
    if leaves:
        exception = f"{exception} [{leaves}]"
    error_type = as_str(attrs.get("error.type"))
    if span.status == "error":
        message = span.status_message
        return (f"{message} [{leaves}]" if message and leaves else message) \
            or exception or error_type or "error"
    return exception or error_type


# The finish reason the GenAI conventions define for a generation that failed (the output
# messages' ``FinishReason``: stop, length, content_filter, tool_call, error); the AI SDK's
# ``finishReason`` has the same value. Any other value keeps its meaning (a stop, a cut, a
# value not understood: unknown, never a failure).
_FAILED_REPLY_REASON = "error"
_FAILED_REPLY = "the model's reply ended with finish reason error"


def _failed_reply(step: Step) -> bool:
    """An LLM call whose reply says it failed (a finish reason ``error``), whatever the
    span's status: the call failed as one whose span ended in ERROR did. (No Python call
    per reason, and none for a step without reasons: ``read_span`` asks for every span.)"""
    return step.kind == "llm" and _FAILED_REPLY_REASON in map(str.lower, step.finish_reasons)


def describe(step: Step, span: Span, attrs: Attrs) -> Adapter | None:
    """Classify ``span`` and fill ``step`` from it; returns the marker's adapter (None:
    unknown)."""
    return read_span(step, span, attrs)[0]


def read_span(step: Step, span: Span, attrs: Attrs) -> tuple[Adapter | None, Plan]:
    """Classify ``span`` and fill ``step`` from every convention on it: (the marker's
    adapter or None, the plan of its shape: ``found``, the conventions read in order of
    precedence, and ``offers``, the readers of the tools it offers)."""
    kind, shape = plan(span, attrs, ADAPTERS, classify)
    adapter = shape.marker
    step.kind = kind
    if adapter is not None:
        step.convention = adapter.name
        read_fields(step, span, attrs, shape)
        if kind == "other":
            why = adapter.undefined(span, attrs)
            if why is not None:
                step.unknown["kind"] = why
    if kind == "tool" and step.call_id is None:
        for key in _CALL_ID_KEYS:
            value = as_str(attrs.get(key))
            if value:
                step.call_id = value
                step.sources["call_id"] = f"{_CALL_ID_KEYS[key]} {key}"
                break
    error = _error(span, attrs)
    if error is not None:
        step.status = "error"
        step.error = error
    elif step.finish_reasons and _failed_reply(step):
        step.status = "error"
        step.error = _FAILED_REPLY
        step.sources["error"] = f"finish reason {_FAILED_REPLY_REASON}"
    for reader in shape.extra:  # cost, cache-write tokens, exit code: only when keyed
        reader.read(step, span, attrs)
    if len(step.tool_calls) > MAX_OUTPUT_CALLS:  # the readers stopped one past it
        del step.tool_calls[MAX_OUTPUT_CALLS:]
        step.unknown["tool_calls"] = (f"more than {MAX_OUTPUT_CALLS} calls asked for in one "
                                      f"output: the first {MAX_OUTPUT_CALLS} read")
    return adapter, shape


def merge_tools(into: dict[str, Any], found: dict[str, Any]) -> None:
    """Add offered tools; a known schema replaces an unknown ({}) one, never the reverse."""
    for name, schema in found.items():
        if schema or name not in into:
            into.setdefault(name, schema)
            if schema and not into[name]:
                into[name] = schema


def dominant(conventions: Iterable[str]) -> str:
    """The convention of the trajectory: the one labelling ≥ 2/3 of the recognised steps,
    ``mixed`` when none does, ``unknown`` when no step was recognised."""
    counts: dict[str, int] = {}
    for c in conventions:  # a plain dict: Counter's generator path costs 5x on ~20 steps
        if c != UNKNOWN:
            counts[c] = counts.get(c, 0) + 1
    if not counts:
        return UNKNOWN
    name, n = max(counts.items(), key=_count)  # the first of equals, as most_common(1)
    return name if n >= _DOMINANT_SHARE * sum(counts.values()) else "mixed"


def _count(item: tuple[str, int]) -> int:
    return item[1]
