"""Rebuilt calls' results found by id in later LLM inputs (``trajectory.responses``): the
local decode around the id and the full parse agree, whatever the shape of the input."""

from __future__ import annotations

import json
from typing import Any

import pytest

from otel_eval.base.steps import Step
from otel_eval.evaluate.trajectory import responses
from otel_eval.evaluate.trajectory.responses import LOOKAHEAD, ToolResponses


def llm(input_messages: Any, node: str | None = "a") -> Step:
    text = input_messages if isinstance(input_messages, str) else json.dumps(input_messages)
    return Step(0, "s", None, "llm", "chat", node=node, input_text=text)


def genai_response(call_id: str, response: Any) -> dict[str, Any]:
    return {"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id,
                                       "response": response}]}


def openai_call(call_id: str) -> dict[str, Any]:
    return {"role": "assistant", "tool_calls": [{"id": call_id, "type": "function",
                                                 "function": {"name": "f", "arguments": "{}"}}]}


HISTORY = [openai_call("c1"),
           {"content": "x { y", "role": "tool", "tool_call_id": "c1"},  # content first
           {"role": "assistant", "parts": [{"type": "tool_call", "id": "c2", "name": "g"}]},
           genai_response("c2", {"rows": [1, {"n": 2}]}),
           genai_response("c10", "ten"),
           {"role": "tool", "tool_call_id": 'we"ird\\id', "content": "escaped"}]
EXPECTED = {"c1": "x { y", "c2": '{"rows": [1, {"n": 2}]}', "c10": "ten",
            'we"ird\\id': "escaped", "c3": None}


@pytest.mark.parametrize("call_id", list(EXPECTED))
def test_local_decode_and_full_parse_agree(call_id: str) -> None:
    steps = [llm([]), llm(HISTORY)]
    first = ToolResponses(steps).result(0, "a", call_id)  # the local decode
    index = ToolResponses(steps)
    index.result(0, "a", "c10")  # one lookup into the input: the next one parses it in full
    assert first == index.result(0, "a", call_id) == EXPECTED[call_id]


def test_a_second_lookup_into_an_input_parses_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []
    real = responses._all_responses
    monkeypatch.setattr(responses, "_all_responses", lambda t: parsed.append(t) or real(t))
    index = ToolResponses([llm([]), llm(HISTORY)])
    assert [index.result(0, "a", c) for c in ("c1", "c2", "c10", "c1")] == [
        "x { y", '{"rows": [1, {"n": 2}]}', "ten", "x { y"]
    assert len(parsed) == 1


def test_only_later_steps_of_the_same_agent_within_the_lookahead() -> None:
    answer = [genai_response("c1", "yes")]
    filler = [llm([{"role": "user", "content": "no id here"}]) for _ in range(LOOKAHEAD)]
    assert ToolResponses([llm(answer), llm([])]).result(1, "a", "c1") is None  # earlier
    assert ToolResponses([llm([]), llm(answer, "b")]).result(0, "a", "c1") is None  # other
    assert ToolResponses([llm([]), *filler[1:], llm(answer)]).result(0, "a", "c1") == "yes"
    assert ToolResponses([llm([]), *filler, llm(answer)]).result(0, "a", "c1") is None


@pytest.mark.parametrize("text", ['{"tool_call_id": "c1"', '["c1", {"c1": ', '"c1"}}}',
                                  '{"messages": [{"tool_call_id": "c1", "content": 5}]}'])
def test_broken_or_odd_inputs(text: str) -> None:
    got = ToolResponses([llm([]), llm(text)]).result(0, "a", "c1")
    assert got == ("5" if text.startswith('{"messages"') else None)


