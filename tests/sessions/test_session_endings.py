"""How a conversation ends (``non_termination``): a tool call pending in the last turn, or
the agent's own question left unanswered; table-driven over stored turns (v1 objects), and
the same findings from the slim turns ``eval`` keeps as from the stored ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conversations import call, scripted
from test_session_detectors import CASES, evaluated

from otel_eval.app.config import Config
from otel_eval.base.model import Trace
from otel_eval.decode.otlp import decode_request
from otel_eval.decode.otlp_json import request_from_json
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.predict import Predictor
from otel_eval.evaluate.predict.config import PredictionConfig
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.evaluate import evaluate_session
from otel_eval.evaluate.sessions.job import SessionJob
from otel_eval.evaluate.sessions.offline import slim
from otel_eval.evaluate.sessions.reader import SessionReader
from otel_eval.store import open_store
from otel_eval.telemetry.metrics import Metrics


def _llm(index: int, answer: str | None = None, calls: list[dict[str, Any]] | None = None,
         ) -> dict[str, Any]:
    return {"index": index, "kind": "llm", "answer": answer, "tool_calls": calls}


def _call(outcome: str | None, call_id: str = "c1") -> dict[str, Any]:
    return {"name": "update_seat", "arguments": {"seat": "12A"}, "call_id": call_id,
            "outcome": outcome}


def _tool(index: int, call_id: str, result: str | None) -> dict[str, Any]:
    return {"index": index, "kind": "tool", "tool_name": "update_seat", "call_id": call_id,
            "result": result}


def _turn(n: int, steps: list[dict[str, Any]], output: str | None) -> dict[str, Any]:
    return {"trace_id": f"{n:032x}", "start_time_unix_nano": n + 1, "input": f"request {n}",
            "output": output, "steps": steps, "verdict": {"passed": True, "reasons": []}}


def _ending(steps: list[dict[str, Any]], output: str | None) -> list[dict[str, Any]]:
    return [_turn(0, [_llm(0, "Hello.")], "Hello."), _turn(1, steps, output)]


def _cut(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last turn's trace released ``truncated``."""
    return [*turns[:-1], {**turns[-1], "status": "truncated"}]


ENDINGS: list[tuple[str, list[dict[str, Any]], str, list[str]]] = [
    ("a call that never ran", _ending([_llm(0, None, [_call("never_ran")])], None),
     "complete", ["pending_tool_call"]),
    ("a call rebuilt from the output, no result", _ending(
        [_llm(0, None, [_call("rebuilt")]), _tool(1, "c1", None)], None), "complete",
     ["pending_tool_call"]),
    ("a rebuilt call whose result came back ran", _ending(
        [_llm(0, None, [_call("rebuilt")]), _tool(1, "c1", "seat changed")], "Done."),
     "complete", []),
    ("a call of unknown outcome is no finding", _ending([_llm(0, None, [_call(None)])], None),
     "complete", []),
    ("a call that ran", _ending([_llm(0, None, [_call("ran")]), _tool(1, "c1", "ok"),
                                 _llm(2, "Done.")], "Done."), "complete", []),
    ("a pending call before the last LLM call is no ending", _ending(
        [_llm(0, None, [_call("never_ran")]), _llm(1, "I could not change it.")],
        "I could not change it."), "complete", []),
    ("a pending call in an earlier turn", [
        _turn(0, [_llm(0, None, [_call("never_ran")])], None),
        _turn(1, [_llm(0, "Done.")], "Done.")], "complete", []),
    ("the agent's question", _ending([_llm(0, "Which passenger?")], "Which passenger?"),
     "complete", ["unanswered_question"]),
    ("a question in bold", _ending([_llm(0, "x")], "Shall I go ahead? **Please confirm?**"),
     "complete", ["unanswered_question"]),
    ("a quoted question", _ending([_llm(0, "x")], "“Which passenger?”\n"), "complete",
     ["unanswered_question"]),
    ("a question in Chinese", _ending([_llm(0, "x")], "您想改签到哪一天\uff1f"), "complete",
     ["unanswered_question"]),
    ("a quoted question in Japanese", _ending([_llm(0, "x")], "「どの便に変更しますか\uff1f」"),
     "complete", ["unanswered_question"]),
    ("a question in Arabic", _ending([_llm(0, "x")], "\u0645\u0627 \u0631\u0642\u0645 "
                                     "\u0627\u0644\u062d\u062c\u0632\u061f"),
     "complete", ["unanswered_question"]),
    ("a statement in Chinese", _ending([_llm(0, "x")], "已为您改签到明天。"), "complete", []),
    ("a question, then a statement", _ending([_llm(0, "x")], "Anything else? Have a good day."),
     "complete", []),
    ("no answer on the root: the last LLM call's", _ending([_llm(0, "Which seat?")], None),
     "complete", ["unanswered_question"]),
    ("an open conversation may go on", _ending([_llm(0, None, [_call("never_ran")])], None),
     "open", []),
    # the last turn's trace cut while its run went on (truncated): the call may have run
    # after the cut, and the LLM call it ends with is not the run's last
    ("a call past the cut of a truncated last turn", _cut(_ending(
        [_llm(0, None, [_call("never_ran")])], None)), "complete", []),
    ("a question of the LLM call a truncated turn ends with", _cut(_ending(
        [_llm(0, "Which seat?")], None)), "complete", []),
    ("a truncated turn's recorded output is read", _cut(_ending(
        [_llm(0, "x")], "Which passenger?")), "complete", ["unanswered_question"]),
]


