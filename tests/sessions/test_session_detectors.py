"""Session detectors across the turns of one conversation (table-driven), on turns evaluated
as the service evaluates them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conversations import Message, call, scripted

from otel_eval.app.config import Config
from otel_eval.base.model import Span, Trace
from otel_eval.decode.otlp import decode_request
from otel_eval.decode.otlp_json import request_from_json
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.evaluate import evaluate_session

KEY = "gen_ai.conversation.id"


def evaluated(turns: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each turn's v1 evaluation object, as stored."""
    evaluator = Evaluator(Config())
    out = []
    for trace_id, body in turns:
        spans = decode_request(request_from_json(json.dumps(body))).spans
        ev = evaluator.evaluate(Trace(trace_id, spans, "complete"))
        assert ev is not None
        out.append(ev.to_json())
    return out


def _answer(text: str) -> Message:
    return {"role": "assistant", "content": text}


def _same_call_each_turn(arguments: list[dict[str, Any]]) -> list[tuple[str, list[Message]]]:
    return [(f"question number {n} about my booking please",
             [call("get_reservation_details", args, f"c{n}"), _answer("Here it is.")])
            for n, args in enumerate(arguments)]


SAME = {"reservation_id": "ZFA04Y"}
CASES: list[tuple[str, list[tuple[str, list[Message]]], str, set[tuple[str, str]]]] = [
    ("a call repeated in 4 turns", _same_call_each_turn([SAME] * 4), "complete",
     {("loop", "repeated_across_turns")}),
    ("the control: different arguments each turn",
     _same_call_each_turn([{"reservation_id": f"R{n}"} for n in range(4)]), "complete", set()),
    ("arguments equal once canonical (key order, spaces)",
     _same_call_each_turn([{"reservation_id": "ZFA04Y", "n": 1},
                           {"n": 1, "reservation_id": "ZFA04Y"},
                           {"n": 1.0, "reservation_id": " ZFA04Y "}]), "complete",
     {("loop", "repeated_across_turns")}),
    ("twice is no loop", _same_call_each_turn([SAME] * 2), "complete", set()),
    ("a call with no arguments in every turn (DSPy ReAct's finish) asks for the state now",
     _same_call_each_turn([{}] * 4), "complete", set()),
    ("the user repeats the request",
     [("I want to cancel my flight to Boston", [_answer("Which reservation?")]),
      ("i want to cancel  my flight to Boston!", [_answer("Done.")])], "complete",
     {("repeated_request", "same_request")}),
    ("short replies repeat freely",
     [("yes", [_answer("Booked.")]), ("yes", [_answer("Paid.")])], "complete", set()),
    ("ends with a tool call pending",
     [("change my seat to 12A on flight HAT001",
       [call("update_seat", {"seat": "12A"}, "c1", pending=True)])], "complete",
     {("non_termination", "pending_tool_call")}),
    ("ends with a handoff that ran (tau-bench's transfer_to_human_agents)",
     [("get me a human agent right now please",
       [call("transfer_to_human_agents", {"summary": "wants a human"}, "c1")])], "complete",
     set()),
    ("ends with the agent's question unanswered",
     [("change my seat to 12A on flight HAT001", [_answer("Which passenger?")])], "complete",
     {("non_termination", "unanswered_question")}),
    ("an open session is not judged ended",
     [("change my seat to 12A on flight HAT001", [_answer("Which passenger?")])], "open",
     set()),
]


@pytest.mark.parametrize(("name", "turns", "status", "expected"), CASES,
                         ids=[c[0] for c in CASES])
def test_session_findings(name: str, turns: list[tuple[str, list[Message]]], status: str,
                          expected: set[tuple[str, str]]) -> None:
    stored = evaluated(scripted("conv-" + name, KEY, turns))
    assert all(s["session_id"] == "conv-" + name for s in stored)
    record = evaluate_session("conv-" + name, stored[::-1], SessionsConfig(), status)
    assert {(f["detector"], f["kind"]) for f in record["findings"]} == expected
    assert record["traces"] == [s["trace_id"] for s in stored]  # turn order, whatever given
    assert record["turns"] == len(turns)


