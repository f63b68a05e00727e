"""The per-trace result reads as text: ``input`` / ``output`` are the user's words (the
messages kept in ``input_messages`` / ``output_messages``), each step carries what it said
and got back (bounded), and a requested call says whether it ran."""

from __future__ import annotations

import json

import pytest
from trajectory_factory import span, trace

from otel_eval.base.model import SpanEvent
from otel_eval.base.results import Evaluation
from otel_eval.base.steps import CONTENT_CHARS
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.conventions.messages import (
    finish_reasons,
    reply_text,
    request_messages,
    said_nothing,
)
from otel_eval.evaluate.detectors import Detectors, DetectorsConfig
from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.judge.render import render
from otel_eval.evaluate.trajectory import build_trajectory
from otel_eval.evaluate.trajectory.build import _holds

CFG = TrajectoryConfig()
AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}
CHAT = {"gen_ai.operation.name": "chat"}
ASK = [{"role": "user", "parts": [{"type": "text", "content": "What is the weather in Paris?"}]}]
SAY = [{"role": "assistant", "parts": [{"type": "text", "content": "Sunny, 21 °C."}]}]


def _body(*spans: object) -> dict:
    return Evaluation(build_trajectory(trace(*spans), CFG)).to_json()  # type: ignore[arg-type]


def test_input_and_output_are_text_and_the_messages_a_field_of_their_own() -> None:
    body = _body(span("root", None, 0, {**AGENT, "gen_ai.input.messages": json.dumps(ASK),
                                        "gen_ai.output.messages": json.dumps(SAY)}))
    assert (body["input"], body["output"]) == ("What is the weather in Paris?", "Sunny, 21 °C.")
    assert (body["input_messages"], body["output_messages"]) == (ASK, SAY)


def test_plain_text_and_non_message_json_stay_as_they_came_with_no_messages() -> None:
    body = _body(span("root", None, 0, {**AGENT, "gen_ai.input.messages": '{"city": "Paris"}',
                                        "gen_ai.output.messages": "sunny"}))
    assert (body["input"], body["output"]) == ('{"city": "Paris"}', "sunny")
    assert "input_messages" not in body and "output_messages" not in body


def _user(text: str) -> dict:
    return {"role": "user", "parts": [{"type": "text", "content": text}]}


@pytest.mark.parametrize(("first_call", "task"), [
    # one turn: the only user message
    ([_user("What is the weather in Paris?")], "What is the weather in Paris?"),
    # a chat turn that sends the earlier turns again (pydantic-ai's message_history): this
    # turn's own request, not the first turn's
    ([_user("What is the weather in Paris?"), *SAY,
      {"role": "tool", "parts": [{"type": "tool_call_response", "response": "sunny"}]},
      _user("And in London?")], "And in London?"),
    # tool results sent as user messages are no request (Anthropic tool_result blocks)
    ([_user("And in London?"),
      {"role": "user", "content": [{"type": "tool_result", "content": "sunny"}]}],
     "And in London?"),
])
def test_the_task_is_the_last_user_request_of_the_first_llm_call(first_call: list,
                                                                  task: str) -> None:
    body = _body(span("root", None, 0, AGENT),
                 span("chat", "root", 1, {**CHAT, "gen_ai.input.messages":
                                          json.dumps(first_call)}),
                 span("chat2", "root", 2, {**CHAT, "gen_ai.input.messages":
                                           json.dumps([*first_call, *SAY])}))
    assert body["input"] == task


def _event(name: str, **attrs: str) -> SpanEvent:
    return SpanEvent(name, 0, dict(attrs))


