"""The one interface every convention reader implements (one module per convention).

A reader recognises its spans (``explicit``: the convention's own marker attribute;
``implicit``: its attribute shapes without the marker) and reads the step fields its own keys
carry (``fill``). It never looks at another convention's keys, and never falls back to the
span's name: ``conventions.fields`` merges what every reader present on a span found, field by
field, and applies the span-name fallbacks last. Readers never raise on bad input: values that
do not parse are left as raw strings or None.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from otel_eval.base.model import Span
from otel_eval.base.steps import Step, StepKind

Attrs = Mapping[str, Any]


class Described(NamedTuple):
    """How a convention's tool spans describe their own tool: ``read`` (name -> JSON schema)
    on the spans that carry one of ``keys``."""

    keys: frozenset[str]
    read: Callable[[Attrs], dict[str, Any]]


@dataclass(frozen=True, slots=True, eq=False)  # one object per convention: identity
class Adapter:
    name: str  # recorded as Step.convention (of the span's marker) and in Step.sources
    # kind of the span when it carries the convention's explicit marker, else None
    explicit: Callable[[Span, Attrs], StepKind | None]
    # kind of the span judged from the convention's attribute shapes alone, else None
    implicit: Callable[[Span, Attrs], StepKind | None]
    # sets the step fields the convention's keys carry (tool name/arguments, model, tokens...)
    fill: Callable[[Step, Span, Attrs], None]
    # name of the agent an agent span stands for, from the convention's attributes (None when
    # they name none; ``enclosing`` = the enclosing agent's attrs)
    agent_name: Callable[[Span, Attrs, Attrs | None], str | None]
    # tool definitions offered on this span: name -> JSON schema ({} when unknown)
    tools: Callable[[Attrs], dict[str, Any]]
    # step field -> the convention's keys that carry it, in the reader's order: which
    # attribute supplied a field (``Step.sources``), and whether the convention is on a span
    keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # prefixes of the keys that are the convention's own (a key another convention shares,
    # such as ``gen_ai.usage.input_tokens`` read by OpenLLMetry, says nothing of presence);
    # empty: every key in ``keys``
    own: tuple[str, ...] = ()
    # whether a span of this convention (by its marker) is a setup operation: no action of an
    # agent run (GenAI ``create_agent``). A trace made only of these is no run
    # (``trajectory.is_run``)
    setup: Callable[[Span, Attrs], bool] = field(default=lambda span, attrs: False)
    # why the span's marker value is none the convention defines (``undefined_value``), or
    # None; asked only of a span its marker made an ``other`` step. That step's kind is
    # unknown (``Step.unknown["kind"]``): it may have been a call, so no rule reads its absence
    undefined: Callable[[Span, Attrs], str | None] = field(default=lambda span, attrs: None)
    # the definition a tool span records of its own tool (name -> JSON schema): it reads that
    # tool's arguments, but says nothing of what a model was offered (a framework records a
    # span, and its definition, for a call of a tool it does not have); None: none
    described: Described | None = None
    present_keys: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        found = {k for ks in self.keys.values() for k in ks
                 if not self.own or k.startswith(self.own)}
        object.__setattr__(self, "present_keys", frozenset(found))

    def present(self, span: Span, attrs: Attrs) -> bool:
        """Whether the span carries this convention: its marker, its shapes, or one of its
        keys."""
        return (not attrs.keys().isdisjoint(self.present_keys)
                or self.explicit(span, attrs) is not None
                or self.implicit(span, attrs) is not None)

    def key_of(self, field_name: str, attrs: Attrs) -> str | None:
        """The first of the convention's keys for ``field_name`` the span carries."""
        for key in self.keys.get(field_name, ()):
            if key in attrs:
                return key
        return None


def no_kind(span: Span, attrs: Attrs) -> StepKind | None:
    return None


def no_tools(attrs: Attrs) -> dict[str, Any]:
    return {}


def undefined_value(key: str, others: frozenset[str], normal: Callable[[Any], str] = str,
                    ) -> Callable[[Span, Attrs], str | None]:
    """``Adapter.undefined`` for a convention whose marker is ``key``: ``others`` are the
    values it defines that are no step kind of ours (an embedding, a retriever), compared
    after ``normal`` (the adapter's own normalisation of the value)."""
    def undefined(span: Span, attrs: Attrs) -> str | None:
        value = attrs.get(key)
        if value is None or normal(value) in others:
            return None
        return f"{key} {str(value)[:60]!r}: a value the convention does not define"
    return undefined