def test_arguments_cut_in_the_stored_turns_are_not_compared() -> None:
    """A turn's arguments past trajectory.max_value_bytes are stored as their start (full size
    in the step's ``truncated``): four writes of different files sharing their first 16 KiB
    were stored alike and read as the same call in 4 turns, a loop finding that failed the
    session. What the store cut is unknown whole, so it is not compared (the call of a turn
    whose arguments fit still is)."""
    head = "x" * 20_000
    writes = [(f"question number {n} about my file please",
               [call("write_file", {"path": "a.py", "content": head + str(n)}, f"c{n}"),
                _answer("Written.")]) for n in range(4)]
    stored = evaluated(scripted("conv-cut", KEY, writes))
    assert all("arguments" in s["steps"][2]["truncated"] for s in stored)
    record = evaluate_session("conv-cut", stored, SessionsConfig(), "complete")
    assert record["findings"] == [], record["findings"]


def test_a_session_loop_where_no_trace_loops() -> None:
    stored = evaluated(scripted("conv-loop", KEY, _same_call_each_turn([SAME] * 4)))
    assert not any(f["detector"] == "loop" for s in stored for f in s["findings"])
    record = evaluate_session("conv-loop", stored, SessionsConfig(), "complete")
    [loop] = record["findings"]
    assert (loop["trace_id"], loop["attributes"]["turns"]) == (stored[-1]["trace_id"],
                                                              [1, 2, 3, 4])
    assert stored[-1]["steps"][loop["step"]]["tool_name"] == "get_reservation_details"
    assert record["verdict"]["passed"] is False
    assert record["counts"]["findings"] == 1


@pytest.mark.parametrize(("states", "cut", "expected"), [
    (("queued", "running", "running", "succeeded"), None, []),
    (("queued", "running", "running", "succeeded"), 30, []),
    (("running", "running", "running", "running"), None, ["repeated_across_turns"]),
    (("running", "succeeded", "succeeded"), None, ["repeated_across_turns"]),
], ids=["changed_at_last", "cut_alike", "never_changed", "after_it_changed"])
def test_a_status_asked_for_in_each_turn_until_it_changed_is_no_session_loop(
        states: tuple[str, ...], cut: int | None, expected: list[str]) -> None:
    """The user asks each turn whether the job is done, and the agent checks its status: the
    same call in every turn, but the last turn's result differed from the turn's before, so
    no earlier turn had learned it (loop rule (a)'s poll, across turns); with the results cut
    alike at an attribute length limit before the status (values.cut_json), whether it
    changed is unknown: no finding either. The same call whose result never changed, or
    asked for again after it changed, is still a session loop."""
    turns = [(f"is my build job 42 done yet? asking for the {n}th time",
              [call("get_job_status", {"job_id": 42}, f"c{n}"), _answer("Not yet.")])
             for n in range(len(states))]
    stored = evaluated(scripted("conv-poll", KEY, turns))
    for turn, state in zip(stored, states, strict=True):
        (step,) = (s for s in turn["steps"] if s.get("tool_name") == "get_job_status")
        step["result"] = json.dumps({"job_id": 42, "owner": "ci", "status": state})[:cut]
    record = evaluate_session("conv-poll", stored, SessionsConfig(), "complete")
    assert [f["kind"] for f in record["findings"]] == expected


@pytest.mark.parametrize(("states", "tool_args", "expected"), [
    (("queued", "running", "succeeded"), {"job_id": 42}, []),
    (("queued", "running", "succeeded"), {}, []),
    (("running", "running", "running"), {"job_id": 42},
     [("loop", "repeated_across_turns"), ("repeated_request", "same_request")]),
    (("running", "running"), {}, [("repeated_request", "same_request")]),
    (("running", "succeeded", "succeeded"), {"job_id": 42},
     [("loop", "repeated_across_turns"), ("repeated_request", "same_request")]),
], ids=["changed_at_last", "changed_no_arguments", "never_changed", "no_arguments_same",
        "after_it_changed"])
