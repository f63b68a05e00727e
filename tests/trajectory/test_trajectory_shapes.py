"""Tool results and LLM outputs in a shape no reader understands (a Python repr, printed model
fields, a LangChain serialized object) are unknown: ``Step.result`` / ``Step.output_text``
None with the reason in ``Step.unknown``, counted in ``unrecorded["unparsed"]``, and the rules
that compare results or outputs, or search a result for an error, conclude nothing from them
(``trajectory.shapes``). One test per rule, each a finding today's readers would draw.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from trajectory_factory import span, trace

from otel_eval.app.config import Config
from otel_eval.base.model import Span
from otel_eval.base.results import Evaluation
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.trajectory import build_trajectory
from otel_eval.evaluate.trajectory.shapes import unrecognised


@pytest.mark.parametrize("value", [
    "<generator object lookup at 0x7f3a2c1e4d90>",
    "  <__main__.Storage object at 0x782a3ef2c048>\n",
    "[<Document object at 0x7f00aa>, <Document object at 0x7f00bb>]",
    "CallToolResult(meta=None, content=[TextContent(type='text', text='sunny')], isError=False)",
    "mcp.types.CallToolResult(content=[], isError=False)",
    "Response()",
    "content='sunny, 22 C in Paris' name='get_weather' tool_call_id='call_1'",
    "error=None content=[TextContent(type='text', text='sunny')]",
    '{"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "ToolMessage"],'
    ' "kwargs": {"content": "sunny"}}',
])
def test_shapes_no_reader_understands(value: str) -> None:
    assert unrecognised(value) is not None


@pytest.mark.parametrize("value", [
    None, "", "sunny, 22 C in Paris", '"sunny, 22 C in Paris"', '{"result": "sunny"}',
    '[{"role": "assistant", "content": "It is sunny in Paris."}]',
    '{"id": "chatcmpl-1", "choices": [{"message": {"content": "hi"}}]}',
    "Error: unknown city: Atlantis",
    "final_answer(answer='It is sunny in Paris.')",  # code a model wrote: a call, not a repr
    "Paris (France) is sunny (22 C)",
    "x=1",  # one assignment is text
    # a command's output that prints a repr among other lines (mini-swe-agent's observation)
    "<returncode>0</returncode>\n<output>\n<object object at 0x7606ba418140>\n</output>",
    "Storage in kwargs: <__main__.MyStorage object at 0x782a3ef2c048>",
])
def test_text_json_and_messages_are_understood(value: str | None) -> None:
    assert unrecognised(value) is None


def test_the_tests_read_a_bounded_head() -> None:
    long = "A(" + "b=1, " * 200_000 + ")"  # 1 MB: read up to its head and its end
    assert unrecognised(long) is not None
    assert unrecognised("<" + "x" * 1_000_000 + " at 0x1>") is None  # too long to be one


def _tool(name: str, start: int, tool: str, args: dict[str, Any], result: str) -> Span:
    return span(name, "root", start, {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
        "gen_ai.tool.call.arguments": json.dumps(args), "gen_ai.tool.call.result": result})


def _evaluate(*spans: Span) -> Evaluation:
    root = span("root", None, 0, {"gen_ai.operation.name": "invoke_agent",
                                  "gen_ai.agent.name": "agent"}, end=1000)
    ev = Evaluator(Config()).evaluate(trace(root, *spans))
    assert ev is not None
    return ev


def _kinds(ev: Evaluation) -> list[str]:
    return [f"{f.detector}/{f.kind}" for f in ev.findings]


# CPython reuses an object's memory: two different generators print the same address
GENERATOR = "<generator object lookup at 0x7f3a2c1e4d90>"


def test_no_progress_does_not_compare_object_reprs() -> None:
    ev = _evaluate(_tool("a", 10, "lookup", {"id": "42"}, GENERATOR),
                   _tool("b", 20, "search", {"q": "x"}, "found one"),
                   _tool("c", 30, "lookup", {"id": "42"}, GENERATOR))
    assert "loop/no_progress" not in _kinds(ev)
    assert ev.trajectory.unrecorded.get("unparsed") == 2
    step = ev.trajectory.tool_steps[0]
    assert step.result is None and step.unknown["result"] == "unparsed: a Python object repr"


def test_reworded_repeats_do_not_compare_object_reprs() -> None:
    docs = "[<Document object at 0x7f3a2c1e4d90>, <Document object at 0x7f3a2c1e4e50>]"
    ev = _evaluate(_tool("a", 10, "search", {"q": "weather in Paris today"}, docs),
                   _tool("b", 20, "search", {"q": "weather in Paris now"}, docs),
                   _tool("c", 30, "search", {"q": "weather in Paris today?"}, docs))
    assert not [k for k in _kinds(ev) if k.startswith("loop/")], _kinds(ev)
    assert ev.trajectory.unrecorded.get("unparsed") == 3


def test_a_printed_result_is_not_searched_for_an_error() -> None:
    printed = "error=None content=[TextContent(type='text', text='sunny, 22 C in Paris')]"
    ev = _evaluate(_tool("a", 10, "get_weather", {"city": "Paris"}, printed))
    assert not [f for f in ev.findings if f.detector == "tool_call"], _kinds(ev)
    assert ev.trajectory.unrecorded.get("unparsed") == 1


def _completion(content: str) -> str:
    """An OpenAI SDK response object as ``str()`` prints it (a framework that did not
    serialise it): the model's words are a small part of the text."""
    return ("ChatCompletion(id='chatcmpl-Pkq3BzJy30bdmNbGk4arARzvi2a67', choices=[Choice("
            "finish_reason='stop', index=0, logprobs=None, message=ChatCompletionMessage("
            f"content='{content}', refusal=None, role='assistant', annotations=[], audio=None, "
            "function_call=None, tool_calls=None))], created=1796114415, "
            "model='gpt-4o-2024-08-06', "
            "object='chat.completion', service_tier='default', system_fingerprint='fp_07871e2ad8', "
            "usage=CompletionUsage(completion_tokens=12, prompt_tokens=85, total_tokens=97, "
            "completion_tokens_details=CompletionTokensDetails(accepted_prediction_tokens=0, "
            "audio_tokens=0, reasoning_tokens=0, rejected_prediction_tokens=0), "
            "prompt_tokens_details=PromptTokensDetails(audio_tokens=0, cached_tokens=0)))")