@pytest.mark.parametrize(("name", "turns", "status", "expected"), ENDINGS,
                         ids=[e[0] for e in ENDINGS])
def test_how_a_conversation_ends(name: str, turns: list[dict[str, Any]], status: str,
                                 expected: list[str]) -> None:
    record = evaluate_session("s", turns, SessionsConfig(), status)
    found = [f for f in record["findings"] if f["detector"] == "non_termination"]
    assert [f["kind"] for f in found] == expected
    for f in found:
        assert f["trace_id"] == turns[-1]["trace_id"]  # on the last turn
    if expected == ["pending_tool_call"]:
        assert found[0]["step"] == 0 and found[0]["attributes"]["tools"] == ["update_seat"]
        assert record["verdict"]["passed"] is False


@pytest.mark.parametrize(("name", "turns", "status", "expected"), CASES,
                         ids=[c[0] for c in CASES])
def test_slim_turns_give_the_stored_turns_findings(
        name: str, turns: list[Any], status: str, expected: set[tuple[str, str]]) -> None:
    stored = evaluated(scripted("conv-" + name, "gen_ai.conversation.id", turns))
    full = evaluate_session("c", stored, SessionsConfig(session_steps=1), status)
    kept = evaluate_session("c", [slim(s) for s in stored], SessionsConfig(session_steps=1),
                            status)
    assert kept["findings"] == full["findings"] and kept["counts"] == full["counts"]


def test_a_pending_call_at_the_end_of_a_replayed_turn() -> None:
    """As the service stores it: the last turn's model asked for a tool no span ran."""
    stored = evaluated(scripted("pending", "gen_ai.conversation.id", [
        ("what is the status of my booking ZFA04Y", [
            call("get_reservation_details", {"reservation_id": "ZFA04Y"}, "c0"),
            {"role": "assistant", "content": "It is confirmed."}]),
        ("then change my seat to 12A please", [call("update_seat", {"seat": "12A"}, "c1",
                                                    pending=True)])]))
    record = evaluate_session("pending", stored, SessionsConfig(), "complete")
    assert [(f["kind"], f["trace_id"]) for f in record["findings"]] == [
        ("pending_tool_call", stored[-1]["trace_id"])]


def test_the_session_job_gives_a_conversation_ended_pending_p_success_0(
        tmp_path: Path) -> None:
    """serve's session job: a conversation whose last turn ended with a call pending (the
    session's ``pending_tool_call``) did not finish on its own terms: p_success 0, as a run's
    (docs/prediction.md), though the turn alone carries no such finding."""
    evaluator = Evaluator(Config())
    store = open_store(str(tmp_path / "s.db"))
    for n, (trace_id, body) in enumerate(scripted("pending-job", "gen_ai.conversation.id", [
            ("what is the status of my booking ZFA04Y", [
                call("get_reservation_details", {"reservation_id": "ZFA04Y"}, "c0"),
                {"role": "assistant", "content": "It is confirmed."}]),
            ("then change my seat to 12A please", [call("update_seat", {"seat": "12A"}, "c1",
                                                        pending=True)])])):
        spans = decode_request(request_from_json(json.dumps(body))).spans
        ev = evaluator.evaluate(Trace(trace_id, spans, "complete"))
        assert ev is not None
        ev.evaluated_at_ns = (1_764_547_200 + n) * 10**9
        store.put_many([ev])
    predictor = Predictor.from_file(PredictionConfig().model_file)
    job = SessionJob(store, SessionsConfig(idle_timeout_s=60.0), Metrics(),
                     predictor=predictor, clock=lambda: 1_764_547_200 + 3600.0)
    assert job.tick() == 1
    record = SessionReader(store, job.config).get("pending-job")
    assert record is not None and record["status"] == "complete"
    assert [f["kind"] for f in record["findings"]] == ["pending_tool_call"]
    assert record["prediction"]["p_success"] == 0.0
    store.close()


def test_eval_keeps_a_turns_status_so_a_cut_last_turn_is_read_as_cut() -> None:
    """``eval`` keeps slim turns (``offline.slim``): without the status, a truncated last
    turn's pending call was a ``pending_tool_call`` there and not in ``serve``."""
    turns = _cut(_ending([_llm(0, None, [_call("never_ran")])], None))
    kept = evaluate_session("s", [slim(t) for t in turns], SessionsConfig(), "complete")
    assert kept["findings"] == evaluate_session("s", turns, SessionsConfig(),
                                                "complete")["findings"] == []
