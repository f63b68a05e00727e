"""Convention cascade: one hand-written span per convention shape -> expected step fields."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest
from trajectory_factory import span, trace

from otel_eval.base.model import SpanEvent
from otel_eval.base.steps import Step
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.conventions import classify, dominant, merge_tools, read_span
from otel_eval.evaluate.detectors import Detectors
from otel_eval.evaluate.detectors.config import DetectorsConfig
from otel_eval.evaluate.trajectory import build_trajectory
from otel_eval.evaluate.trajectory.arguments import take_off_envelopes

OUT_TOOL_CALL = json.dumps([{"role": "assistant", "finish_reason": "tool_call", "parts": [
    {"type": "text", "content": "checking"},
    {"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": "Paris"}}]}])

CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("genai chat", {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
        "gen_ai.response.model": "gpt-4o-2024-08-06", "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 5, "gen_ai.input.messages": '[{"role":"user"}]',
        "gen_ai.output.messages": OUT_TOOL_CALL,
    }, {"kind": "llm", "convention": "genai", "model": "gpt-4o-2024-08-06", "input_tokens": 10,
        "output_tokens": 5, "finish_reasons": ["tool_call"], "input_text": '[{"role":"user"}]',
        "tool_calls": [("get_weather", {"city": "Paris"}, "c1")]}),
    ("genai chat finish_reasons attribute wins", {
        "gen_ai.operation.name": "text_completion", "gen_ai.response.finish_reasons": ["length"],
        "gen_ai.output.messages": OUT_TOOL_CALL,
    }, {"kind": "llm", "finish_reasons": ["length"]}),
    ("genai execute_tool", {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
        "gen_ai.tool.call.arguments": '{"city": "Paris"}', "gen_ai.tool.call.result": "sunny",
    }, {"kind": "tool", "convention": "genai", "tool_name": "get_weather",
        "arguments": {"city": "Paris"}, "result": "sunny"}),
    ("genai execute_tool, bad JSON arguments stay raw", {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t",
        "gen_ai.tool.call.arguments": '{"city": "Par',
    }, {"kind": "tool", "arguments": '{"city": "Par'}),
    ("genai invoke_agent", {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner",
        "gen_ai.input.messages": "task", "gen_ai.output.messages": "done",
    }, {"kind": "agent", "convention": "genai", "input_text": "task", "result": "done"}),
    ("genai embeddings", {"gen_ai.operation.name": "embeddings"},
     {"kind": "other", "convention": "genai"}),
    ("genai create_agent", {"gen_ai.operation.name": "create_agent"},
     {"kind": "other", "convention": "genai"}),
    ("genai unknown operation", {"gen_ai.operation.name": "dance"},
     {"kind": "other", "convention": "genai"}),
    ("genai legacy attributes", {
        "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4", "gen_ai.prompt": "hi",
        "gen_ai.completion": "hello", "gen_ai.usage.prompt_tokens": "7",
        "gen_ai.usage.completion_tokens": 3,
    }, {"kind": "llm", "convention": "genai_legacy", "model": "gpt-4", "input_text": "hi",
        "output_text": "hello", "input_tokens": 7, "output_tokens": 3}),
    ("genai legacy tool", {"gen_ai.tool.name": "search"},
     {"kind": "tool", "convention": "genai_legacy", "tool_name": "search"}),
    ("genai legacy usage cost", {"gen_ai.system": "anthropic", "gen_ai.usage.cost": "0.25"},
     {"kind": "llm", "cost_usd": 0.25}),
    ("openinference llm", {
        "openinference.span.kind": "LLM", "llm.model_name": "o3-mini",
        "llm.token_count.prompt": "3400", "llm.token_count.completion": "3760",
        "input.value": "in", "output.value": "out", "llm.cost.total": 0.01,
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.tool_calls.1.tool_call.function.name": "b",
        "llm.output_messages.0.message.tool_calls.1.tool_call.function.arguments": "{}",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "a",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"x": 1}',
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call_a",
    }, {"kind": "llm", "convention": "openinference", "model": "o3-mini", "input_tokens": 3400,
        "output_tokens": 3760, "input_text": "in", "output_text": "out", "cost_usd": 0.01,
        "tool_calls": [("a", {"x": 1}, "call_a"), ("b", {}, None)]}),
    ("openinference smolagents tool, positional args named from tool.parameters", {
        "openinference.span.kind": "TOOL", "tool.name": "final_answer",
        "tool.parameters": '{"answer": {"type": "any"}}', "output.value": "42",
        "input.value": '{"args": ["33149"], "sanitize_inputs_outputs": false, "kwargs": {}}',
    }, {"kind": "tool", "tool_name": "final_answer", "arguments": {"answer": "33149"},
        "result": "42"}),
    ("openinference tool kwargs", {
        "openinference.span.kind": "TOOL", "tool.name": "web_search",
        "input.value": '{"args": [], "kwargs": {"query": "q"}}',
    }, {"kind": "tool", "arguments": {"query": "q"}}),
    ("openinference agent", {"openinference.span.kind": "AGENT", "input.value": "task",
                             "output.value": "answer", "llm.token_count.prompt": 5},
     {"kind": "agent", "input_text": "task", "result": "answer", "input_tokens": 5}),
    ("openinference chain", {"openinference.span.kind": "CHAIN"},
     {"kind": "chain", "convention": "openinference"}),
    ("openinference retriever", {"openinference.span.kind": "RETRIEVER"},
     {"kind": "other", "convention": "openinference"}),
    ("openinference lowercase kind", {"openinference.span.kind": "llm"}, {"kind": "llm"}),
    ("openinference implicit llm", {"llm.model_name": "m", "llm.input_messages.0.message.role":
                                    "user"}, {"kind": "llm", "convention": "openinference"}),
    ("openinference implicit tool", {"tool.name": "calc", "input.value": '{"a": 1}'},
     {"kind": "tool", "convention": "openinference", "arguments": {"a": 1}}),
    ("openllmetry workflow", {"traceloop.span.kind": "workflow", "traceloop.entity.name": "w",
                              "traceloop.entity.input": "in", "traceloop.entity.output": "o"},
     {"kind": "chain", "convention": "openllmetry", "input_text": "in", "result": "o"}),
    ("openllmetry task", {"traceloop.span.kind": "task"}, {"kind": "chain"}),
    ("openllmetry agent", {"traceloop.span.kind": "agent", "traceloop.entity.name": "a"},
     {"kind": "agent", "convention": "openllmetry"}),
    ("openllmetry tool", {
        "traceloop.span.kind": "tool", "traceloop.entity.name": "lookup",
        "traceloop.entity.input": '{"args": [], "kwargs": {"id": 3}}',
        "traceloop.entity.output": '"found"',
    }, {"kind": "tool", "convention": "openllmetry", "tool_name": "lookup",
        "arguments": {"id": 3}, "result": "found"}),  # the SDK's JSON of a str result
    # a string result recorded as JSON is read as its text: GenAI's attribute (JSON where it
    # cannot be structured), OpenInference's value whose mime type says JSON (DSPy)
    ("genai tool result as JSON", {"gen_ai.operation.name": "execute_tool",
                                   "gen_ai.tool.name": "t", "gen_ai.tool.call.result": '"found"'},
     {"kind": "tool", "result": "found"}),
    ("openinference tool result as JSON", {
        "openinference.span.kind": "TOOL", "tool.name": "t", "output.value": '"found"',
        "output.mime_type": "application/json"}, {"kind": "tool", "result": "found"}),
    ("openinference tool result as text", {
        "openinference.span.kind": "TOOL", "tool.name": "t", "output.value": '"found"',
        "output.mime_type": "text/plain"}, {"kind": "tool", "result": '"found"'}),
    ("openllmetry langchain tool inputs", {
        "traceloop.span.kind": "tool",
        "traceloop.entity.input": '{"inputs": {"q": "x"}, "tags": [], "metadata": {}}',
    }, {"kind": "tool", "arguments": {"q": "x"}}),
    ("openllmetry llm", {
        "llm.request.type": "chat", "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o",
        "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "weather?",
        "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.finish_reason": "tool_calls",
        "gen_ai.completion.0.tool_calls.0.name": "get_weather",
        "gen_ai.completion.0.tool_calls.0.arguments": '{"city": "Oslo"}',
        "gen_ai.completion.0.tool_calls.0.id": "t0",
        "gen_ai.usage.prompt_tokens": 12, "gen_ai.usage.completion_tokens": 4,
    }, {"kind": "llm", "convention": "openllmetry", "model": "gpt-4o", "input_tokens": 12,
        "output_tokens": 4, "finish_reasons": ["tool_calls"],
        "input_text": '[{"role": "user", "content": "weather?"}]',
        "tool_calls": [("get_weather", {"city": "Oslo"}, "t0")]}),
    # LiteLLM's callback: GenAI messages whose reply has no parts, the call only in the
    # older indexed attributes, as a completion with no role and no content
    ("a completion that is its function call alone", {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
        "llm.request.type": "completion",
        "gen_ai.output.messages": '[{"role": "assistant", "parts": [], '
                                  '"finish_reason": "tool_calls"}]',
        "gen_ai.completion.0.function_call.name": "get_weather",
        "gen_ai.completion.0.function_call.arguments": '{"city": "Oslo"}',
    }, {"kind": "llm", "tool_calls": [("get_weather", {"city": "Oslo"}, None)]}),
    ("openllmetry embedding request", {"llm.request.type": "embedding"},
     {"kind": "other", "convention": "openllmetry"}),
    ("openllmetry indexed prompt without request type", {"gen_ai.prompt.0.content": "x"},
     {"kind": "llm", "convention": "openllmetry"}),
    ("explicit marker beats another convention's", {
        "openinference.span.kind": "TOOL", "gen_ai.operation.name": "chat", "tool.name": "t",
    }, {"kind": "tool", "convention": "openinference"}),
    ("unknown", {"http.method": "GET", "db.system": "sqlite"},
     {"kind": "other", "convention": "unknown", "model": None, "tool_name": None}),
    ("no attributes", {}, {"kind": "other", "convention": "unknown"}),
]


def _described(attrs: dict[str, Any], **kw: Any) -> Step:
    """The step of one span, read and with its envelopes off (as the trajectory does)."""
    s = span("s", attrs=attrs, **kw)
    step = Step(0, s.span_id, None, "other", s.name)
    _, shape = read_span(step, s, s.attributes)
    tools: dict[str, Any] = {}
    for reader in (*shape.offers, *shape.described):
        merge_tools(tools, reader(s.attributes))
    take_off_envelopes([step], tools)
    return step


@pytest.mark.parametrize(("attrs", "expected"), [(a, e) for _, a, e in CASES],
                         ids=[c[0] for c in CASES])
def test_convention_cases(attrs: dict[str, Any], expected: dict[str, Any]) -> None:
    step = _described(attrs)
    for field, want in expected.items():
        got = getattr(step, field)
        if field == "tool_calls":
            got = [(c.name, c.arguments, c.call_id) for c in got]
        assert got == want, field


def test_legacy_prompt_and_completion_as_span_events() -> None:
    events = [SpanEvent("gen_ai.content.prompt", 1, {"gen_ai.prompt": "hi"}),
              SpanEvent("gen_ai.content.completion", 2, {"gen_ai.completion": "hello"})]
    step = _described({}, events=events)
    assert (step.kind, step.convention) == ("llm", "genai_legacy")
    assert (step.input_text, step.output_text) == ("hi", "hello")


_GROUP = "unhandled errors in a TaskGroup (2 sub-exceptions)"
_GROUP_TRACE = f"""  + Exception Group Traceback (most recent call last):
  |   File "agent.py", line 60, in weather_agent
  |     async with ClientSession(read, write) as session:
  | ExceptionGroup: {_GROUP}
  +-+---------------- 1 ----------------
    | Traceback (most recent call last):
    |   File "agent.py", line 53, in loop
    |     turns: int = raise_it()
    | TurnLimitError: Reached max turns (3)
    +---------------- 2 ----------------
    | KeyError: 'city'
    +------------------------------------
