"""The trajectory passes as one named tuple (``trajectory.passes.PASSES``): each once, each
with a one-line precondition, in the order the builder relies on."""

from __future__ import annotations

from otel_eval.evaluate.trajectory.passes import PASSES


def test_every_pass_is_named_once_with_a_one_line_precondition() -> None:
    names = [p.name for p in PASSES]
    assert len(names) == len(set(names))
    for each in PASSES:
        assert each.precondition.strip() and "\n" not in each.precondition, each.name


def test_the_order_joins_before_it_settles_and_rebuilds_before_it_prices() -> None:
    at = {p.name: i for i, p in enumerate(PASSES)}
    assert at["order_parallel_calls"] < at["merge_nested_calls"] < at["join_calls"]
    assert at["take_off_envelopes"] < at["join_calls"] < at["settle_arguments"]
    assert at["settle_results"] < at["look_up_results"] < at["rebuild_tool_calls"]
    assert at["rebuild_tool_calls"] < at["rebuild_code_actions"] < at["settle_values"]
    assert at["settle_values"] < at["price_steps"] < at["readable"]
