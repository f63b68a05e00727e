"""Content in span events (the older GenAI events on the span itself, as Strands sends them)."""

from __future__ import annotations

import json

from trajectory_factory import span, trace

from otel_eval.base.model import SpanEvent
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.detectors import Detectors, DetectorsConfig
from otel_eval.evaluate.trajectory import build_trajectory


def _ev(name: str, **attrs: str) -> SpanEvent:
    return SpanEvent(name, 0, dict(attrs))


def _use(call_id: str) -> str:
    return json.dumps([{"toolUse": {"toolUseId": call_id, "name": "get_weather",
                                    "input": {"city": "Paris"}}}])


def _run(calls: int) -> list:
    spans = [span("invoke_agent weather", attrs={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather"}, end=1000,
        events=[_ev("gen_ai.user.message", content='[{"text": "Weather in Paris?"}]'),
                _ev("gen_ai.choice", message="It is sunny.", finish_reason="end_turn")])]
    for i in range(calls):
        spans.append(span(f"chat{i}", "invoke_agent weather", start=10 * i + 1, attrs={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}, events=[
                _ev("gen_ai.user.message", content='[{"text": "Weather in Paris?"}]'),
                _ev("gen_ai.choice", message=_use(f"c{i}"), finish_reason="tool_use")]))
        spans.append(span(f"execute_tool get_weather {i}", "invoke_agent weather",
                          start=10 * i + 5, attrs={
                              "gen_ai.operation.name": "execute_tool",
                              "gen_ai.tool.name": "get_weather", "gen_ai.tool.call.id": f"c{i}"},
                          events=[_ev("gen_ai.tool.message", role="tool",
                                      content='{"city": "Paris"}', id=f"c{i}"),
                                  _ev("gen_ai.choice", message='[{"text": "sunny"}]',
                                      id=f"c{i}")]))
    return spans


def test_arguments_result_and_answer_from_span_events() -> None:
    t = build_trajectory(trace(*_run(1)), TrajectoryConfig())
    tools = t.tool_steps
    assert [(s.arguments, s.result) for s in tools] == [({"city": "Paris"}, "sunny")]
    llm = t.llm_steps[0]
    assert [(c.name, c.arguments, c.call_id, c.outcome) for c in llm.tool_calls] == [
        ("get_weather", {"city": "Paris"}, "c0", "ran")]
    assert llm.finish_reasons == ["tool_use"] and llm.prompt == "Weather in Paris?"
    assert t.answer == "It is sunny." and t.task == "Weather in Paris?"
    assert "arguments" not in t.unrecorded and "output" not in t.unrecorded


def test_identical_calls_in_span_events_are_a_loop() -> None:
    t = build_trajectory(trace(*_run(4)), TrajectoryConfig())
    findings, _ = Detectors(DetectorsConfig()).evaluate(t)
    assert [f.kind for f in findings if f.detector == "loop"] == ["repeated_call"]


def test_anthropic_tool_use_blocks_in_output_messages_are_tool_calls() -> None:
    out = json.dumps([{"role": "assistant", "content": [
        {"type": "text", "text": "checking"},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]}])
    t = build_trajectory(trace(span("chat", attrs={
        "gen_ai.operation.name": "chat", "gen_ai.output.messages": out})), TrajectoryConfig())
    assert [(c.name, c.arguments, c.call_id) for c in t.llm_steps[0].tool_calls] == [
        ("get_weather", {"city": "Oslo"}, "toolu_1")]


def test_attributes_win_over_span_events() -> None:
    t = build_trajectory(trace(span("execute_tool t", attrs={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t",
        "gen_ai.tool.call.arguments": '{"a": 1}'}, events=[
            _ev("gen_ai.tool.message", content='{"a": 2}')])), TrajectoryConfig())
    assert t.tool_steps[0].arguments == {"a": 1}


def test_log_record_bodies_that_are_json_text_are_read_as_json() -> None:
    """Semantic Kernel logs ``json.dumps`` of each message as the record's body."""
    from trajectory_factory import TRACE_ID

    from otel_eval.base.model import LogEvent, Trace

    chat = span("chat", attrs={"gen_ai.operation.name": "chat"})
    choice = json.dumps({"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris"}'}}]}})
    logs = [LogEvent(TRACE_ID, chat.span_id, "gen_ai.user.message", 1, {},
                     json.dumps({"role": "user", "content": "Weather?"})),
            LogEvent(TRACE_ID, chat.span_id, "gen_ai.choice", 2, {}, choice)]
    t = build_trajectory(Trace(TRACE_ID, [chat], "complete", logs=logs), TrajectoryConfig())
    llm = t.llm_steps[0]
    assert [(c.name, c.arguments, c.call_id) for c in llm.tool_calls] == [
        ("get_weather", {"city": "Paris"}, "c1")]
    assert llm.finish_reasons == ["tool_calls"] and llm.prompt == "Weather?"


def test_llm_outputs_of_messages_without_text_are_no_stagnation() -> None:
    """Outputs read as messages that hold no text and no call are unknown, never alike."""
    empty = json.dumps([{"role": "assistant", "finish_reason": "stop"}])
    said = json.dumps([{"role": "assistant", "content": "I keep saying the same thing."}])
    for output, stagnates in ((empty, False), (said, True)):
        spans = [span(f"chat{i}", start=i, attrs={"gen_ai.operation.name": "chat",
                                                  "gen_ai.output.messages": output})
                 for i in range(4)]
        t = build_trajectory(trace(*spans), TrajectoryConfig())
        findings, _ = Detectors(DetectorsConfig()).evaluate(t)
        assert any(f.kind == "stagnation" for f in findings) is stagnates, output


def test_a_message_event_s_role_as_passed_keeps_the_role_its_event_names() -> None:
    """The older events' ``role`` body field is "the actual role of the message author as
    passed in the message", set when it is not the event's own (the spec's examples:
    ``customer`` on ``gen_ai.user.message``, ``bot`` on ``gen_ai.assistant.message``,
    ``function`` on ``gen_ai.tool.message``): the user's message is still the user's."""
    calls = json.dumps([{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"location": "Paris"}'}}])
    spans = [
        span("invoke_agent a", attrs={"gen_ai.operation.name": "invoke_agent",
                                      "gen_ai.agent.name": "a"}, end=1000),
        span("chat 1", "invoke_agent a", start=1, attrs={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4"}, events=[
                _ev("gen_ai.user.message", content="Weather in Paris?", role="customer"),
                _ev("gen_ai.choice", index="0", finish_reason="tool_calls",
                    message=json.dumps({"tool_calls": json.loads(calls)}))]),
        span("execute_tool get_weather", "invoke_agent a", start=20, attrs={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
            "gen_ai.tool.call.id": "call_1"}),
        span("chat 2", "invoke_agent a", start=40, attrs={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4"}, events=[
                _ev("gen_ai.user.message", content="Weather in Paris?", role="customer"),
                _ev("gen_ai.assistant.message", tool_calls=calls, role="bot"),
                _ev("gen_ai.tool.message", content="rainy, 57°F", id="call_1", role="function"),
                _ev("gen_ai.choice", index="0", finish_reason="stop",
                    message=json.dumps({"content": "It is rainy."}))])]
    t = build_trajectory(trace(*spans), TrajectoryConfig())
    assert t.task == "Weather in Paris?" and t.answer == "It is rainy."
    assert [s.prompt for s in t.llm_steps] == ["Weather in Paris?", "rainy, 57°F"]