def test_each_object_around_an_id_is_checked_on_its_own_text(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Checking each candidate object against the whole input scanned the input again per
    # object (quadratic in a long history); only the decoded object's own text is scanned.
    seen: list[int] = []
    real = responses.checked
    monkeypatch.setattr(responses, "checked", lambda v, t: seen.append(len(t)) or real(v, t))
    filler = [{"role": "user", "content": "[" * 80 + "x" * 10_000}] * 20
    steps = [llm([]), llm([*filler, openai_call("c1"), genai_response("c1", "done")])]
    assert ToolResponses(steps).result(0, "a", "c1") == "done"
    assert seen and max(seen) < 300



def test_a_reused_call_id_is_answered_by_its_latest_tool_message() -> None:
    """Runs that number calls per reply reuse ids (``call_0`` each turn): the input after
    the second call holds the first call's answer too, and the second call got the first's
    (``running`` twice: a no-progress loop where the job had finished)."""
    history = [openai_call("call_0"), {"role": "tool", "tool_call_id": "call_0",
                                       "content": "running"},
               openai_call("call_0"), genai_response("call_0", "done")]
    index = ToolResponses([llm([]), llm(history[:2]), llm(history)])
    # the local decode into each input, then the full parse of the last one
    assert [index.result(0, "a", "call_0"), index.result(1, "a", "call_0"),
            index.result(1, "a", "call_0")] == ["running", "done", "done"]


class _Scanned(str):
    """An input that counts the characters its substring searches read."""

    read = 0

    def __contains__(self, needle: object) -> bool:
        _Scanned.read += len(self)
        return str.__contains__(self, needle)  # type: ignore[operator]

    def find(self, *args: Any) -> int:  # type: ignore[override]
        _Scanned.read += len(self)
        return str.find(self, *args)

    def rfind(self, *args: Any) -> int:  # type: ignore[override]
        _Scanned.read += len(self)
        return str.rfind(self, *args)


def test_many_lookups_into_one_input_read_it_a_bounded_number_of_times() -> None:
    """Thousands of result-less tool steps before one long LLM input each scanned all of it
    for their id (4,000 steps and a 4 MB input: 28 s); past a few scans the input's JSON
    strings are read once. A mentioned id is still found, an answered one still answered."""
    history = [{"role": "user", "content": "x" * 100_000}, openai_call("id_7"),
               genai_response("id_9", "nine")]
    text = _Scanned(json.dumps(history))
    steps = [llm([]), Step(0, "s", None, "llm", "chat", node="a", input_text=text),
             llm([genai_response("id_7", "late")])]
    index = ToolResponses(steps)
    _Scanned.read = 0
    got = [index.result(0, "a", f"id_{i}") for i in range(2_000)]
    assert got[9] == "nine" and got[7] is None  # mentioned there unanswered: not looked on
    assert [index.result(0, "a", c) for c in ("id_9", "id_7", "id_8")] == ["nine", None, None]
    assert _Scanned.read <= 10 * len(text)


# The result of a call in each API's shape of the input that follows it (the id in its key).
API_RESULTS = {
    "anthropic": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "sunny", "is_error": False}]}],
    "anthropic_blocks": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1",
         "content": [{"type": "text", "text": "sunny"}]}]}],
    "responses": [{"type": "function_call", "call_id": "t1", "name": "f", "arguments": "{}"},
                  {"type": "function_call_output", "call_id": "t1", "output": "sunny"}],
    "ai_sdk": [{"role": "tool", "content": [
        {"type": "tool-result", "toolCallId": "t1", "toolName": "f",
         "output": {"type": "text", "value": "sunny"}}]}],
    "bedrock": [{"role": "user", "content": [
        {"toolResult": {"toolUseId": "t1", "content": [{"text": "sunny"}]}}]}],
}


@pytest.mark.parametrize("api", list(API_RESULTS))
def test_a_result_is_found_in_each_apis_shape(api: str) -> None:
    """A call whose span is missing (sampled out, filtered) is rebuilt from the result the
    next LLM call was told: not taken for a call that never ran."""
    index = ToolResponses([llm([]), llm(API_RESULTS[api])])
    # the first lookup decodes around the id, the second parses the input in full
    assert index.answer(0, "a", "t1") == index.answer(0, "a", "t1") == ("sunny", False)


def test_an_error_flag_of_an_api_is_a_failed_result() -> None:
    anthropic = [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "no such city",
         "is_error": True}]}]
    bedrock = [{"role": "user", "content": [{"toolResult": {
        "toolUseId": "t1", "status": "error", "content": [{"text": "no such city"}]}}]}]
    for messages in (anthropic, bedrock):
        index = ToolResponses([llm([]), llm(messages)])
        assert index.answer(0, "a", "t1") == index.answer(0, "a", "t1") == (
            "no such city", True)