"""


_CAUSED_TRACE = """Traceback (most recent call last):
  File "openai.py", line 1, in create
    x: int = send()
BadRequestError: Error code: 400

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "litellm.py", line 2, in completion
ContextWindowExceededError: context length exceeded

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "beeai.py", line 3, in run
ChatModelError: Chat Model error
"""


@pytest.mark.parametrize(("status", "message", "attrs", "events", "error"), [
    ("error", "boom", {}, [], "boom"),
    ("error", "", {}, [], "error"),
    ("unset", "", {"error.type": "timeout"}, [], "timeout"),
    ("unset", "", {}, [SpanEvent("exception", 1, {"exception.type": "ValueError",
                                                   "exception.message": "bad"})],
     "ValueError: bad"),
    ("error", "", {}, [SpanEvent("exception", 1, {"exception.message": "bad"})], "bad"),
    # an anyio TaskGroup (an MCP client session) raising what a loop inside it raised:
    # Python's traceback of the group names it; a frame's code line is no exception
    ("error", _GROUP, {}, [SpanEvent("exception", 1, {
        "exception.type": "ExceptionGroup", "exception.message": _GROUP,
        "exception.stacktrace": _GROUP_TRACE})],
     f"{_GROUP} [TurnLimitError: Reached max turns (3); KeyError: 'city']"),
    ("unset", "", {}, [SpanEvent("exception", 1, {
        "exception.type": "builtins.ExceptionGroup", "exception.message": _GROUP,
        "exception.stacktrace": "  |     x: int = 3\n"})], f"builtins.ExceptionGroup: {_GROUP}"),
    # BeeAI's ChatModelError, raised from the API's error (beeai/llm_error): the cause's line,
    # not the context's (During handling...), nor a frame's code line
    ("error", "", {}, [SpanEvent("exception", 1, {
        "exception.type": "ChatModelError", "exception.message": "Chat Model error",
        "exception.stacktrace": _CAUSED_TRACE})],
     "ChatModelError: Chat Model error [ContextWindowExceededError: context length exceeded]"),
    # the status's own message says what happened: kept as it is
    ("error", "Chat Model error", {}, [SpanEvent("exception", 1, {
        "exception.type": "ChatModelError", "exception.stacktrace": _CAUSED_TRACE})],
     "Chat Model error"),
])
def test_errors_from_status_error_type_and_exception_events(
        status: str, message: str, attrs: dict[str, Any], events: list[SpanEvent],
        error: str) -> None:
    step = _described(attrs, status=status, message=message, events=events)
    assert (step.status, step.error) == ("error", error)


def test_a_span_ended_ok_reports_no_error_whatever_it_recorded() -> None:
    # OK is set on purpose: the exception was handled (AutoGen's agent span records the
    # CancelledError of its closed message stream, then ends OK)
    cancelled = [SpanEvent("exception", 1, {"exception.type": "asyncio.CancelledError",
                                            "exception.escaped": "False"})]
    for attrs, events in (({}, cancelled), ({"error.type": "timeout"}, [])):
        step = _described(attrs, status="ok", events=events)
        assert (step.status, step.error) == ("ok", None)


def test_tool_definitions_from_each_convention() -> None:
    t = build_trajectory(trace(
        span("root", attrs={"gen_ai.operation.name": "chat", "gen_ai.tool.definitions": json.dumps(
            [{"type": "function", "name": "a", "parameters": {"type": "object"}}])}),
        span("oi", "root", 1, {"openinference.span.kind": "LLM", "llm.tools.0.tool.json_schema":
                               json.dumps({"type": "function", "function": {
                                   "name": "b", "parameters": {"type": "object"}}})}),
        span("ol", "root", 2, {"llm.request.type": "chat", "llm.request.functions.0.name": "c",
                               "llm.request.functions.0.parameters": '{"type": "object"}'}),
        span("sa", "root", 3, {"openinference.span.kind": "AGENT",
                               "smolagents.tools_names": '["d", "e"]'}),
        span("tl", "sa", 4, {"openinference.span.kind": "TOOL", "tool.name": "e",
                             "tool.parameters": '{"q": {"type": "string"}}'}),
    ), TrajectoryConfig())
    assert t.tools == {"a": {"type": "object"}, "b": {"type": "object"},
                       "c": {"type": "object"}, "d": {},
                       "e": {"type": "object", "properties": {"q": {"type": "string"}}}}


@pytest.mark.parametrize(("conventions", "expected"), [
    ([], "unknown"), (["unknown", "unknown"], "unknown"),
    (["openinference", "unknown", "unknown"], "openinference"),
    (["genai", "genai", "genai_legacy"], "genai"),
    (["genai", "openinference"], "mixed"),
])
def test_dominant_convention(conventions: list[str], expected: str) -> None:
    assert dominant(conventions) == expected


@pytest.mark.parametrize("position", ["\u00b2", "9" * 5000, "-1", " 1", "\u0663"],
                         ids=["superscript", "5000 digits", "negative", "space", "arabic-indic"])
def test_a_position_that_is_no_ascii_number_is_no_message_and_the_others_stay(
        position: str) -> None:
    out, inp = "llm.output_messages.", "llm.input_messages."
    step = _described({
        "openinference.span.kind": "LLM",
        f"{out}0.message.tool_calls.0.tool_call.function.name": "kept",
        f"{out}{position}.message.tool_calls.0.tool_call.function.name": "odd message",
        f"{out}0.message.tool_calls.{position}.tool_call.function.name": "odd call",
        f"{inp}0.message.role": "user", f"{inp}0.message.content": "hello",
        f"{inp}{position}.message.role": "user", f"{inp}{position}.message.content": "odd",
        f"{inp}1.message.role": "assistant",
        f"{inp}1.message.tool_calls.{position}.tool_call.function.name": "second",
        f"{inp}1.message.tool_calls.0.tool_call.function.name": "first",
    })
    # the output's calls at odd positions are no calls; the input's odd message is left out,
    # and a call of the history at an odd position is kept (ordered as position 0)
    assert [c.name for c in step.tool_calls] == ["kept"]
    history = json.loads(step.input_text or "[]")
    assert [m.get("content") for m in history] == ["hello", None]
    assert sorted(c["function"]["name"] for c in history[1]["tool_calls"]) == ["first", "second"]


_KEYS = [c for _, attrs, _ in CASES for c in attrs] + [
    "gen_ai.tool.definitions", "smolagents.tools_names", "smolagents.managed_agents.0.name",
    "llm.tools.0.tool.json_schema", "llm.request.functions.0.name", "error.type",
    "gen_ai.agent.name", "agent.name", "tool.json_schema", "otel_eval.task.id",
    "llm.output_messages.x.message.tool_calls.y.tool_call.function.name"]
_KIND_VALUES = ["LLM", "TOOL", "AGENT", "chat", "execute_tool", "invoke_agent", "workflow", "tool"]


def _random_value(rng: random.Random) -> Any:
    choice = rng.randrange(12)
    if choice == 0:
        return rng.choice(_KIND_VALUES)
    if choice == 1:
        return "".join(rng.choice('{}[]":,\\ax0') for _ in range(rng.randrange(20)))
    if choice == 2:
        return rng.choice([math.nan, math.inf, -1e300, 1e19, -0.0])
    if choice == 3:
        return rng.randrange(-(2**63), 2**63)
    if choice == 4:
        return [rng.choice([None, 1, "x", {"a": []}, True]) for _ in range(rng.randrange(4))]
    if choice == 5:
        return {"type": "tool_call", "name": rng.choice([None, 3, "n"]), "function": [1]}
    if choice == 6:
        return json.dumps([{"parts": [{"type": "tool_call", "name": {"x": 1}}],
                            "finish_reason": 5, "tool_calls": [{"function": "no"}, 7]}])
    if choice == 7:
        return rng.choice([None, True, False, "", b"\xff\xfe"])
    if choice == 8:
        return "\ud800 invalid surrogate" + "x" * rng.randrange(3)
    if choice == 9:
        return "[" * 5000  # deep nesting if anyone parses it
    if choice == 10:
        return '{"args": "notalist", "kwargs": [1], "inputs": 3}'
    return rng.random()


@pytest.mark.parametrize("seed", range(40))
def test_random_attributes_never_raise_and_keep_every_span(seed: int) -> None:
    rng = random.Random(seed)
    spans = []
    for i in range(12):
        attrs = {rng.choice(_KEYS): _random_value(rng) for _ in range(rng.randrange(8))}
        events = [SpanEvent(rng.choice(["exception", "gen_ai.content.prompt", "x"]), i,
                            {rng.choice(_KEYS): _random_value(rng)})] if rng.random() < 0.3 else []
        parent = f"s{rng.randrange(i)}" if i and rng.random() < 0.8 else None
        spans.append(span(f"s{i}", parent, rng.randrange(100), attrs, events=events,
                          status=rng.choice(["unset", "ok", "error"])))
    t = build_trajectory(trace(*spans), TrajectoryConfig())
    assert sorted(s.span_id for s in t.steps if not s.rebuilt) == sorted(s.span_id for s in spans)
    for s in spans:
        assert classify(s, s.attributes)[0] in ("agent", "llm", "tool", "chain", "other")
    json.dumps([s.to_json() for s in t.steps], default=str)


@pytest.mark.parametrize("recorded", [5, True, 1.5])
def test_a_vercel_ai_prompt_whose_messages_are_no_list_has_no_task(recorded: object) -> None:
    """``ai.prompt`` ``{"messages": 5}`` raised TypeError (``reversed(5)``): the run's agent
    span became a plain step and the trace an ``evaluation_error``; the messages are not
    understood, so the task is unknown."""
    prompt = json.dumps({"messages": recorded})
    t = build_trajectory(trace(span("run", attrs={  # type: ignore[arg-type]
        "ai.operationId": "ai.generateText", "ai.telemetry.functionId": "a",
        "ai.prompt": prompt})), TrajectoryConfig())
    assert t.errors == []
    assert (t.steps[0].kind, t.steps[0].input_text, t.agent) == ("agent", None, "a")


def test_strands_names_its_agent_s_tools_an_offer_of_unknown_schemas() -> None:
    """Strands' invoke_agent span has gen_ai.agent.tools (names, no definitions): what the
    agent was offered, so a call of another tool is a selection error (the conformance
    corpus' strands/wrong_tool); gen_ai.tool.definitions, where recorded, are the offer."""
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather_agent",
             "gen_ai.agent.tools": '["get_weather", " "]'}
    t = build_trajectory(trace(span("root", attrs=agent)), TrajectoryConfig())
    assert (t.tools, t.offered_to) == ({"get_weather": {}},
                                       {("weather_agent", None): {"get_weather": {}}})
    defs = json.dumps([{"type": "function", "name": "get_weather",
                        "parameters": {"type": "object"}}])
    t = build_trajectory(trace(span("root", attrs={**agent, "gen_ai.tool.definitions": defs})),
                         TrajectoryConfig())
    assert t.tools == {"get_weather": {"type": "object"}}


