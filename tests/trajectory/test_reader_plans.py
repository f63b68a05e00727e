"""Reader plans cached per span shape (issue 34) read exactly what reading every span anew
reads: the same kind and marker, the same conventions in the same order, the same
``Step.sources``, on every span of the conformance corpus and on random attributes."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from test_trajectory_conventions import _KEYS, _random_value
from trajectory_factory import span

from otel_eval.base.model import Span, SpanEvent
from otel_eval.decode.otlp import decode_request
from otel_eval.decode.otlp_json import request_from_dict
from otel_eval.evaluate.conventions import ADAPTERS, classify
from otel_eval.evaluate.conventions import fields as fields_module
from otel_eval.evaluate.conventions.fields import FIELDS, _source, plan, readers

RECORDINGS = Path(__file__).resolve().parents[1] / "conformance" / "recordings"


def _corpus_spans() -> list[Span]:
    spans = []
    for path in sorted(RECORDINGS.glob("*/*.json")):
        for item in json.loads(path.read_text("utf-8"))["requests"]:
            if item["signal"] == "traces":
                spans += decode_request(request_from_dict(item["body"])).spans
    return spans


def _random_spans(seed: int) -> list[Span]:
    rng = random.Random(seed)
    out = []
    for i in range(200):
        attrs = {rng.choice(_KEYS): _random_value(rng) for _ in range(rng.randrange(8))}
        events = [SpanEvent(rng.choice(["exception", "gen_ai.content.prompt", "x"]), i,
                            {})] if rng.random() < 0.3 else []
        out.append(span(f"s{i}", None, i, attrs, events=events))
    return out


def _assert_plans_as_uncached(spans: list[Span]) -> None:
    fields_module._plans.clear()
    for _ in range(2):  # the second time from the cache
        for s in spans:
            attrs: Any = s.attributes
            kind, marker = classify(s, attrs)
            got_kind, got = plan(s, attrs, ADAPTERS, classify)
            assert (got_kind, got.marker) == (kind, marker), s.name
            want = readers(marker, s, attrs, ADAPTERS)
            assert list(got.found) == want, s.name
            assert got.sources == [{f: _source(a, f, attrs) for f in FIELDS} for a in want]


def test_plans_on_the_conformance_corpus_read_as_without_cache() -> None:
    spans = _corpus_spans()
    assert len(spans) > 500  # every recording, not an empty glob
    _assert_plans_as_uncached(spans)


@pytest.mark.parametrize("seed", range(5))
def test_plans_on_random_attributes_read_as_without_cache(seed: int) -> None:
    _assert_plans_as_uncached(_random_spans(seed))


def test_a_null_marker_value_is_another_shape_than_a_real_one() -> None:
    fields_module._plans.clear()
    found = []
    for value in ("chat", None, "chat"):  # the marker is OpenInference's each time
        s = span("s", attrs={"gen_ai.operation.name": value, "openinference.span.kind": "LLM"})
        found.append([a.name for a in plan(s, s.attributes, ADAPTERS, classify)[1].found])
    assert found == [["genai", "openinference"], ["openinference"],
                     ["genai", "openinference"]]


def test_the_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fields_module, "_PLAN_CACHE", 10)
    fields_module._plans.clear()
    for i in range(25):
        s = span("s", attrs={"gen_ai.operation.name": "chat", f"k{i}": 1})
        plan(s, s.attributes, ADAPTERS, classify)
    assert 0 < len(fields_module._plans) <= 10


def test_the_cache_holds_a_bounded_size_of_attribute_keys() -> None:
    """A shape is its attribute keys, span content of any length: the plans cached hold at
    most ``_PLAN_CACHE_CHARS`` of them, however long the keys of each shape (4,096 shapes of
    1 MiB of keys each were 4 GiB held after their traces were gone)."""
    fields_module._plans.clear()
    for i in range(48):  # 24 MiB of keys in all, each span a shape of its own
        s = span("s", attrs={"gen_ai.operation.name": "chat", f"k{i}" + "x" * (1 << 19): 1})
        plan(s, s.attributes, ADAPTERS, classify)
    held = sum(len(k) for shape in fields_module._plans for k in shape[1])
    assert held <= 16 << 20
    fields_module._plans.clear()


_MARKER_VALUES = [("gen_ai.operation.name", "chat"), ("openinference.span.kind", "LLM"),
                  ("traceloop.span.kind", "task"), ("llm.request.type", "chat"),
                  ("ai.operationId", "ai.generateText")]
_BASES: list[dict[str, Any]] = [{}, {"openinference.span.kind": "TOOL"},
                                {"traceloop.span.kind": "workflow"}, {"gen_ai.tool.name": "t"}]


@pytest.mark.parametrize(("key", "value"), _MARKER_VALUES)
def test_each_marker_value_decides_its_shape(key: str, value: Any) -> None:
    """The same keys with a marker's value null (or, for the Vercel AI SDK, not a string)
    and set: each a shape of its own, whatever else the span carries."""
    other = 5 if key == "ai.operationId" else None
    spans = [span("s", attrs={**base, key: v}) for base in _BASES
             for v in (other, value, other)]
    _assert_plans_as_uncached(spans)


def test_the_older_genai_content_events_decide_the_shape() -> None:
    prompt = [SpanEvent("gen_ai.content.prompt", 0, {"gen_ai.prompt": "hi"})]
    spans = [span("s", attrs={**base, "llm.model_name": "m"}, events=events)
             for base in ({}, {"openinference.span.kind": "LLM"})
             for events in ([], prompt, [SpanEvent("x", 0, {})], prompt)]
    _assert_plans_as_uncached(spans)
