"""Stage: trajectory (part). A step's fields read from every convention its span carries.

A span's *kind* comes from its marker (``conventions.classify``); its *fields* come from
wherever they are: instrumentations put a vendor's marker (``traceloop.span.kind``,
``openinference.span.kind``) and the GenAI attributes (``gen_ai.tool.call.arguments``) on one
span. Each convention module reads only its own keys (``Adapter.fill``); ``read_fields`` runs
every reader present on the span and takes each field from the first reader that has it, in
one order of precedence for every field:

1. the standard GenAI attributes (current keys, then the older ones: one reader);
2. the convention of the span's marker (the vendor's own keys);
3. the other conventions present, in ``ADAPTERS`` order (OpenInference, OpenLLMetry, Vercel
   AI SDK, Langfuse, MLflow): shapes without a marker;
4. fallbacks from the span itself: the tool's name is the span's name (less the call method
   of ``<tool>.__call__``: ``agent_names.tool_from_span_name``).

The agent's name follows the same order over the conventions' attributes, then the span's
name (``agent_names.from_span_name``: ``invoke_agent <agent>``, ``<agent>.<method>``), a
framework's default name giving way to a real one wherever it is. ``Step.sources`` records,
per field, ``"<convention> <attribute>"`` of the value kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from otel_eval.base.model import Span
from otel_eval.base.steps import Step, StepKind
from otel_eval.evaluate.conventions.adapter import Adapter, Attrs
from otel_eval.evaluate.conventions.agent_names import (
    agent_name,
    from_span_name,
    tool_from_span_name,
)
from otel_eval.evaluate.conventions.genai import GENAI, GENAI_LEGACY
from otel_eval.evaluate.conventions.span_readers import EVENT_KEYS, SpanReader, for_keys

__all__ = ["FIELDS", "Plan", "merged_agent_name", "plan", "read_fields", "readers"]

# The step fields a reader may supply (messages in/out are input_text/output_text).
FIELDS = ("tool_name", "call_id", "arguments", "result", "input_text", "output_text", "reply",
          "tool_calls", "model", "input_tokens", "output_tokens", "finish_reasons")
_GENAI_FAMILY = (GENAI, GENAI_LEGACY)


# A span's marker (``conventions.classify``) and reader plan depend on its attribute keys and
# on these few values only (the markers whose presence makes a convention's ``explicit`` /
# ``implicit`` say a kind: a key present with a null value is no marker), and on whether the
# span has the older GenAI content events. A convention whose ``explicit``, ``implicit`` or
# ``present`` reads anything else to decide between None and a kind must be added here.
_VALUE_MARKERS = ("gen_ai.operation.name", "openinference.span.kind", "traceloop.span.kind",
                  "llm.request.type", "langfuse.observation.type", "mlflow.spanType")
_STR_MARKERS = ("ai.operationId",)
_LEGACY_EVENTS = frozenset({"gen_ai.content.prompt", "gen_ai.content.completion"})
# the span events whose presence changes the plan: the older content events (a convention's
# ``present``) and those a ``span_readers`` reader reads
_SHAPE_EVENTS = _LEGACY_EVENTS | EVENT_KEYS
_NO_EVENTS: frozenset[str] = frozenset()
_PLAN_CACHE = 4096  # plans kept (distinct key shapes); the cache is emptied when full
# Characters of attribute keys the cached shapes hold (a shape keeps its keys, span content
# of any length), at most; the cache is emptied when full, and a shape whose keys alone
# pass a sixteenth of it is read anew each time, not kept.
_PLAN_CACHE_CHARS = 16 << 20
Classify = Callable[[Span, Attrs], tuple[StepKind, Adapter | None]]


class Plan:
    """What reading a span of one shape takes: its marker's convention (and whether the
    marker is explicit: the kind is then ``marker.explicit``'s, else ``marker.implicit``'s),
    the conventions present, in order of precedence, and for each the ``Step.sources`` text
    of every field it may supply (the first of its keys the shape has); the
    convention-independent readers its keys call for (``span_readers``: cost, cache-write
    tokens, exit code); the readers of the tools it offers (``offers``: the conventions',
    then those readers') and of the tool it describes (``described``). Shared by every span
    of the shape; never changed."""

    __slots__ = ("described", "explicit", "extra", "found", "marker", "offers", "sources")

    def __init__(self, marker: Adapter | None, explicit: bool, found: list[Adapter],
                 attrs: Attrs, events: frozenset[str] = _NO_EVENTS) -> None:
        self.marker, self.explicit = marker, explicit
        self.found = tuple(found)
        self.sources = [{f: _source(a, f, attrs) for f in FIELDS} for a in found]
        self.extra: tuple[SpanReader, ...] = for_keys(attrs, events)
        self.offers: tuple[Callable[[Attrs], dict[str, Any]], ...] = (
            *(a.tools for a in found), *(r.tools for r in self.extra if r.tools is not None))
        keys = attrs.keys()
        self.described = tuple(a.described.read for a in found if a.described is not None
                               and not keys.isdisjoint(a.described.keys))


_plans: dict[tuple[Any, ...], Plan] = {}
_plan_chars = [0]  # characters of the keys of the shapes in ``_plans``


def plan(span: Span, attrs: Attrs, adapters: Sequence[Adapter],
         classify: Classify) -> tuple[StepKind, Plan]:
    """(the span's kind, the reader plan of its shape): ``classify`` and ``readers`` run once
    per shape (adapters, attribute keys, marker values' presence, content events); a span of
    a known shape pays one call of its marker's ``explicit`` or ``implicit`` for its kind."""
    get = attrs.get
    events = (frozenset(e.name for e in span.events if e.name in _SHAPE_EVENTS)
              if span.events else _NO_EVENTS)
    shape = (adapters, frozenset(attrs),
             *[get(k) is not None for k in _VALUE_MARKERS],
             *[isinstance(get(k), str) for k in _STR_MARKERS], events)
    found = _plans.get(shape)
    if found is not None:
        marker = found.marker
        if marker is None:
            return "other", found
        kind = (marker.explicit if found.explicit else marker.implicit)(span, attrs)
        if kind is not None:
            return kind, found
    kind, marker = classify(span, attrs)  # a new shape (or, never expected, a changed one)
    explicit = marker is not None and marker.explicit(span, attrs) is not None
    found = Plan(marker, explicit, readers(marker, span, attrs, adapters), attrs, events)
    _keep(shape, found)
    return kind, found


def _keep(shape: tuple[Any, ...], found: Plan) -> None:
    """Cache ``found`` for ``shape`` within ``_PLAN_CACHE`` plans and ``_PLAN_CACHE_CHARS``."""
    if shape in _plans:
        _plans[shape] = found  # its keys are counted already
        return
    chars = sum(map(len, shape[1]))
    if chars > _PLAN_CACHE_CHARS // 16:
        return
    if not _plans:
        _plan_chars[0] = 0  # emptied (a test clears it too)
    if len(_plans) >= _PLAN_CACHE or _plan_chars[0] + chars > _PLAN_CACHE_CHARS:
        _plans.clear()
        _plan_chars[0] = 0
    _plans[shape] = found
    _plan_chars[0] += chars


def readers(marker: Adapter | None, span: Span, attrs: Attrs,
            adapters: Sequence[Adapter]) -> list[Adapter]:
    """The conventions present on a span, in order of precedence (module docstring)."""
    if marker is None:
        return []  # a span no convention recognises: not understood, nothing read
    out: list[Adapter] = []
    if marker in _GENAI_FAMILY:
        out.append(marker)
    elif GENAI.present(span, attrs) or GENAI_LEGACY.present(span, attrs):
        out.append(GENAI)
    if marker not in out:
        out.append(marker)
    for adapter in adapters:
        if adapter not in out and adapter not in _GENAI_FAMILY and adapter.present(span, attrs):
            out.append(adapter)
    return out


def _source(adapter: Adapter, field: str, attrs: Attrs) -> str:
    key = adapter.key_of(field, attrs)
    name = adapter.name
    if adapter in _GENAI_FAMILY and key in _LEGACY_KEYS:
        name = GENAI_LEGACY.name
    return f"{name} {key}" if key else f"{name} (span events or name)"


_LEGACY_KEYS = frozenset({"gen_ai.prompt", "gen_ai.completion", "gen_ai.usage.prompt_tokens",
                          "gen_ai.usage.completion_tokens"})


def read_fields(step: Step, span: Span, attrs: Attrs, found: Plan) -> None:
    """Fill ``step`` (its kind already set) from every reader of the plan, field by field."""
    readers_ = found.found
    if len(readers_) == 1:  # the usual span: one convention, no merge to do
        readers_[0].fill(step, span, attrs)
        sources = found.sources[0]
        for field in FIELDS:
            value = getattr(step, field)
            if value is not None and value != []:
                step.sources[field] = sources[field]
    else:
        for adapter, sources in zip(readers_, found.sources, strict=True):
            scratch = Step(step.index, step.span_id, step.parent_span_id, step.kind, step.name)
            adapter.fill(scratch, span, attrs)
            for field in FIELDS:
                value = getattr(scratch, field)
                if value is None or value == []:
                    continue
                have = getattr(step, field)
                if have is None or have == []:
                    setattr(step, field, value)
                    step.sources[field] = sources[field]
    if step.kind == "tool" and step.tool_name is None:
        step.tool_name = tool_from_span_name(span.name)
        step.sources["tool_name"] = "span name"


def merged_agent_name(span: Span, attrs: Attrs, enclosing: Attrs | None,
                      found: Sequence[Adapter]) -> tuple[str | None, str]:
    """(the agent an agent span stands for, where it came from): the first real name among
    the conventions' attributes in precedence order, then the span's name; when every one is
    a framework's default, the first of them (the trajectory tells it is no name)."""
    candidates: list[tuple[str, str]] = []
    for adapter in found:
        name = adapter.agent_name(span, attrs, enclosing)
        if name:
            key = adapter.key_of("agent_name", attrs)
            candidates.append((name, f"{adapter.name} {key}" if key
                               else f"{adapter.name} (enclosing agent)"))
    candidates.append((from_span_name(span.name), "span name"))
    for name, source in candidates:
        if agent_name(name) is not None:
            return name, source
    return candidates[-1] if candidates[-1][0] else (None, "unknown")
