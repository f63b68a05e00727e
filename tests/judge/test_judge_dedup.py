"""Prompt de-duplication: an LLM input shows only text not shown before, also when the agent
re-sends earlier text rewrapped (smolagents' [FACTS LIST] / [PLAN] / Observation / Calling
tools), while new text, however short, is kept; tool arguments equal to the call shown."""

from __future__ import annotations

import json

from judge_fixtures import evaluation

from otel_eval.evaluate.judge.compact import (
    REPEATED,
    Message,
    MessageLog,
    normalize,
    parse_messages,
)
from otel_eval.evaluate.judge.config import CompactionConfig
from otel_eval.evaluate.judge.render import render

FACTS = ("### 1. Facts given in the task\n"
         "- The fish is the clownfish popularized by Finding Nemo.\n"
         "- The answer must be five-digit zip codes, comma separated.")


def _user(content: str) -> list[Message]:
    return parse_messages(json.dumps([{"role": "user", "content": content}]))


def test_rewrapped_output_is_dropped_and_new_text_kept() -> None:
    log = MessageLog()
    log.mark([Message("assistant", FACTS)])  # the planning call's output
    rewrapped = (f"[FACTS LIST]:\nHere are the facts that I know so far:\n```\n{FACTS}\n```\n"
                 "Now find the USGS record of nonnative occurrences before 2020.")
    (msg,) = log.new(_user(rewrapped))
    assert "clownfish" not in msg.content and "zip codes" not in msg.content
    assert msg.content.splitlines() == [REPEATED,
                                        "Now find the USGS record of nonnative occurrences "
                                        "before 2020."]


def test_whitespace_and_wrappers_do_not_make_text_new() -> None:
    log = MessageLog()
    log.mark([Message("tool", "Last output from code snippet:\nclownfish in   Florida, 1998")])
    assert log.new(_user("Observation:\n  clownfish in Florida, 1998  \n")) == []
    assert normalize("[PLAN]:   1. Search  USGS <end_code>") == "1. Search USGS"


def test_short_new_answers_and_unseen_messages_are_kept_whole() -> None:
    log = MessageLog()
    log.mark([Message("assistant", "Could you please confirm the booking details?")])
    assert [m.content for m in log.new(_user("Yes"))] == ["Yes"]
    fresh = "A message never shown before.\nWith a second line."
    assert [m.content for m in log.new(_user(fresh))] == [fresh]


def test_repeated_template_shown_once() -> None:
    template = ("You are a world expert at making efficient plans to solve any task.\n"
                "Do not skip steps, do not add any superfluous steps.\n")
    log = MessageLog()
    first = log.new(_user(template + "Task: find the zip code of Key Biscayne"))
    second = log.new(_user(template + "Task: find the species name of Nemo"))
    assert "world expert" in first[0].content
    assert second[0].content.splitlines() == [REPEATED, "Task: find the species name of Nemo"]


def test_calling_tools_repr_of_shown_code_is_dropped() -> None:
    log = MessageLog()
    log.mark([Message("assistant", 'Code:\n```py\nresult = search("USGS clownfish")\n'
                                   'print(result)\n```<end_code>')])
    calls = [{"id": "call_2", "type": "function", "function": {
        "name": "python_interpreter", "arguments": 'result = search("USGS clownfish")\n'
                                                   'print(result)'}}]
    assert log.new(_user(f"Calling tools:\n{calls!r}")) == []
    other = [{"id": "call_3", "type": "function", "function": {
        "name": "python_interpreter", "arguments": 'final_answer("33149")'}}]
    assert log.new(_user(f"Calling tools:\n{other!r}")) != []


def test_a_calling_tools_line_past_its_bound_is_compared_whole() -> None:
    """A 5 MB repr took 2.7 s and 865 MB to parse: past 50,000 characters the line is one
    line, a repeat only when shown whole before."""
    args = "x = 1\n" * 10_000
    calls = [{"id": "call_2", "type": "function", "function": {
        "name": "python_interpreter", "arguments": args}}]
    line = f"Calling tools:\n{calls!r}"
    assert len(line) > 50_000
    log = MessageLog()
    log.mark([Message("assistant", args)])
    assert log.new(_user(line)) != []  # its arguments were shown, but it is not read
    assert log.new(_user(line)) == []  # the line itself, seen once, is a repeat


def test_tool_arguments_equal_to_the_call_are_not_repeated() -> None:
    text = render(evaluation(), CompactionConfig()).trajectory
    assert 'calls: get_reservation({"id": "ABC123"})' in text
    assert "tool get_reservation args: (as called)" in text


def test_the_judge_and_the_detectors_read_arguments_in_one_canonical_form() -> None:
    # a tool step's arguments equal the call's in the detectors' canonical form (whitespace
    # in strings collapsed, 2.0 as 2): the judge's prompt says so too, never shows them twice
    from otel_eval.base.steps import Step
    from otel_eval.evaluate.detectors.canonical import canonical_arguments
    from otel_eval.evaluate.judge.render import _Renderer

    called, ran = {"city": "Paris  France", "days": 2}, {"days": 2.0, "city": "Paris France"}
    assert canonical_arguments(called) == canonical_arguments(ran)
    calls = [{"id": "c1", "type": "function",
              "function": {"name": "weather", "arguments": json.dumps(called)}}]
    llm = Step(index=0, span_id="s0", parent_span_id=None, kind="llm", name="chat",
               output_text=json.dumps([{"role": "assistant", "content": "",
                                        "tool_calls": calls}]))
    tool = Step(index=1, span_id="s1", parent_span_id=None, kind="tool", name="weather",
                tool_name="weather", arguments=ran)
    renderer = _Renderer(CompactionConfig())
    renderer.llm(llm)
    assert "args: (as called)" in "\n".join(map(str, renderer.tool(tool)))


def test_input_prompts_cut_shorter_than_outputs() -> None:
    from otel_eval.base.steps import Step
    from otel_eval.evaluate.judge.render import _Renderer

    prompt, answer = "template line. " * 200, "answer line. " * 120  # 3000 and 1560 chars
    step = Step(index=1, span_id="s1", parent_span_id=None, kind="llm", name="chat",
                input_text=json.dumps([{"role": "user", "content": prompt}]),
                output_text=json.dumps([{"role": "assistant", "content": answer}]))
    text = "\n".join(map(str, _Renderer(CompactionConfig()).llm(step)))
    assert "[... 2040 chars trimmed ...]" in text  # the prompt, cut to 1000
    assert answer.strip() in text  # the output, under its 2000 limit