def _tool_span(name: str, start: int, **attrs: Any) -> Any:
    return span(f"agent.{name}", "root", start, {
        "openinference.span.kind": "TOOL", "tool.name": name,
        "input.value": '{"city": "Paris"}', **attrs}, span_id=f"{start:016x}")


def test_a_tool_span_describing_its_own_tool_is_no_offer_of_it() -> None:
    """AutoGen records a TOOL span, with ``tool.name`` and ``tool.parameters`` (the call's
    arguments), for the call of a tool it does not have: that description reads the tool's
    arguments, but says nothing of what the model was offered (autogen/wrong_tool)."""
    offer = {"openinference.span.kind": "LLM",
             "llm.tools.0.tool.json_schema": json.dumps(
                 {"type": "function", "function": {"name": "get_weather", "parameters": {
                     "type": "object", "properties": {"city": {"type": "string"}}}}})}
    described = _tool_span("get_forecast", 2, **{"tool.parameters": '{"city": "Paris"}'})
    t = build_trajectory(trace(span("root", attrs={"openinference.span.kind": "AGENT"}),
                               span("llm", "root", 1, offer), described,
                               _tool_span("get_weather", 3)), TrajectoryConfig())
    assert (sorted(t.tools), t.unoffered) == (["get_forecast", "get_weather"], {"get_forecast"})
    findings = Detectors(DetectorsConfig()).evaluate(t, None)[0]
    assert [(f.kind, f.attributes["tool"]) for f in findings if f.detector == "tool_call"] == [
        ("selection", "get_forecast")]
    # with no offer recorded, the descriptions are all there is: no call is known unoffered
    t = build_trajectory(trace(span("root", attrs={"openinference.span.kind": "AGENT"}),
                               described), TrajectoryConfig())
    assert (t.unoffered, t.offered_to) == ({"get_forecast"}, {})
    assert not Detectors(DetectorsConfig()).evaluate(t, None)[0]


