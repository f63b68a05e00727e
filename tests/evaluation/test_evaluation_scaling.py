"""Evaluation is n log n in a trace's spans (issue 11): the work done by
``Evaluator.evaluate`` on the shapes of ``bench/evaluate_scaling.py`` (each built to hit one
step hard) grows like n, not n^2. Work = Python line events (``sys.settrace``), a step count
that does not depend on the machine's speed; time is measured by the bench, not here."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

import pytest
from support.bench_module import load_bench

from otel_eval.app.config import Config
from otel_eval.base.model import Trace
from otel_eval.base.steps import Step, ToolCall
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.trajectory.links import join_calls, merge_nested_calls

SCALING = load_bench("evaluate_scaling.py", "evaluate_scaling")
T = TypeVar("T")


def _line_events(fn: Callable[[], T]) -> tuple[int, T]:
    """(the line and call events ``fn`` ran, what it returned): work counted, not timed."""
    count = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        count += 1
        return tracer

    sys.settrace(tracer)
    try:
        out = fn()
    finally:
        sys.settrace(None)
    return count, out


def _steps(shape: str, n: int) -> int:
    spans = SCALING.SHAPES[shape](n)
    evaluator = Evaluator(Config())
    count, evaluation = _line_events(
        lambda: evaluator.evaluate(Trace(SCALING.TRACE, spans, "complete")))
    assert evaluation is not None and evaluation.verdict is not None
    return count


@pytest.mark.parametrize("shape", ["history", "flat", "stagnation", "failing", "no_progress",
                                   "deep"])
def test_work_grows_linearly_with_the_spans(shape: str) -> None:
    small, large = _steps(shape, 300), _steps(shape, 600)
    # linear: 2.0, n log n: ~2.2, quadratic: ~4 (today's code before the fix: 3.3 - 3.9)
    assert large / small < 2.6, (shape, small, large)


def _join_work(n: int) -> int:
    """Line events of ``join_calls`` over n LLM calls of one tool, each followed by a tool
    step of another tool whose call id no LLM call carries (joined by neither id nor name)."""
    steps: list[Step] = []
    for i in range(n):
        steps.append(Step(2 * i, f"l{i}", None, "llm", "chat",
                          tool_calls=[ToolCall("search", {"q": i}, f"call_{i}")]))
        steps.append(Step(2 * i + 1, f"t{i}", None, "tool", "fetch", tool_name="fetch",
                          call_id=f"run_{i}", arguments={"q": i}))
    return _line_events(lambda: join_calls(steps))[0]


def test_an_unjoined_tool_step_costs_bounded_work() -> None:
    """Step 3 of ``links.join_calls`` looks only at the calls of the step's own tool, the last
    ``_SAME_ARGS_WINDOW`` of them: a trace of unjoined steps is linear, not quadratic."""
    small, large = _join_work(500), _join_work(1000)
    assert large / small < 2.6, (small, large)


def _mcp_work(n: int) -> int:
    """Line events of ``merge_nested_calls`` over n framework tool steps and n MCP
    ``tools/call`` steps of the same tool under one parent, no two of the same call."""
    steps = [Step(i, f"f{i}", "agent", "tool", "x", tool_name="x", call_id=f"f_{i}",
                  start_ns=2 * i, end_ns=2 * i + 1) for i in range(n)]
    for i in range(n):
        mcp = Step(n + i, f"m{i}", "agent", "tool", "x", tool_name="x", call_id=f"m_{i}",
                   start_ns=2 * i + 1, end_ns=2 * i + 2)
        mcp.sources["mcp_method"] = "mcp mcp.method.name tools/call"
        steps.append(mcp)
    return _line_events(lambda: merge_nested_calls(steps))[0]


def test_mcp_sibling_steps_cost_bounded_work() -> None:
    """Each MCP step was tried against every framework step of its tool under its parent:
    5,000 of each took seconds. By id, then the few still running when it starts."""
    small, large = _mcp_work(500), _mcp_work(1000)
    assert large / small < 2.6, (small, large)