# One chat turn that sends the earlier turn again as history, as each convention records it
# on an LLM span: the run is that one call (no agent span; its root the call).
_HISTORY = [_user("What is the weather in Paris?"), *SAY, _user("And in London?")]
_ONE_CALL = {
    "genai parts": ({**CHAT, "gen_ai.input.messages": json.dumps(_HISTORY)}, []),
    "genai older events": (CHAT, [
        _event("gen_ai.user.message", content="What is the weather in Paris?"),
        _event("gen_ai.assistant.message", content="Sunny, 21 °C."),
        _event("gen_ai.user.message", content="And in London?")]),
    "openllmetry": ({"gen_ai.system": "openai", "llm.request.type": "chat",
                     "gen_ai.prompt.0.role": "user",
                     "gen_ai.prompt.0.content": "What is the weather in Paris?",
                     "gen_ai.prompt.1.role": "assistant", "gen_ai.prompt.1.content": "Sunny.",
                     "gen_ai.prompt.2.role": "user", "gen_ai.prompt.2.content": "And in London?"},
                    []),
    "openinference": ({"openinference.span.kind": "LLM",
                       "llm.input_messages.0.message.role": "user",
                       "llm.input_messages.0.message.content": "What is the weather in Paris?",
                       "llm.input_messages.1.message.role": "assistant",
                       "llm.input_messages.1.message.content": "Sunny.",
                       "llm.input_messages.2.message.role": "user",
                       "llm.input_messages.2.message.content": "And in London?"}, []),
}


@pytest.mark.parametrize("recorded", _ONE_CALL.values(), ids=_ONE_CALL.keys())
def test_a_run_that_is_one_llm_call_has_its_last_user_request_as_task(
        recorded: tuple[dict, list[SpanEvent]]) -> None:
    """A chat app's turn instrumented by its client alone (one chat span, no agent span):
    before, the run's task (the result's ``input``, the session's request of the turn) was
    the first user message of the call's history, an earlier turn's, where the same call
    under an agent span gave this turn's request."""
    attrs, events = recorded
    t = build_trajectory(trace(span("chat", None, 0, attrs, events=events)), CFG)
    assert t.root_step is not None and t.root_step.kind == "llm"
    assert t.task == "And in London?"
    assert Evaluation(t).to_json()["input"] == "And in London?"
    assert t.input_messages is not None and len(t.input_messages) == 3  # as recorded


_ASKED = [_user("What is the weather in Paris?")]


@pytest.mark.parametrize(("recorded", "first_call", "task"), [
    # smolagents' run(task=...) arguments, DSPy's signature input: the one text, by its name
    ('{"task": "Book a flight", "stream": false, "reset": true, "images": null}', None,
     "Book a flight"),
    ('{"question": "Why is the sky blue?"}', _ASKED, "Why is the sky blue?"),
    # a framework's state (LlamaIndex's workflow, CrewAI's agent): the first call's request
    ('{"init_state": {"is_running": false}, "start_event": "StartEvent()"}', _ASKED,
     "What is the weather in Paris?"),
    ('[]', _ASKED, "What is the weather in Paris?"),  # Semantic Kernel: nothing recorded
    # two texts, or a text not named as the request: not told apart; the call's request
    ('{"task": "Book a flight", "mode": "fast"}', _ASKED, "What is the weather in Paris?"),
    ('{"city": "Paris"}', _ASKED, "What is the weather in Paris?"),
    # nothing to read it from: as recorded
    ('{"init_state": {"is_running": false}}', None, '{"init_state": {"is_running": false}}'),
    ('{"city": "Paris"}', None, '{"city": "Paris"}'),
    # plain text is the request as it came
    ("Book a flight", _ASKED, "Book a flight"),
])
def test_a_structured_input_without_messages_reads_the_request(
        recorded: str, first_call: list | None, task: str) -> None:
    spans = [span("root", None, 0, {**AGENT, "input.value": recorded,
                                    "openinference.span.kind": "AGENT"})]
    if first_call is not None:
        spans.append(span("chat", "root", 1, {**CHAT, "gen_ai.input.messages":
                                              json.dumps(first_call)}))
    t = build_trajectory(trace(*spans), CFG)  # type: ignore[arg-type]
    assert (t.input, Evaluation(t).to_json()["input"]) == (recorded, task)
    # the judge is given the request as the run's task
    assert render(Evaluation(t), JudgeConfig(model="m").compaction).task == task