def _llm_spans(output: Any) -> list[Span]:
    return [span(f"llm{i}", "root", 10 * i + 10, {
        "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o",
        "input.value": f"question {i}",
        "output.value": output(f"The weather in {city} is sunny")})
        for i, city in enumerate(("Paris", "Rome", "Oslo"))]


def test_stagnation_does_not_compare_printed_llm_outputs() -> None:
    # three different answers: as text, a word in six differs (no stagnation); printed, the
    # boilerplate makes them near-identical
    assert "loop/stagnation" not in _kinds(_evaluate(*_llm_spans(lambda words: words)))
    ev = _evaluate(*_llm_spans(_completion))
    assert "loop/stagnation" not in _kinds(ev)
    llm = ev.trajectory.llm_steps
    assert [s.output_text for s in llm] == [None, None, None]
    assert llm[0].unknown["output_text"] == "unparsed: a Python repr of a ChatCompletion object"
    assert ev.trajectory.unrecorded.get("unparsed") == 3


def test_a_result_not_understood_on_the_span_is_read_where_the_llm_was_told_it() -> None:
    ask = json.dumps([{"role": "assistant", "parts": [
        {"type": "tool_call", "id": "call_1", "name": "get_weather",
         "arguments": {"city": "Paris"}}]}])
    told = json.dumps([{"role": "tool", "parts": [
        {"type": "tool_call_response", "id": "call_1", "response": "sunny, 22 C in Paris"}]}])
    llm = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
    root = span("root", None, 0, {"gen_ai.operation.name": "invoke_agent",
                                  "gen_ai.agent.name": "agent"}, end=1000)
    tool = span("tool", "root", 20, {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
        "gen_ai.tool.call.id": "call_1", "gen_ai.tool.call.arguments": '{"city": "Paris"}',
        "gen_ai.tool.call.result": "content='sunny, 22 C in Paris' tool_call_id='call_1'"})
    traj = build_trajectory(trace(
        root, span("llm1", "root", 10, {**llm, "gen_ai.output.messages": ask}), tool,
        span("llm2", "root", 30, {**llm, "gen_ai.input.messages": told})), TrajectoryConfig())
    step = traj.tool_steps[0]
    assert step.result == "sunny, 22 C in Paris"
    assert step.sources["result"] == "llm tool message"
    assert "result" not in step.unknown and "unparsed" not in traj.unrecorded


@pytest.mark.parametrize(("tokens", "known"), [
    ((0, 0), (None, None)),  # AutoGen's stream without usage: unknown, not a free call
    ((0, 14), (None, 14)),
    ((79, 0), (79, 0)),  # an empty reply: a count
    ((79, 42), (79, 42)),
])
def test_zero_input_tokens_are_no_count(tokens: tuple[int, int],
                                        known: tuple[int | None, int | None]) -> None:
    t = build_trajectory(trace(span("chat", None, 0, {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.usage.input_tokens": tokens[0], "gen_ai.usage.output_tokens": tokens[1]})),
        TrajectoryConfig())
    step = t.llm_steps[0]
    assert (step.input_tokens, step.output_tokens) == known
    assert ("input_tokens" in step.unknown) == (known[0] is None)
    # one side's count alone prices nothing: the other as 0 would be less than it cost
    assert (step.cost_usd is None) == (None in known)
