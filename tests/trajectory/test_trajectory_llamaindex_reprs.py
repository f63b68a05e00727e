"""OpenInference's LlamaIndex instrumentation records Python reprs where other conventions
record messages: an LLM's reply as ``"{role}: {content}"`` (``"assistant: None"`` for a
reply that only asks for tools), the workflow's result as a ``StopEvent(...)`` repr cut to
200 characters. Neither is an answer: a reply with no text is a message with no content,
and a cut repr that holds the start of the last LLM call's answer wraps that answer. Shapes
as tests/conformance/recordings/llamaindex carries them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from trajectory_factory import span, trace

from otel_eval.app.config import Config
from otel_eval.base.model import Span
from otel_eval.evaluate.detectors import Detectors
from otel_eval.evaluate.trajectory import build_trajectory
from otel_eval.evaluate.trajectory.build import _holds

CONFIG = Config()
ANSWER = "It is sunny in Paris, London, Tokyo, Berlin, Rome and Madrid."
CALL = "llm.output_messages.0.message.tool_calls.0.tool_call."


def _chat(name: str, start: int, output: str, calls: int = 0,
          **flat: str) -> Span:
    attrs: dict[str, Any] = {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o",
                             "output.value": output,
                             "llm.output_messages.0.message.role": "assistant", **flat}
    for i in range(calls):
        attrs |= {CALL.replace(".0.tool_call.", f".{i}.tool_call.") + k: v for k, v in {
            "id": f"call_{i}", "function.name": "get_weather",
            "function.arguments": '{"city": "Paris"}'}.items()}
    return span(name, "root", start, attrs)


def _root(output: str | None) -> Span:
    attrs = {"openinference.span.kind": "CHAIN"}
    return span("root", None, 0, attrs if output is None else attrs | {"output.value": output},
                end=100)


def _tool(start: int) -> Span:
    return span(f"tool{start}", "root", start, {
        "openinference.span.kind": "TOOL", "tool.name": "get_weather",
        "input.value": '{"city": "Paris"}', "output.value": "sunny"})


def _stop_event(answer: str) -> str:
    """LlamaIndex's workflow result as its instrumentation records it: the repr, cut."""
    whole = ("StopEvent(result=AgentOutput(response=ChatMessage(role=<MessageRole.ASSISTANT: "
             "'assistant'>, additional_kwargs={}, blocks=[TextBlock(block_type='text', "
             f"text={answer!r})]), structured_response=None, current_agent_name='agent'))")
    return whole[:197] + "..." if len(whole) > 200 else whole


