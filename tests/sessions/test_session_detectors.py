"""Session detectors across the turns of one conversation (table-driven), on turns evaluated
as the service evaluates them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conversations import Message, call, scripted

from otel_eval.app.config import Config
from otel_eval.base.model import Trace
from otel_eval.decode.otlp import decode_request, request_from_json
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