def test_llm_steps_carry_their_last_message_reply_and_requested_calls() -> None:
    told = [*ASK, {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c0",
                                              "response": "sunny"}]}]
    asked = [{"role": "assistant", "finish_reason": "tool_call", "parts": [
        {"type": "text", "content": "Checking."},
        {"type": "tool_call", "id": "c0", "name": "get_weather", "arguments": {"city": "P"}}]}]
    body = _body(
        span("root", None, 0, AGENT),
        span("llm1", "root", 1, {**CHAT, "gen_ai.input.messages": json.dumps(ASK),
                                 "gen_ai.output.messages": json.dumps(asked)}),
        span("llm2", "root", 5, {**CHAT, "gen_ai.input.messages": json.dumps(told),
                                 "gen_ai.output.messages": json.dumps(SAY)}))
    llm1, rebuilt, llm2 = body["steps"][1:]
    assert (llm1["prompt"], llm1["answer"]) == ("What is the weather in Paris?", "Checking.")
    assert llm1["tool_calls"] == [{"name": "get_weather", "arguments": {"city": "P"},
                                   "call_id": "c0", "outcome": "rebuilt"}]
    assert rebuilt["rebuilt"] is True and rebuilt["result"] == "sunny"
    assert (llm2["prompt"], llm2["answer"]) == ("sunny", "Sunny, 21 °C.")


def test_a_call_no_span_ran_and_no_later_call_saw_is_never_ran() -> None:
    asked = [{"role": "assistant", "parts": [
        {"type": "tool_call", "id": "c9", "name": "get_weather", "arguments": {}}]}]
    body = _body(
        span("root", None, 0, AGENT),
        span("llm", "root", 1, {**CHAT, "gen_ai.output.messages": json.dumps(asked)}),
        span("t", "root", 2, {"gen_ai.operation.name": "execute_tool",
                              "gen_ai.tool.name": "other"}))
    assert body["steps"][1]["tool_calls"][0]["outcome"] == "never_ran"


def test_a_20_mb_tool_result_is_cut_and_its_length_kept() -> None:
    big = "x" * 20_000_000
    body = _body(span("root", None, 0, AGENT),
                 span("t", "root", 1, {"gen_ai.operation.name": "execute_tool",
                                       "gen_ai.tool.name": "dump",
                                       "gen_ai.tool.call.result": big}))
    tool = body["steps"][1]
    assert len(tool["result"]) == CONTENT_CHARS and tool["truncated"] == {"result": 20_000_000}


def test_costs_are_kept_without_float_noise() -> None:
    body = _body(span("root", None, 0, AGENT),
                 span("llm", "root", 1, {**CHAT, "gen_ai.usage.cost": 0.0000185 * 3}))
    assert 0.0000185 * 3 == 5.5499999999999994e-05  # what the spans give
    assert body["steps"][1]["cost_usd"] == 5.55e-05 and body["usage"]["cost_usd"] == 5.55e-05