def test_a_status_question_asked_each_turn_until_it_changed_is_no_repeated_request(
        states: tuple[str, ...], tool_args: dict[str, Any],
        expected: list[tuple[str, str]]) -> None:
    """The user asks the same "is it done yet?" each turn and the agent checks the job: the
    last turn's check returned another status than the turn's before, so the agent answered
    each time and the question was a poll, not a request it failed to help with (as the
    session loop's ``_changed``; a status call with no arguments counts here: it asks for
    the state now). Asked again with the same answer, or after it changed, it still
    repeats."""
    turns = [("is my build job 42 done yet? please check it for me",
              [call("get_job_status", tool_args, f"c{n}"), _answer("Here is its status.")])
             for n in range(len(states))]
    stored = evaluated(scripted("conv-ask", KEY, turns))
    for turn, state in zip(stored, states, strict=True):
        (step,) = (s for s in turn["steps"] if s.get("tool_name") == "get_job_status")
        step["result"] = json.dumps({"job_id": 42, "status": state})
    record = evaluate_session("conv-ask", stored, SessionsConfig(), "complete")
    assert [(f["detector"], f["kind"]) for f in record["findings"]] == expected


@pytest.mark.parametrize(("failed", "expected"), [
    ((True, True, False), []),
    ((True, True, True), ["repeated_across_turns"]),
    ((True, False, False), ["repeated_across_turns"]),
], ids=["succeeded_at_last", "never_succeeded", "after_it_succeeded"])
def test_a_call_retried_in_each_turn_until_it_succeeded_is_no_session_loop(
        failed: tuple[bool, ...], expected: list[str]) -> None:
    """The search fails on a rate limit (raised: its span failed, no result recorded) and
    the user asks the agent to try again in the next turn, until it succeeds: the last
    turn's outcome differed from the turn's before, as a status asked for until it changed
    (loop rule (a)'s poll, across turns), so no session loop. Failing in every turn, or
    made again after it succeeded, it is still one."""
    turns = [(f"please search the flights from SFO to JFK again, attempt {n}",
              [call("search_flights", {"origin": "SFO", "destination": "JFK"}, f"c{n}"),
               _answer("Here they are.")]) for n in range(len(failed))]
    stored = evaluated(scripted("conv-retry", KEY, turns))
    for turn, fail in zip(stored, failed, strict=True):
        (step,) = (s for s in turn["steps"] if s.get("tool_name") == "search_flights")
        if fail:
            step.update(result=None, status="error",
                        error="RateLimitError: 429 Too Many Requests")
        else:
            step["result"] = '[{"flight": "UA1"}, {"flight": "DL2"}]'
    record = evaluate_session("conv-retry", stored, SessionsConfig(), "complete")
    assert [f["kind"] for f in record["findings"]] == expected


def test_session_turns_budget_and_cut_turns() -> None:
    stored = evaluated(scripted("conv-b", KEY, _same_call_each_turn(
        [{"reservation_id": f"R{n}"} for n in range(3)])))
    config = SessionsConfig(session_turns=4)
    assert evaluate_session("conv-b", stored, config, "complete")["findings"] == []
    record = evaluate_session("conv-b", stored, config, "complete", total=5)
    assert [(f["detector"], f["kind"]) for f in record["findings"]] == [
        ("budget", "session_turns")]
    assert (record["turns"], record["counts"]["turns_read"], record["counts"]["turns_cut"]) == (
        5, 3, 2)