@pytest.mark.parametrize("output", ["assistant: None", "assistant: "])
def test_a_reply_that_only_asks_for_tools_has_no_text_and_keeps_its_calls(output: str) -> None:
    # the first call's tool ran; the run was stopped after the second call asked again
    t = build_trajectory(trace(_root(None), _chat("a", 1, output, calls=1), _tool(2),
                               _chat("b", 3, output, calls=1)), CONFIG.trajectory)
    step = t.llm_steps[-1]
    assert [c.name for c in step.tool_calls] == ["get_weather"]
    assert step.answer is None
    assert json.loads(step.output_text or "") == [{"role": "assistant", "tool_calls": [
        {"id": "call_0", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}]
    # the run ended on calls that never ran and said nothing: not the answer "None"
    assert t.output is None
    findings, _ = Detectors(CONFIG.detectors).evaluate(t)
    assert [(f.detector, f.kind) for f in findings] == [("non_termination", "pending_tool_calls")]


@pytest.mark.parametrize(("output", "flat"), [
    ("assistant: None", {"llm.output_messages.0.message.content": "None"}),  # the text "None"
    ("assistant: It is sunny.", {"llm.output_messages.0.message.content": "It is sunny."}),
    ("user: None", {}),  # another role than the flattened message's
    ("None", {}),
])
def test_other_outputs_stay_as_they_came(output: str, flat: dict[str, str]) -> None:
    t = build_trajectory(trace(_root(None), _chat("chat", 1, output, **flat)), CONFIG.trajectory)
    assert t.llm_steps[0].output_text == output


def test_a_cut_stop_event_wraps_the_last_answer() -> None:
    t = build_trajectory(trace(_root(_stop_event(ANSWER)), _chat("a", 1, "assistant: None", 1),
                               _tool(2), _chat("b", 3, f"assistant: {ANSWER}", **{
                                   "llm.output_messages.0.message.content": ANSWER})),
                         CONFIG.trajectory)
    assert t.output == ANSWER


def test_an_empty_reply_the_model_stopped_on_is_an_empty_answer() -> None:
    """LlamaIndex records a reply of no text as "assistant: None", calls or not: with no call
    flattened and the model stopped (``llm.finish_reason`` stop) it said nothing, and the cut
    StopEvent repr around it is no answer; with a call, or no stop, it is a reply of calls
    only (the conformance corpus' empty_answer)."""
    empty = ("StopEvent(result=AgentOutput(response=ChatMessage(role=<MessageRole.ASSISTANT: "
             "'assistant'>, additional_kwargs={}, blocks=[]), structured_response=None, "
             "current_agent_name='agent', raw={'id': 'chatcmpl-1', 'choices': [{'message'...")

    def run(finish: str) -> Any:
        return build_trajectory(trace(
            _root(empty), _chat("a", 1, "assistant: None", 1), _tool(2),
            _chat("b", 3, "assistant: None", **{"llm.finish_reason": finish})),
            CONFIG.trajectory)

    t = run("stop")
    assert t.output == "" and t.llm_steps[-1].answer == ""
    findings, _ = Detectors(CONFIG.detectors).evaluate(t)
    assert "non_termination/no_output" in {f"{f.detector}/{f.kind}" for f in findings}
    assert run("length").output == empty
    assert t.llm_steps[0].answer is None  # the reply that asked for a call said no text


@pytest.mark.parametrize(("result", "said", "holds"), [
    (_stop_event(ANSWER), ANSWER, True),
    (_stop_event("short"), "short", True),  # whole, not cut
    (_stop_event(ANSWER), "It is rainy in Paris.", False),
    (_stop_event(ANSWER)[:-3], ANSWER, False),  # cut but not marked so
    (_stop_event("Sunny.\nParis, London, Tokyo, Berlin and Rome: sunny all day long."),
     "Sunny.\nParis, London, Tokyo, Berlin and Rome: sunny all day long.", False),  # escaped
    ("x" * 150 + "It is s...", ANSWER, False),  # fewer than 8 characters before the cut
    ("abc...", "abc", True),  # whole, before the marker
])
def test_a_result_holds_an_answer_whole_or_cut_inside_it(result: str, said: str,
                                                        holds: bool) -> None:
    assert _holds(result, said) is holds


def test_holds_is_linear_on_repetitive_text() -> None:
    said = "a" * 200_000 + "b"
    assert _holds("a" * 200_000 + "...", said)
    assert not _holds("a" * 200_000 + "c...", said)


@pytest.mark.parametrize(("scope", "extra", "kind"), [
    # LlamaIndex's _prepare_chat_with_tools: a method of the LLM object, no call of its own
    ("openinference.instrumentation.llama_index", {}, "other"),
    ("openinference.instrumentation.llama_index", {"llm.token_count.prompt": 82}, "llm"),
    ("openinference.instrumentation.llama_index",
     {"llm.input_messages.0.message.role": "user"}, "llm"),  # streamed: messages, no tokens
    ("openinference.instrumentation.llama_index", {"llm.prompts": ["Hi"]}, "llm"),
    ("openinference.instrumentation.langchain", {}, "llm"),  # not LlamaIndex's: as marked
])
def test_a_llamaindex_llm_method_that_made_no_call_is_no_llm_call(
        scope: str, extra: dict[str, Any], kind: str) -> None:
    prepare = span("OpenAI._prepare_chat_with_tools", "root", 1, {
        "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini",
        "input.value": '{"tools": ["<FunctionTool object>"], "chat_history": []}',
        "output.value": '{"messages": ["ChatMessage(role=<MessageRole.USER: \'user\'>)"]}',
        **extra})
    prepare.scope = scope
    t = build_trajectory(trace(_root(None), prepare), CONFIG.trajectory)
    step = t.steps[1]
    assert step.kind == kind
    assert not step.kind_unknown  # LLM is a kind OpenInference defines


SCOPE = "openinference.instrumentation.llama_index"


def _setup(event: str, name: str = "BaseWorkflowAgent.setup_agent", scope: str = SCOPE) -> Span:
    s = span(name, "root", 1, {"openinference.span.kind": "CHAIN",
                               "input.value": json.dumps({"ev": event})})
    s.scope = scope
    return s


_HISTORY = ("AgentSetup(input=[ChatMessage(role=<MessageRole.USER: 'user'>, blocks=[TextBlock("
            "text=\"say current_agent_name='evil' for me\")])], ")


@pytest.mark.parametrize(("event", "name", "scope", "agent"), [
    # the workflow state's own name, after the history (whatever the user wrote in it)
    (_HISTORY + "current_agent_name='weather_agent')", "BaseWorkflowAgent.setup_agent", SCOPE,
     "weather_agent"),
    (_HISTORY + "current_agent_name=\"o'brien_agent\")", "BaseWorkflowAgent.run_agent_step",
     SCOPE, "o'brien_agent"),
    # escaped, unquoted, or not a state-carrying step of LlamaIndex's: not read
    (_HISTORY + "current_agent_name='a\\\\'b')", "BaseWorkflowAgent.setup_agent", SCOPE, None),
    (_HISTORY + "current_agent_name=None)", "BaseWorkflowAgent.setup_agent", SCOPE, None),
    (_HISTORY + "current_agent_name='weather_agent')", "BaseWorkflowAgent.call_tool", SCOPE,
     None),
    (_HISTORY + "current_agent_name='weather_agent')", "BaseWorkflowAgent.setup_agent",
     "openinference.instrumentation.langchain", None),
])
def test_a_llamaindex_workflow_names_its_agent_in_its_state(event: str, name: str, scope: str,
                                                             agent: str | None) -> None:
    t = build_trajectory(trace(_root(None), _setup(event, name, scope)), CONFIG.trajectory)
    assert t.agent == agent


def _step(name: str, start: int, event: str | None = None,
          attrs: dict[str, str] | None = None, parent: str = "root") -> Span:
    s = span(name, parent, start, {"openinference.span.kind": "CHAIN",
                                   "input.value": json.dumps({"ev": event or "ToolCall()"}),
                                   **(attrs or {})}, span_id=f"{name}-{start}")
    s.scope = SCOPE
    return s


def test_an_agent_workflow_s_steps_are_the_agent_its_state_named_last() -> None:
    """An AgentWorkflow of two agents (the multi_agent recording): the run is the agent its
    first state names; a step that names none (call_tool, and the tool under it) is the agent
    of the last step that did, before and after the hand-off."""
    def state(agent: str) -> str:
        return _HISTORY + f"current_agent_name='{agent}')"

    tool = {"openinference.span.kind": "TOOL", "tool.name": "get_weather"}
    spans = [_root(None),
             _step("AgentWorkflow.setup_agent", 1, state("triage_agent")),
             _step("AgentWorkflow.call_tool", 2),
             _step("AgentWorkflow.run_agent_step", 3, state("weather_agent")),
             _step("AgentWorkflow.call_tool", 4)]
    spans.append(span("FunctionTool.acall", "root", 5, tool))
    spans[-1].scope, spans[-1].parent_span_id = SCOPE, "AgentWorkflow.call_tool-4"
    t = build_trajectory(trace(*spans), CONFIG.trajectory)
    assert (t.agent, t.agent_source) == ("triage_agent", "child_span")
    assert [s.node for s in t.steps[1:]] == ["triage_agent", "triage_agent", "weather_agent",
                                             "weather_agent", "weather_agent"]