# Every gen_ai.operation.name value the GenAI conventions define (semantic-conventions v1.41's
# registry, then semantic-conventions-genai's model/gen-ai/registry.yaml: plan, the memory
# operations, apply_guardrail (docs/gen-ai/gen-ai-guardrails.md) and fetch_response): none is
# "a value the convention does not define" (a step of unknown kind, counted unparsed, that
# blocks the rules concluding from a step's absence).
SPEC_OPERATIONS = ("chat", "generate_content", "text_completion", "embeddings", "retrieval",
                   "create_agent", "invoke_agent", "execute_tool", "invoke_workflow", "plan",
                   "search_memory", "create_memory", "update_memory", "upsert_memory",
                   "delete_memory", "create_memory_store", "delete_memory_store",
                   "apply_guardrail", "fetch_response")


@pytest.mark.parametrize("operation", SPEC_OPERATIONS)
def test_every_operation_the_genai_conventions_define_is_a_known_kind(operation: str) -> None:
    inp = [{"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}]
    out = [{"role": "assistant", "finish_reason": "stop",
            "parts": [{"type": "text", "content": "Rainy, 57°F."}]}]
    t = build_trajectory(trace(
        span("invoke_agent a", None, 0, {"gen_ai.operation.name": "invoke_agent",
                                         "gen_ai.agent.name": "a"}, end=100),
        span(f"{operation} a", "invoke_agent a", 1, {"gen_ai.operation.name": operation,
                                                     "gen_ai.agent.name": "a"}),
        span("chat gpt-4", "invoke_agent a", 20, {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4",
            "gen_ai.input.messages": json.dumps(inp),
            "gen_ai.output.messages": json.dumps(out)})), TrajectoryConfig())
    step = t.steps[1]
    assert not step.kind_unknown and "kind" not in step.unknown, step.unknown
    assert "unparsed" not in t.unrecorded


def test_an_output_guardrail_after_the_last_reply_hides_no_finding() -> None:
    """A guardrail applied to the agent's reply (``apply_guardrail``, a span the conventions
    define) after its last LLM call, which stopped with an empty text: the run said nothing
    (``no_output``). The guardrail was read as a value the convention does not define (a step
    of unknown kind, which may have been the answer), so no finding and an unknown output."""
    out = [{"role": "assistant", "parts": [{"type": "text", "content": ""}]}]
    t = build_trajectory(trace(
        span("invoke_agent a", None, 0, {"gen_ai.operation.name": "invoke_agent",
                                         "gen_ai.agent.name": "a"}, end=100),
        span("chat gpt-4", "invoke_agent a", 1, {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4",
            "gen_ai.output.messages": json.dumps(out),
            "gen_ai.response.finish_reasons": ["stop"]}),
        span("apply_guardrail Amazon Bedrock Guardrails", "invoke_agent a", 20, {
            "gen_ai.operation.name": "apply_guardrail", "gen_ai.provider.name": "aws.bedrock",
            "gen_ai.guardrail.component.name": "Amazon Bedrock Guardrails",
            "gen_ai.guardrail.source": "OUTPUT", "gen_ai.guardrail.result.type": "action",
            "gen_ai.guardrail.result.value": "NONE"})), TrajectoryConfig())
    assert t.output == "" and not t.unrecorded
    findings = Detectors(DetectorsConfig()).evaluate(t, None)[0]
    assert [f.kind for f in findings] == ["no_output"]


def test_openinference_output_messages_alone_are_a_recorded_llm_output() -> None:
    """An OpenInference LLM span that records its reply as ``llm.output_messages.*`` (the
    structured form; a manual instrumentation, or one that leaves the raw ``output.value``
    out) recorded the LLM's output: ``unrecorded`` counts steps that *lack* a value, so
    neither the call made by a tool call nor the final reply is ``llm_output`` unrecorded,
    and the calls and the answer are read from the messages."""
    def llm(name: str, start: int, out: dict[str, Any]) -> Any:
        return span(name, "agent", start, {
            "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "Weather in Paris?",
            "llm.output_messages.0.message.role": "assistant", **out})
    t = build_trajectory(trace(
        span("agent", None, 0, {"openinference.span.kind": "AGENT",
                                "input.value": "Weather in Paris?",
                                "output.value": "Sunny."}, end=100),
        llm("call", 1, {
            "llm.output_messages.0.message.tool_calls.0.tool_call.id": "c1",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "get_weather",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments":
                '{"city": "Paris"}'}),
        span("get_weather", "agent", 20, {"openinference.span.kind": "TOOL",
                                          "tool.name": "get_weather",
                                          "input.value": '{"city": "Paris"}',
                                          "output.value": "sunny"}),
        llm("reply", 40, {"llm.output_messages.0.message.content": "Sunny."})),
        TrajectoryConfig())
    calls = [s for s in t.steps if s.kind == "llm"]
    assert [(c.name, c.arguments) for c in calls[0].tool_calls] == [
        ("get_weather", {"city": "Paris"})]
    assert calls[1].answer == "Sunny."
    assert not t.unrecorded, t.unrecorded  # nothing lacking, nothing unparsed
    assert all(c.output_text is not None for c in calls)
