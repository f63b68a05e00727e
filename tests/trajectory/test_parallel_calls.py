"""Parallel tool calls starting in the same millisecond are in the order the model asked for
them (``trajectory.parallel_calls``), whatever order their spans arrived in."""

from __future__ import annotations

import json

from trajectory_factory import span, trace

from otel_eval.base.model import Span
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.trajectory import build_trajectory

CFG = TrajectoryConfig()


def _llm(name: str, start: int, *calls: tuple[str, str]) -> Span:
    parts = [{"type": "tool_call", "id": cid, "name": "get_weather",
              "arguments": json.dumps({"city": city})} for cid, city in calls]
    return span(name, "root", start, {
        "gen_ai.operation.name": "chat", "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": parts, "finish_reason": "tool_call"}])}, end=start + 5)


def _tool(name: str, call_id: str, city: str, start: int, end: int) -> Span:
    return span(name, "root", start, {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
        "gen_ai.tool.call.id": call_id, "gen_ai.tool.call.arguments": json.dumps({"city": city})},
        end=end)


def _cities(spans: list[Span]) -> list[str]:
    t = build_trajectory(trace(*spans), CFG)
    assert [s.index for s in t.steps] == list(range(len(t.steps)))
    return [s.arguments["city"] for s in t.steps if s.kind == "tool"]


def test_calls_of_one_reply_starting_together_keep_the_order_asked() -> None:
    """Paris ends after London (and its span id would sort after too): the reply asked for
    Paris first, and the calls started together, so Paris goes first in every arrival order,
    with the span under it."""
    spans = [span("root", None, 0, end=100), _llm("llm", 1, ("c-1", "Paris"), ("c-2", "London"),
                                                  ("c-3", "Rome")),
             _tool("zz-paris", "c-1", "Paris", 10, 30), _tool("aa-london", "c-2", "London", 10, 20),
             _tool("mm-rome", "c-3", "Rome", 10, 25), span("under-paris", "zz-paris", 11, end=12)]
    for order in (spans, spans[::-1], spans[3:] + spans[:3]):
        assert _cities(order) == ["Paris", "London", "Rome"]
        names = [s.name for s in build_trajectory(trace(*order), CFG).steps]
        assert names.index("under-paris") == names.index("zz-paris") + 1


def test_calls_starting_at_different_times_keep_their_times() -> None:
    """The start says when a call ran: London, started first, stays first."""
    spans = [span("root", None, 0, end=100), _llm("llm", 1, ("c-1", "Paris"), ("c-2", "London")),
             _tool("paris", "c-1", "Paris", 11, 30), _tool("london", "c-2", "London", 10, 20)]
    assert _cities(spans) == ["London", "Paris"]