OI_LLM = {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini"}
OI_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


def test_an_openinference_request_and_response_object_read_as_messages_and_reply() -> None:
    """``openinference-instrumentation-openai`` records the whole request and the
    ChatCompletion: the step gets its prompt, its answer and its calls, not the objects."""
    request = {"model": "gpt-4o-mini", "tools": OI_TOOLS, "messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"},
        {"role": "assistant", "tool_calls": [{"id": "c0", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "P"}'}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "sunny"}]}
    response = {"id": "chatcmpl-1", "object": "chat.completion", "choices": [
        {"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": "It is sunny.", "refusal": None}}],
        "usage": {"prompt_tokens": 9}}
    body = _body(span("root", None, 0, {"openinference.span.kind": "AGENT",
                                        "agent.name": "a"}),
                 span("llm", "root", 1, {**OI_LLM, "input.value": json.dumps(request),
                                         "output.value": json.dumps(response)}))
    llm = body["steps"][1]
    assert (llm["prompt"], llm["answer"]) == ("sunny", "It is sunny.")
    assert llm["finish_reasons"] == ["stop"]


def test_an_anthropic_request_keeps_its_system_prompt_and_its_tool_use_is_a_call() -> None:
    request = {"model": "claude", "system": "Be brief.",
               "messages": [{"role": "user", "content": "Weather?"}]}
    response = {"id": "msg_1", "type": "message", "role": "assistant", "content": [
        {"type": "tool_use", "id": "t0", "name": "get_weather", "input": {"city": "P"}}]}
    t = build_trajectory(trace(  # type: ignore[arg-type]
        span("llm", None, 1, {**OI_LLM, "input.value": json.dumps(request),
                              "output.value": json.dumps(response)})), CFG)
    llm = t.llm_steps[0]
    assert json.loads(llm.input_text or "")[0] == {"role": "system", "content": "Be brief."}
    assert llm.prompt == "Weather?"
    assert [(c.name, c.arguments, c.call_id) for c in llm.tool_calls] == [
        ("get_weather", {"city": "P"}, "t0")]


@pytest.mark.parametrize("calls", [5, True, 1.5, {"id": "c0"}, "get_weather", None])
def test_a_response_object_s_tool_calls_not_a_list_are_no_calls(calls: object) -> None:
    """A ChatCompletion's ``message.tool_calls`` that is no list is read as absent (issue 11:
    ``"tool_calls": 1``): ``5`` raised TypeError, so the span became a plain step and the
    trace an ``evaluation_error``, a failed verdict for a value not understood."""
    response = {"choices": [{"finish_reason": "stop", "message": {
        "role": "assistant", "content": "It is sunny.", "tool_calls": calls}}]}
    t = build_trajectory(trace(  # type: ignore[arg-type]
        span("llm", None, 1, {**OI_LLM, "output.value": json.dumps(response)})), CFG)
    assert t.errors == []
    llm = t.llm_steps[0]
    assert llm.tool_calls == []
    assert llm.answer == "It is sunny."


def test_langchain_serialized_input_reads_the_flattened_messages() -> None:
    lc = {"messages": [[{"lc": 1, "type": "constructor", "kwargs": {"content": "Weather?"}}]]}
    t = build_trajectory(trace(span("llm", None, 1, {  # type: ignore[arg-type]
        **OI_LLM, "input.value": json.dumps(lc),
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": "Weather?"})), CFG)
    assert json.loads(t.llm_steps[0].input_text or "") == [{"role": "user",
                                                            "content": "Weather?"}]
    assert t.llm_steps[0].prompt == "Weather?"


def test_flattened_content_parts_and_autogen_s_function_results_are_messages() -> None:
    """OpenInference's ``message.contents.N.message_content.*`` (smolagents, BeeAI) and the
    AutoGen instrumentation's function-role results (``function.N``, each as JSON)."""
    inp, out = "llm.input_messages.", "llm.output_messages."
    t = build_trajectory(trace(span("llm", None, 1, {  # type: ignore[arg-type]
        **OI_LLM, "input.value": json.dumps({"memory_step": "ActionStep(...)"}),
        inp + "0.message.role": "user",
        inp + "0.message.contents.1.message_content.type": "text",
        inp + "0.message.contents.1.message_content.text": "in Paris?",
        inp + "0.message.contents.0.message_content.type": "text",
        inp + "0.message.contents.0.message_content.text": "Weather",
        inp + "0.message.contents.2.message_content.type": "image",
        inp + "0.message.contents.2.message_content.image.image.url": "http://x/a.png",
        inp + "0.message.contents.3.message_content.type": "reasoning",
        inp + "0.message.contents.3.message_content.text": "the user wants the weather",
        inp + "1.message.role": "function",
        inp + "1.function.0": json.dumps({"name": "get_weather", "content": "sunny",
                                          "call_id": "c0", "is_error": False}),
        out + "0.message.role": "assistant",
        out + "0.message.contents.0.message_content.type": "text",
        out + "0.message.contents.0.message_content.text": "It is sunny."})), CFG)
    llm = t.llm_steps[0]
    assert json.loads(llm.input_text or "") == [
        {"role": "user", "content": [{"type": "text", "text": "Weather"},
                                     {"type": "text", "text": "in Paris?"}, {"type": "image"},
                                     {"type": "reasoning"}]},
        {"role": "function", "parts": [{"type": "tool_call_response", "id": "c0",
                                        "response": "sunny"}]}]
    assert (llm.prompt, llm.reply, llm.answer) == ("sunny", "It is sunny.", "It is sunny.")
    assert t.task == "Weather\nin Paris?\n[image]"  # the image named, its URL not kept


@pytest.mark.parametrize(("attrs", "reasons"), [
    ({"llm.finish_reason": "length"}, ["length"]),  # OpenInference's own attribute
    ({"output.value": json.dumps({"finish_reason": "length", "content": "It is"})},
     ["length"]),  # AutoGen's CreateResult
    ({"llm.finish_reason": "stop", "output.value": json.dumps(
        {"choices": [{"finish_reason": "length", "message": {"content": "x"}}]})}, ["stop"]),
    ({"output.value": "It is"}, []),  # not recorded: unknown, never a finding
    # smolagents: the raw response's repr in its ChatMessage (OpenAI, LiteLLM, Hugging Face)
    ({"output.value": json.dumps({"role": "assistant", "content": "It is", "raw": (
        "ChatCompletion(id='c', choices=[Choice(finish_reason='length', index=0, message="
        "ChatCompletionMessage(content='It is', role='assistant'))], model='m')")})}, ["length"]),
    ({"output.value": json.dumps({"role": "assistant", "content": "It is", "raw": (
        "ModelResponse(id='c', created=1, model='m', object='chat.completion', system_finger"
        "print=None, choices=[Choices(finish_reason='length', index=0, message=Message("
        "content=\"It is, choices=[Choice(finish_reason='stop'\", role='assistant'))])")})},
     ["length"]),  # the first choice's: what its content says comes after it
    ({"output.value": json.dumps({"role": "assistant", "content": "It is", "raw": (
        "ChatCompletionOutput(choices=[ChatCompletionOutputComplete(finish_reason='stop', "
        "index=0, message=ChatCompletionOutputMessage(role='assistant', content='x'))])")})},
     ["stop"]),
    # Haystack: the reply's ChatMessage repr, its _meta last
    ({"output.value": json.dumps({"replies": [
        "ChatMessage(_role=<ChatRole.ASSISTANT: 'assistant'>, _content=[TextContent(text=\"It "
        "is, _meta={'finish_reason': 'stop'}\")], _name=None, _meta={'model': 'm', 'index': 0, "
        "'finish_reason': 'length', 'usage': {}})"]})}, ["length"]),
])
def test_an_openinference_llm_call_cut_at_its_token_limit_is_told(
        attrs: dict, reasons: list[str]) -> None:
    t = build_trajectory(trace(  # type: ignore[arg-type]
        span("root", None, 0, {"openinference.span.kind": "AGENT", "agent.name": "a",
                               "output.value": "It is"}),
        span("llm", "root", 1, {**OI_LLM, **attrs})), CFG)
    assert t.llm_steps[0].finish_reasons == reasons
    findings, _ = Detectors(DetectorsConfig()).evaluate(t)
    assert ("non_termination/length_stop" in {f"{f.detector}/{f.kind}" for f in findings}) == (
        reasons == ["length"])


@pytest.mark.parametrize("request_", [
    {"model": "m", "messages": [{"role": "user", "content": "hi ]"}],
     "tools": [{"name": "t", "parameters": {"required": ["city"]}}]},  # a list after it
    {"messages": [{"content": "hi ]", "role": "user"}], "tools": [["x"]]},  # role not first
    {"messages": [], "tools": []},
    {"system": "Be brief.", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9},
])
def test_a_request_s_messages_are_its_own_text_whatever_follows(request_: dict) -> None:
    found = json.loads(request_messages(json.dumps(request_)) or "")
    system = [{"role": "system", "content": request_["system"]}] if "system" in request_ else []
    assert found == system + request_["messages"]


def test_langchain_batches_and_reprs_are_no_request() -> None:
    for raw in ('{"messages": [[{"lc": 1}]]}', '{"messages": ["ChatMessage(role=...)"]}',
                '[{"role": "user", "content": "hi"}]', "plain"):
        assert request_messages(raw) is None


@pytest.mark.parametrize("answer", ["It is sunny.", 7])
def test_smolagents_own_parameter_types_are_unchecked_not_a_broken_schema(
        answer: object) -> None:
    """smolagents' ``any``: the parameter is not checked, and no warning says the tool's
    schema is too broken to check (every smolagents code run's final_answer had one)."""
    params = {"answer": {"type": "any", "description": "The final answer"},
              "unit": {"type": "string", "description": "C or F"}}
    t = build_trajectory(trace(  # type: ignore[arg-type]
        span("root", None, 0, {"openinference.span.kind": "AGENT", "agent.name": "a",
                               "output.value": "It is sunny."}),
        span("final", "root", 1, {"openinference.span.kind": "TOOL", "tool.name": "final_answer",
                                  "tool.parameters": json.dumps(params),
                                  "input.value": json.dumps({"answer": answer}),
                                  "output.value": "It is sunny."})), CFG)
    assert t.tools["final_answer"]["properties"]["answer"] == {"description": "The final answer"}
    findings, _ = Detectors(DetectorsConfig()).evaluate(t)
    assert not [f for f in findings if f.detector == "tool_call"]
    # a JSON schema type beside it is still checked
    t.tool_steps[0].arguments = {"answer": "x", "unit": 3}
    findings, _ = Detectors(DetectorsConfig()).evaluate(t)
    assert "tool_call/arguments" in {f"{f.detector}/{f.kind}" for f in findings}


@pytest.mark.parametrize("output", [
    # the repr's choices past the provider's fields (its first 1,000 characters): not read
    {"raw": "ChatCompletion(id='" + "c" * 2_000 + "', choices=[Choice(finish_reason='length'"},
    {"raw": "ChatCompletion(id='c', choices=[Choice(index=0, finish_reason='length'"},
    {"raw": "ChatCompletion(id='c', choices=[" + "(" * 100_000},  # hostile: linear, nothing
    {"raw": ["finish_reason"]},
    # a Haystack reply that is no assistant message, or whose _meta holds none
    {"replies": ["ChatMessage(_role=<ChatRole.USER: 'user'>, _meta={'finish_reason': 'length'})"]},
    {"replies": ["ChatMessage(_role=<ChatRole.ASSISTANT: 'assistant'>, _content=[TextContent(text="
                 "\"x, _meta={'finish_reason': 'length'}\")], _name=None, _meta={})"]},
    {"replies": "finish_reason"},
])
def test_a_repr_of_another_shape_gives_no_finish_reason(output: dict) -> None:
    assert finish_reasons(json.dumps(output)) == []


def _chunk(text: str, finish: str) -> dict:
    return {"role": "assistant", "parts": [{"type": "text", "content": text}],
            "finish_reason": finish}


@pytest.mark.parametrize(("output", "answer"), [
    # Google ADK's streamed call: one output message per chunk, unfinished but the last
    ([_chunk("It", ""), _chunk(" is", ""), _chunk(" sunny.", "stop")], "It is sunny."),
    ([_chunk("It", ""), _chunk(" is", "")], "It is"),  # cut off: what came
    # whole messages (choices, each finished): the last, as before
    ([_chunk("It is sunny.", "stop"), _chunk("Sunny.", "stop")], "Sunny."),
    ([{"role": "assistant", "parts": [{"type": "text", "content": "A."}]},
      _chunk("B.", "stop")], "B."),
])
def test_a_reply_recorded_chunk_by_chunk_is_the_chunks_joined(output: list,
                                                              answer: str) -> None:
    t = build_trajectory(trace(  # type: ignore[arg-type]
        span("root", None, 0, {"gen_ai.operation.name": "invoke_agent",
                               "gen_ai.agent.name": "a"}),
        span("llm", "root", 1, {"gen_ai.operation.name": "generate_content",
                                "gen_ai.output.messages": json.dumps(output)})), CFG)
    assert (t.llm_steps[0].answer, t.answer) == (answer, answer)


def test_a_tool_message_of_text_parts_answers_its_call_by_id() -> None:
    # LiteLLM's GenAI messages keep OpenAI's tool_call_id beside the GenAI parts
    asked = [{"role": "assistant", "parts": [{"type": "tool_call", "id": "c1",
                                              "name": "get_weather",
                                              "arguments": {"city": "Paris"}}]}]
    told = [{"role": "user", "parts": [{"type": "text", "content": "Weather?"}]},
            {"role": "assistant", "parts": [], "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "parts": [{"type": "text", "content": "sunny"}],
             "tool_call_id": "c1"}]
    t = build_trajectory(trace(  # type: ignore[arg-type]
        span("root", None, 0, {"gen_ai.operation.name": "invoke_agent",
                               "gen_ai.agent.name": "a"}),
        span("llm1", "root", 1, {"gen_ai.operation.name": "chat",
                                 "gen_ai.output.messages": json.dumps(asked)}),
        span("tool", "root", 2, {"gen_ai.operation.name": "execute_tool",
                                 "gen_ai.tool.name": "get_weather",
                                 "gen_ai.tool.call.id": "c1"}),
        span("llm2", "root", 3, {"gen_ai.operation.name": "chat",
                                 "gen_ai.input.messages": json.dumps(told)})), CFG)
    assert (t.tool_steps[0].result, t.llm_steps[1].prompt) == ("sunny", "sunny")


@pytest.mark.parametrize(("raw", "nothing"), [
    ('[{"role": "assistant", "content": ""}]', True),
    ('[{"role": "assistant", "content": []}]', True),  # Semantic Kernel, Strands
    ('[{"role": "assistant", "parts": [], "finish_reason": "stop"}]', True),  # GenAI
    ('[{"role": "assistant", "parts": [{"type": "text", "content": ""}]}]', True),
    # LangChain's LLMResult (OpenInference's output.value of a LangGraph model call)
    ('{"generations": [[{"text": "", "message": {"kwargs": {"content": ""}}}]]}', True),
    ('{"generations": [[{"text": "", "message": {"kwargs": {"tool_calls": [{"name": "f"}]}}}]]}',
     False),
    # content left out (not captured) or null (OpenAI's reply of calls only): unknown
    ('[{"role": "assistant"}]', False),
    ('[{"role": "assistant", "content": null}]', False),
    ('[{"role": "assistant", "content": "", "tool_calls": [{"id": "c1"}]}]', False),
    ('[{"role": "assistant", "parts": [{"type": "tool_call", "name": "f"}]}]', False),
    ('[{"role": "assistant", "content": "Sunny."}]', False),
    ("not json", False),
])
def test_a_reply_recorded_with_empty_text_said_nothing(raw: str, nothing: bool) -> None:
    assert said_nothing(raw) is nothing
    # and only where the model stopped there: an empty text may stand beside calls another
    # instrumentation recorded
    assert reply_text(None, raw, ["stop"]) == ("" if nothing else None)
    assert reply_text(None, raw, ["tool_calls"]) is None


def _graph_run(text: str, finish: str = "stop", after: dict | None = None) -> str | None:
    """A LangGraph-shaped run: the agent's result is the graph state around its last reply,
    which says ``text`` (GenAI parts: none for an empty text)."""
    reply = {"role": "assistant",
             "parts": [{"type": "text", "content": text}] if text else []}
    state = {"messages": [{"type": "human", "data": {"content": "Paris?"}},
                          {"type": "ai", "data": {"content": text}}]}
    spans = [span("root", None, 0, {"openinference.span.kind": "AGENT",
                                    "output.value": json.dumps(state)}, end=100),
             span("chat", "root", 1, {"gen_ai.operation.name": "chat",
                                      "gen_ai.output.messages": json.dumps([reply]),
                                      "gen_ai.response.finish_reasons": json.dumps([finish])})]
    if after is not None:
        spans.append(span("later", "root", 5, after))
    return build_trajectory(trace(*spans), CFG).output


def test_an_empty_reply_is_the_answer_of_a_run_whose_result_is_a_state_around_it() -> None:
    assert _graph_run("") == ""
    assert _graph_run("Sunny.") == "Sunny."
    # no stop recorded, or a step of unknown kind after it (it may have answered): the
    # result stays what the span recorded
    assert (_graph_run("", finish="tool_calls") or "").startswith('{"messages"')
    assert (_graph_run("", after={"gen_ai.operation.name": "zz_unknown"}) or "").startswith(
        '{"messages"')


@pytest.mark.parametrize("text", ["Il fait beau.\n\u00c0 Paris.", 'Il a dit "oui".',
                                  "\u0627\u0644\u062c\u0648 \u0645\u0634\u0645\u0633",
                                  "- sunny\n- 22 C"])
def test_the_answer_of_a_graph_run_is_its_last_reply_as_the_state_escapes_it(text: str) -> None:
    """The graph state (LangGraph's, LangChain.js's) is JSON: the last reply's newline, quote
    and, as Python's json.dumps writes by default, every character past ASCII are escaped in
    it. The reply was then not found in the state, and the run's answer was the whole state:
    a multi-line, quoted or non-Latin answer was a reference/answer_mismatch (exact) however
    right, and the judge and the web view were shown the state as the answer."""
    assert _graph_run(text) == text


@pytest.mark.parametrize(("result", "said"), [
    ("ChatMessage(_role=<ChatRole.ASSISTANT: 'assistant'>, _content=[TextContent("
     "text='Sunny.\\nParis \u00e0 22 C.')])", "Sunny.\nParis \u00e0 22 C."),  # a repr
    (json.dumps({"state": {"reply": "\u0634\u0645\u0633\n"}}, ensure_ascii=False),
     "\u0634\u0645\u0633\n"),  # JSON keeping the characters past ASCII
])
def test_a_result_holds_its_answer_as_json_or_a_repr_escapes_it(result: str, said: str) -> None:
    assert _holds(result, said)


def test_a_result_of_genai_messages_stays_the_result_its_messages_are_read_from() -> None:
    """A run's output recorded as GenAI messages holds the reply escaped too: it stays the
    result, so the record keeps both the reply's text and its ``output_messages``."""
    said = "Booked.\n- HAT136"
    result = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": said}]}])
    assert not _holds(result, said)


def _said(parts: list[dict] | None, finish: str | None = "stop") -> dict:
    msg: dict = {"role": "assistant"}
    if parts is not None:
        msg["parts"] = parts
    if finish is not None:
        msg["finish_reason"] = finish
    return msg


@pytest.mark.parametrize(("reply", "output", "no_output"), [
    (_said([{"type": "text", "content": ""}]), "", True),
    (_said([{"type": "text", "content": " \n\t"}]), "", True),  # blanks only: nothing said
    (_said([]), "", True),
    (_said(None), None, False),  # the reply's content not recorded: says nothing either way
    # an empty text without a stop may stand beside calls recorded elsewhere
    (_said([{"type": "text", "content": ""}], "tool_call"), None, False),
    (_said([{"type": "text", "content": ""}], None), None, False),
    (None, None, False),  # no output recorded
])
def test_a_run_whose_last_reply_said_nothing_answered_nothing(reply: dict | None,
                                                              output: str | None,
                                                              no_output: bool) -> None:
    """With no span recording the run's result, its answer is the last reply's text: "" when
    that reply said nothing (no text, or blanks only) and the model stopped there, which the
    non_termination detector reads as no output; unknown (None) when it may have said
    something no span recorded."""
    chat = {**CHAT, "gen_ai.input.messages": json.dumps(ASK)}
    if reply is not None:
        chat["gen_ai.output.messages"] = json.dumps([reply])
    t = build_trajectory(trace(span("root", None, 0, AGENT), span("llm", "root", 1, chat)), CFG)
    assert t.output == output
    findings, _ = Detectors(DetectorsConfig()).evaluate(t)
    found = {(f.detector, f.kind) for f in findings}
    assert (("non_termination", "no_output") in found) is no_output


# A chat turn's agent span that was given the earlier turns as history, as the GenAI
# conventions record an invoke_agent span's input ("the chat history provided", their example:
# a user message, the assistant's tool call, the tool's response), then this turn's request.
_AGENT_HISTORY = [_user("What is the weather in Paris?"),
                  {"role": "assistant", "parts": [
                      {"type": "tool_call", "id": "call_1", "name": "get_weather",
                       "arguments": {"location": "Paris"}}]},
                  {"role": "tool", "parts": [
                      {"type": "tool_call_response", "id": "call_1", "response": "rainy"}]},
                  *SAY, _user("And in London?")]


@pytest.mark.parametrize("recorded", ["json", "structured"])
def test_an_agent_given_the_earlier_turns_has_this_turn_s_request_as_task(
        recorded: str) -> None:
    """The run's task read from its agent span's input messages: before, the first user
    message there (the conversation's first turn's request, on every later turn: the
    session's ``repeated_request`` then found "the same request" in every turn), where the
    same history on its first LLM call gave this turn's."""
    history = json.dumps(_AGENT_HISTORY) if recorded == "json" else _AGENT_HISTORY
    body = _body(span("root", None, 0, {**AGENT, "gen_ai.input.messages": history,
                                        "gen_ai.output.messages": json.dumps(SAY)}),
                 span("chat", "root", 1, {**CHAT, "gen_ai.input.messages": history,
                                          "gen_ai.output.messages": json.dumps(SAY)}))
    assert body["input"] == "And in London?"
    assert body["input_messages"] == _AGENT_HISTORY  # as recorded
