"""A run's ``usage.cost_usd`` is a number or ``null`` (unknown), never a string. Each step's
recorded cost is read only when finite, but their sum could still overflow a float (two LLM
spans recording ``gen_ai.usage.cost`` 1e308): the run's cost was then infinity, written in
every per-trace JSON as the string ``"Infinity"`` (the field changed type under consumers
of the results API and the Kafka topic), and observed in ``otel_eval_trace_cost_usd``,
whose ``_sum`` stayed ``+Inf`` for that service and agent until a restart (every cost panel
of theirs NaN). A sum that is no number is no cost: unknown, as a turn's is to a session."""

from __future__ import annotations

import json

from prometheus_client import CollectorRegistry, generate_latest

from otel_eval.app.config import Config
from otel_eval.base.model import Span, Trace
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.telemetry.metrics import Metrics

TID = "ab" * 16


def _trace(costs: list[float]) -> Trace:
    root = Span(TID, "1" * 16, None, "invoke_agent", 1, 100,
                attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"})
    calls = [Span(TID, f"{i + 2:016x}", "1" * 16, "chat m", 10 + i, 11 + i,
                  attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                              "gen_ai.usage.cost": cost})
             for i, cost in enumerate(costs)]
    return Trace(TID, [root, *calls], "complete")


def test_costs_that_sum_past_a_float_are_an_unknown_cost_not_infinity() -> None:
    evaluation = Evaluator(Config()).evaluate(_trace([1e308, 1e308]))
    assert evaluation is not None
    body = json.loads(evaluation.to_json_text())
    assert body["usage"]["cost_usd"] is None
    # each step's cost is past MAX_STEP_COST_USD: unknown too
    assert [s.get("cost_usd") for s in body["steps"] if s["kind"] == "llm"] == [None, None]
    metrics = Metrics(CollectorRegistry())
    metrics.evaluation_stored(evaluation, 0.1, False)
    text = generate_latest(metrics.registry).decode()
    assert "+Inf" not in "".join(line for line in text.splitlines()
                                 if line.startswith("otel_eval_trace_cost_usd_sum"))


def test_a_cost_that_sums_to_a_number_is_kept() -> None:
    evaluation = Evaluator(Config()).evaluate(_trace([0.25, 1e8]))
    assert evaluation is not None
    assert evaluation.to_json()["usage"]["cost_usd"] == 1e8 + 0.25


def test_a_step_cost_past_any_plausible_one_is_unknown_never_observed() -> None:
    """Each run's cost was finite (one LLM span recording ``gen_ai.usage.cost`` 1e308), so
    each was observed in ``otel_eval_trace_cost_usd``: two such runs made its ``_sum``
    ``+Inf`` for that service and agent until a restart. A step's cost past
    ``MAX_STEP_COST_USD`` (1e9 USD, far above any real call) is unknown, recorded or priced
    from its tokens: the step's and the run's cost null, the reason in the step's
    ``unknown`` (``otel-eval inspect``), never observed."""
    metrics = Metrics(CollectorRegistry())
    for _ in range(2):
        evaluation = Evaluator(Config()).evaluate(_trace([1e308]))
        assert evaluation is not None
        body = json.loads(evaluation.to_json_text())
        assert body["usage"]["cost_usd"] is None
        (llm,) = [s for s in body["steps"] if s["kind"] == "llm"]
        assert llm.get("cost_usd") is None
        (step,) = [s for s in evaluation.trajectory.steps if s.kind == "llm"]
        assert "past any plausible cost" in step.unknown["cost_usd"]  # what inspect says
        metrics.evaluation_stored(evaluation, 0.1, False)
    text = generate_latest(metrics.registry).decode()
    sums = [line for line in text.splitlines() if line.startswith("otel_eval_trace_cost_usd_")]
    assert not any("+Inf" in line.split()[-1] for line in sums), sums
    assert not [line for line in sums if "_count" in line and not line.endswith(" 0.0")]


def test_a_priced_cost_past_any_plausible_one_is_unknown() -> None:
    root = Span(TID, "1" * 16, None, "invoke_agent", 1, 100,
                attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"})
    call = Span(TID, "2" * 16, "1" * 16, "chat gpt-4o", 10, 11,
                attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                            "gen_ai.usage.input_tokens": 10,
                            "gen_ai.usage.output_tokens": 2**53})
    evaluation = Evaluator(Config()).evaluate(Trace(TID, [root, call], "complete"))
    assert evaluation is not None
    body = evaluation.to_json()
    assert body["usage"]["cost_usd"] is None
    (llm,) = [s for s in body["steps"] if s["kind"] == "llm"]
    assert llm.get("cost_usd") is None
    (step,) = [s for s in evaluation.trajectory.steps if s.kind == "llm"]
    assert "price at 9.0072e+10 USD" in step.unknown["cost_usd"]