def _turn(trace_id: str, input_text: str, prompt: str | None) -> dict[str, Any]:
    """A stored turn whose input is ``input_text`` and whose first LLM call was sent
    ``prompt`` last."""
    steps = [{"index": 0, "kind": "agent"}]
    if prompt is not None:
        steps.append({"index": 1, "kind": "llm", "prompt": prompt})
    return {"trace_id": trace_id, "input": input_text, "steps": steps, "output": "Sunny."}


CREW_TEMPLATE = ("This is the expected criteria for your final answer: The weather.\nyou MUST "
                 "return the actual complete content as the final answer, not a summary.")
CONFIG_JSON = json.dumps({"agent": {"role": "weather_agent", "goal": "Answer questions about "
                                    "the weather.", "tools": ["get_weather"]}})


@pytest.mark.parametrize(("inputs", "prompts", "expected"), [
    # CrewAI: each turn's input is the agent's config, the same in every turn; the question
    # is what its first LLM call was sent, inside CrewAI's template: different questions are
    # no repeat, however alike the template makes them; the same one is
    ([CONFIG_JSON] * 3, [f"Current Task: {q}\n\n{CREW_TEMPLATE}" for q in (
        "What is the weather in Paris?", "And in London?", "And in Tokyo?")], []),
    ([CONFIG_JSON] * 2, [f"Current Task: And in London?\n\n{CREW_TEMPLATE}"] * 2, [[1, 2]]),
    # a document and no LLM call: the request is unknown, never compared
    ([CONFIG_JSON] * 2, [None, None], []),
    # words are the request, whatever the LLM was sent (a message may start with a brace)
    (["{x} is undefined in my template, why?"] * 2, ["a", "b"], [[1, 2]]),
    (["What is the weather in Paris?", "And in London, please?"], ["same"] * 2, []),
])
def test_the_request_of_a_turn_whose_input_is_a_document(
        inputs: list[str], prompts: list[str | None], expected: list[list[int]]) -> None:
    turns = [_turn(f"t{n}", text, prompt) for n, (text, prompt) in
             enumerate(zip(inputs, prompts, strict=True))]
    record = evaluate_session("conv-doc", turns, SessionsConfig(), "complete")
    assert [f["attributes"]["turns"] for f in record["findings"]
            if f["detector"] == "repeated_request"] == expected


LONG_TEMPLATE = "You are a travel agent. " * 60  # 1,440 characters before the user's words


@pytest.mark.parametrize(("questions", "expected"), [
    # the words come after a template longer than a request is otherwise read: still told apart
    (["What is the weather in Paris?", "What is the weather in Oslo?"], []),
    (["What is the weather in Paris?"] * 2, [[1, 2]]),
    # "yes" twice, inside the template: shorter than min_request_chars, as a message would be
    (["What is the weather in Paris?", "yes", "yes"], []),
    (["What is the weather in Paris?", "Will it rain in Oslo tomorrow?",
      "What is the weather in Paris?"], [[1, 3]]),
    # words every differing request shares are read as the template's: "paris" and "oslo"
    # are left, too short to compare (a repeat missed, never one made up)
    (["What is the weather in Paris?", "What is the weather in Oslo?",
      "What is the weather in Paris?"], []),
])
def test_a_prompted_request_is_the_users_words_inside_the_template(
        questions: list[str], expected: list[list[int]]) -> None:
    turns = [_turn(f"t{n}", CONFIG_JSON, f"{LONG_TEMPLATE}Current Task: {q}\n\n{CREW_TEMPLATE}")
             for n, q in enumerate(questions)]
    found = [f for f in evaluate_session("conv-t", turns, SessionsConfig(), "complete")["findings"]
             if f["detector"] == "repeated_request"]
    assert [f["attributes"]["turns"] for f in found] == expected
    if len(set(questions)) > 1:  # the words shown are the user's, not the template's
        assert all(not f["attributes"]["request"].startswith("you are") for f in found)


