"""Every recording of the conformance corpus gets the same evaluation whatever order its
spans arrive in: recorded, reversed and shuffled (a collector whose queue exports batches
concurrently delivers them in any order; JavaScript SDKs write whole milliseconds, so a tool
call and the model call reading its result often start in the same one)."""

from __future__ import annotations

import json
import random

import pytest
from conformance import corpus, hung

from otel_eval.app.config import Config
from otel_eval.base.model import Span, Trace
from otel_eval.evaluate.evaluator import Evaluator

_SHUFFLES = 3  # seeded shuffles besides the recorded and the reversed order


def _orders(spans: list[Span]) -> list[list[Span]]:
    out = [spans, spans[::-1]]
    for seed in range(_SHUFFLES):
        shuffled = list(spans)
        random.Random(seed).shuffle(shuffled)
        out.append(shuffled)
    return out


def _evaluation(spans: list[Span], logs: list[object], evaluator: Evaluator) -> str:
    ev = evaluator.evaluate(Trace("ef" * 16, spans, "complete", logs=logs))  # type: ignore[arg-type]
    assert ev is not None
    return json.dumps(ev.to_json(), sort_keys=True)


@pytest.mark.parametrize(("stack", "scenario"), corpus.recorded(),
                         ids=[f"{s}/{c}" for s, c in corpus.recorded()])
def test_the_evaluation_does_not_depend_on_the_arrival_order(stack: str, scenario: str) -> None:
    evaluator = Evaluator(Config())
    spans, logs = hung.load(stack, scenario)
    first, *others = [_evaluation(order, list(logs), evaluator) for order in _orders(spans)]
    for number, other in enumerate(others, 1):
        assert other == first, f"order {number} evaluates otherwise"
