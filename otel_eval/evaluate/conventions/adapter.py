"""The one interface every convention adapter implements (one module per convention).

An adapter recognises its spans (``explicit``: the convention's own marker attribute;
``implicit``: its attribute shapes without the marker) and fills a ``model.Step`` from them.
Adapters never raise on bad input: values that do not parse are left as raw strings or None.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from otel_eval.base.model import Span, Step, StepKind

Attrs = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Adapter:
    name: str  # recorded as Step.convention
    # kind of the span when it carries the convention's explicit marker, else None
    explicit: Callable[[Span, Attrs], StepKind | None]
    # kind of the span judged from the convention's attribute shapes alone, else None
    implicit: Callable[[Span, Attrs], StepKind | None]
    # sets the kind-specific fields of the step (tool name/arguments, model, tokens, ...)
    fill: Callable[[Step, Span, Attrs], None]
    # name of the agent an agent span stands for; ``enclosing`` = the enclosing agent's attrs
    agent_name: Callable[[Span, Attrs, Attrs | None], str | None]
    # tool definitions offered on this span: name -> JSON schema ({} when unknown)
    tools: Callable[[Attrs], dict[str, Any]]


def no_kind(span: Span, attrs: Attrs) -> StepKind | None:
    return None


def no_tools(attrs: Attrs) -> dict[str, Any]:
    return {}