def _agent_turn(n: int, history: list[dict[str, Any]], reply: str) -> Trace:
    """Turn ``n`` of a conversation: its invoke_agent span given the earlier turns as
    history in ``gen_ai.input.messages`` (the GenAI conventions' shape), one chat call."""
    from otel_eval.base.model import Span
    trace_id = f"{n + 1:032x}"
    out = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": reply}],
                       "finish_reason": "stop"}])
    start = 1_764_547_200 * 10**9 + n * 60 * 10**9
    attrs = {"gen_ai.input.messages": json.dumps(history), "gen_ai.output.messages": out,
             KEY: "conv-1"}
    root = Span(trace_id, "a" * 16, None, "invoke_agent w", start, start + 10**9,
                attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "w",
                            **attrs})
    chat = Span(trace_id, "b" * 16, "a" * 16, "chat m", start + 1, start + 10**8,
                attributes={"gen_ai.operation.name": "chat",
                            "gen_ai.response.finish_reasons": ["stop"], **attrs})
    return Trace(trace_id, [root, chat], "complete")


def test_turns_whose_agent_is_given_the_earlier_turns_are_no_repeated_request() -> None:
    """Each turn's agent span carries the conversation so far as its input messages, this
    turn's request last: three different requests, no repeat. Before, every turn's request
    was read as the first one ("What is the weather in Paris today?") and the session found
    it repeated in all three."""
    questions = ["What is the weather in Paris today?", "And what about London tomorrow?",
                 "Should I take an umbrella to Tokyo?"]
    history: list[dict[str, Any]] = []
    turns = []
    evaluator = Evaluator(Config())
    for n, question in enumerate(questions):
        history = [*history, {"role": "user", "parts": [{"type": "text", "content": question}]}]
        ev = evaluator.evaluate(_agent_turn(n, history, f"answer {n}"))
        assert ev is not None
        turns.append(ev.to_json())
        history = [*history, {"role": "assistant",
                              "parts": [{"type": "text", "content": f"answer {n}"}]}]
    assert [t["input"] for t in turns] == questions
    record = evaluate_session("conv-1", turns, SessionsConfig(), "complete")
    assert not [f for f in record["findings"] if f["detector"] == "repeated_request"]


def _cut_call_turn(n: int, session: str) -> dict[str, Any]:
    """A turn whose one search the model asked for in OpenLLMetry's own attribute, its
    arguments cut at an attribute length limit of 48 characters before the city."""
    city = ("Paris", "London", "Tokyo", "Berlin")[n]
    tid = f"{n + 1:032x}"
    args = json.dumps({"query": f"what is the weather forecast for tomorrow in {city}"})[:48]
    root = Span(tid, "f" * 16, None, "agent", 0, 100, attributes={
        "traceloop.span.kind": "agent", "traceloop.entity.name": "a",
        "traceloop.association.properties.session_id": session})
    chat = Span(tid, "1" * 16, "f" * 16, "openai.chat", 10, 20, attributes={
        "llm.request.type": "chat", "gen_ai.system": "openai", "gen_ai.request.model": "m",
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.tool_calls.0.name": "search",
        "gen_ai.completion.0.tool_calls.0.id": "c1",
        "gen_ai.completion.0.tool_calls.0.arguments": args})
    ev = Evaluator(Config()).evaluate(Trace(tid, [root, chat], "complete"))
    assert ev is not None and ev.trajectory.session_id == session
    return ev.to_json()


def test_arguments_cut_at_a_length_limit_are_not_compared_across_turns() -> None:
    """Four turns asking the weather of four cities, their requests cut at an attribute
    length limit to the same start: the text of an object never closed is known only in part,
    never the same call in four turns."""
    stored = [_cut_call_turn(n, "conv-limit") for n in range(4)]
    assert len({json.dumps(s["steps"][2].get("arguments")) for s in stored}) == 1
    record = evaluate_session("conv-limit", stored, SessionsConfig(), "complete")
    assert not [f for f in record["findings"] if f["detector"] == "loop"], record["findings"]
