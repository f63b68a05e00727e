"""``otel-eval eval --format jsonl``: session records after the trace records, for the
traces that carry a conversation id; traces without one print what they printed before."""

from __future__ import annotations

import io
import json
import time
import urllib.request
from pathlib import Path

import pytest
from conversations import call, scripted
from support.harness import running_service

from otel_eval.app.cli import build_parser, cmd_eval
from otel_eval.evaluate.predict import Predictor
from otel_eval.evaluate.predict.config import PredictionConfig
from otel_eval.evaluate.sessions.evaluate import in_turn_order
from otel_eval.evaluate.sessions.predict import session_prediction
from otel_eval.store.sessions import SessionQuery

SAME = {"reservation_id": "ZFA04Y"}


def _eval(*paths: Path) -> list[dict[str, object]]:
    out = io.StringIO()
    code = cmd_eval(build_parser().parse_args(["eval", *map(str, paths), "--format",
                                               "jsonl"]), out)
    assert code == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def _write(tmp_path: Path, name: str, turns: list[tuple[str, object]]) -> list[Path]:
    paths = []
    for number, (_, body) in enumerate(turns):
        paths.append(tmp_path / f"{name}-{number}.json")
        paths[-1].write_text(json.dumps(body))
    return paths


def test_session_records_follow_the_trace_records(tmp_path: Path) -> None:
    looping = scripted("offline-loop", "session.id", [
        (f"what is the status of my booking, question {n}",
         [call("get_reservation_details", SAME, f"c{n}"),
          {"role": "assistant", "content": "Confirmed."}]) for n in range(4)])
    alone = scripted("no-conversation", "unrelated.key", [
        ("what is the status of my booking", [{"role": "assistant", "content": "Fine."}])])
    paths = _write(tmp_path, "loop", looping) + _write(tmp_path, "alone", alone)
    lines = _eval(*paths)
    traces, sessions = lines[:5], lines[5:]
    assert all("record" not in t for t in traces)
    # the runs in the order they started, whatever the order of their files
    turns = [t for t in traces if "session_id" in t]
    (lone,) = [t for t in traces if "session_id" not in t]  # no conversation id: no key
    assert [t["session_id"] for t in turns] == ["offline-loop"] * 4
    [record] = sessions
    assert record["record"] == "session"
    assert (record["session_id"], record["status"], record["turns"]) == (
        "offline-loop", "complete", 4)
    assert record["traces"] == [trace_id for trace_id, _ in looping]
    assert [(f["detector"], f["kind"]) for f in record["findings"]] == [
        ("loop", "repeated_across_turns")]
    assert record["verdict"]["passed"] is False
    # p_success as serve's session job gives it: the model on the turns' whole objects
    predictor = Predictor.from_file(PredictionConfig().model_file)
    served = session_prediction(predictor, "offline-loop", in_turn_order(turns))
    assert record["prediction"] == served and 0 < served["p_success"] < 1
    # the trace without a conversation prints the same, with sessions or without
    [again] = _eval(*_write(tmp_path, "alone2", alone))
    assert {**again, "source": ""} == {**lone, "source": ""}


def test_budget_session_turns_from_the_command_line(tmp_path: Path) -> None:
    turns = scripted("offline-budget", "gen_ai.conversation.id", [
        (f"a different question, number {n}", [{"role": "assistant", "content": "Done."}])
        for n in range(3)])
    paths = [str(p) for p in _write(tmp_path, "budget", turns)]
    out = io.StringIO()
    args = build_parser().parse_args(["eval", *paths, "--format", "jsonl",
                                      "--budget", "session_turns=2", "--budget", "steps=9"])
    assert cmd_eval(args, out) == 0
    record = json.loads(out.getvalue().splitlines()[-1])
    assert [(f["detector"], f["kind"], f["attributes"]) for f in record["findings"]] == [
        ("budget", "session_turns", {"value": 3, "limit": 2})]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["eval", "x", "--budget", "session_turns=2.5"])


def test_trace_records_from_the_stored_text_name_the_conversation(tmp_path: Path) -> None:
    """``eval --format jsonl`` prints each trace from the text encoded once (``to_json_ascii``,
    issue 34): a turn's line carries its session_id and user_id, non-ASCII escaped as
    ``json.dumps`` escapes them, and the session record follows."""
    turns = scripted("réservation-7", "gen_ai.conversation.id", [
        (f"question {n}", [{"role": "assistant", "content": "Done."}]) for n in range(2)])
    for _, body in turns:
        root = body["resourceSpans"][0]["scopeSpans"][0]["spans"][-1]
        root["attributes"].append({"key": "user.id", "value": {"stringValue": "usér-1"}})
    out = io.StringIO()
    paths = [str(p) for p in _write(tmp_path, "text", turns)]
    assert cmd_eval(build_parser().parse_args(["eval", *paths, "--format", "jsonl"]), out) == 0
    lines = out.getvalue().splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r.get("record"), r["session_id"], r["user_id"]) for r in records] == [
        (None, "réservation-7", "usér-1")] * 2 + [("session", "réservation-7", "usér-1")]
    assert all(line == json.dumps(r) for line, r in zip(lines, records, strict=True))


def test_offline_sessions_are_per_service_too(tmp_path: Path) -> None:
    """Files of two services whose conversations share the id "1": two session records,
    as serve keeps them; the looping service's finding fails its own session only."""
    looping = scripted("1", "gen_ai.conversation.id", [
        (f"what is the status of my booking, question {n}",
         [call("get_reservation_details", SAME, f"c{n}"),
          {"role": "assistant", "content": "Confirmed."}]) for n in range(3)],
        service="other-team")
    clean = scripted("1", "gen_ai.conversation.id", [
        (f"please change my seat, request {n}", [{"role": "assistant", "content": "Done."}])
        for n in range(2)])
    lines = _eval(*_write(tmp_path, "loop", looping), *_write(tmp_path, "clean", clean))
    sessions = [line for line in lines if line.get("record") == "session"]
    assert [(s["session_id"], s["service"], s["turns"], s["verdict"]["passed"])
            for s in sessions] == [("1", "other-team", 3, False), ("1", "airline", 2, True)]
    assert sessions[1]["findings"] == []
    assert sessions[1]["traces"] == [trace_id for trace_id, _ in clean]


def _served_session(tmp_path: Path, bodies: list[dict[str, object]],
                    **changes: object) -> dict[str, object]:
    """The complete record serve's session job stores of these turns, sent over OTLP/HTTP
    one by one (each evaluated before the next is sent)."""
    with running_service(tmp_path, **changes) as h:
        for body in bodies:
            request = urllib.request.Request(
                h.http_url, data=json.dumps(body).encode(), method="POST",
                headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as r:
                assert r.status == 200
            h.release()
        assert h.svc.session_job.tick(time.time() + h.svc.config.sessions.idle_timeout_s
                                      + 1) == 1
        [record] = h.svc.sessions.page(SessionQuery())["sessions"]
    return dict(record)


@pytest.mark.parametrize(("setting", "value"), [("max_turns", 2), ("max_turns_chars", 1)])
def test_a_session_cut_to_its_bounds_is_the_one_serve_completes(
        tmp_path: Path, setting: str, value: int) -> None:
    """Past ``sessions.max_turns`` (``max_turns_chars``) serve's session job judges the
    newest turns: so does eval, its last turn (here a question back to the user) included."""
    turns = scripted("cut", "gen_ai.conversation.id", [
        (f"a different question, number {n}",
         [{"role": "assistant", "content": "Done?" if n == 2 else "Done."}]) for n in range(3)])
    config = tmp_path / "otel-eval.yaml"
    config.write_text(f"sessions:\n  {setting}: {value}\n")
    out = io.StringIO()
    args = build_parser().parse_args(["eval", *map(str, _write(tmp_path, "cut", turns)),
                                      "--format", "jsonl", "--config", str(config)])
    assert cmd_eval(args, out) == 0
    offline = json.loads(out.getvalue().splitlines()[-1])
    served = _served_session(tmp_path / "serve", [body for _, body in turns],
                             **{f"sessions.{setting}": value})
    compared = ("traces", "turns", "counts", "findings", "verdict", "cut_by", "prediction")
    assert {k: offline.get(k) for k in compared} == {k: served.get(k) for k in compared}
    assert offline["traces"][-1] == turns[-1][0]  # the last turn is judged
    assert [f["kind"] for f in offline["findings"]] == ["unanswered_question"]


@pytest.mark.parametrize(("setting", "value"), [("max_turns", 2), ("max_turns_chars", 1)])
def test_a_session_cut_to_its_bounds_keeps_its_newest_turns_by_start_whatever_the_order(
        tmp_path: Path, setting: str, value: int) -> None:
    """Serve's session job reads a session's newest turns by when each began (then trace
    id), not by when each was evaluated: eval kept the last ones it evaluated, so files given
    newest first (a directory listed in another order, a replay's export) judged the oldest
    turns offline and the newest in serve. Eval now keeps the same turns as serve."""
    turns = scripted("cut", "gen_ai.conversation.id", [
        (f"a different question, number {n}",
         [{"role": "assistant", "content": "Done?" if n == 2 else "Done."}]) for n in range(3)])
    config = tmp_path / "otel-eval.yaml"
    config.write_text(f"sessions:\n  {setting}: {value}\n")
    out = io.StringIO()
    newest_first = list(reversed(_write(tmp_path, "cut", turns)))
    args = build_parser().parse_args(["eval", *map(str, newest_first),
                                      "--format", "jsonl", "--config", str(config)])
    assert cmd_eval(args, out) == 0
    offline = json.loads(out.getvalue().splitlines()[-1])
    served = _served_session(tmp_path / "serve", [body for _, body in turns],
                             **{f"sessions.{setting}": value})
    compared = ("traces", "turns", "counts", "findings", "verdict", "cut_by", "prediction")
    assert {k: offline.get(k) for k in compared} == {k: served.get(k) for k in compared}
    assert offline["traces"][-1] == turns[-1][0]  # the last turn is judged
    assert [f["kind"] for f in offline["findings"]] == ["unanswered_question"]


def test_a_conversation_ended_with_a_call_pending_has_p_success_0(tmp_path: Path) -> None:
    """p_success means for a conversation what it means for a run (docs/prediction.md): 0
    when its last turn did not finish on its own terms. The session's own
    ``non_termination`` / ``pending_tool_call`` says so (its verdict fails on it), even where
    the turn alone carries no such finding; a polite closing question does not."""
    first = ("what is the status of my booking, please help",
             [call("get_reservation_details", SAME, "c1"),
              {"role": "assistant", "content": "Confirmed."}])
    pending = scripted("ends-pending", "session.id", [
        first, ("and can you also cancel the other booking now",
                [call("cancel_reservation", {"reservation_id": "XYZ123"}, "c2",
                      pending=True)])])
    *_, record = _eval(*_write(tmp_path, "pending", pending))
    assert [(f["kind"], f["severity"]) for f in record["findings"]] == [
        ("pending_tool_call", "error")]
    assert record["verdict"]["passed"] is False
    assert record["prediction"]["p_success"] == 0.0
    asks = scripted("ends-asking", "session.id", [
        first, ("and can you also cancel the other booking now",
                [{"role": "assistant", "content": "Which one, the one to Paris?"}])])
    *_, asked = _eval(*_write(tmp_path, "asks", asks))
    assert [f["kind"] for f in asked["findings"]] == ["unanswered_question"]
    assert asked["prediction"]["p_success"] > 0


@pytest.mark.parametrize("table", [False, True])
def test_fail_on_trips_on_a_conversation_whose_session_failed(
        tmp_path: Path, table: bool, capsys: pytest.CaptureFixture[str]) -> None:
    """``--fail-on`` reads the session records ``eval`` makes as well as the traces: a
    conversation that loops across its turns (each turn passing) trips ``loop`` and
    ``failed``, whatever ``--format``; a detector it has no finding of does not."""
    looping = scripted("gate-loop", "session.id", [
        (f"what is the status of my booking, question {n}",
         [call("get_reservation_details", SAME, f"c{n}"),
          {"role": "assistant", "content": "Confirmed."}]) for n in range(3)])
    paths = [str(p) for p in _write(tmp_path, "gate", looping)]
    fmt = ["--format", "table"] if table else ["--format", "jsonl"]

    def code(*gate: str) -> int:
        return cmd_eval(build_parser().parse_args(["eval", *paths, *fmt, *gate]), io.StringIO())

    assert code() == 0
    assert code("--fail-on", "budget") == 0
    capsys.readouterr()
    assert code("--fail-on", "loop") == 3
    err = capsys.readouterr().err
    assert "--fail-on: 1 conversation(s) tripped it (loop: 1)" in err, err
    assert "trace(s) tripped it" not in err  # each turn passed
    assert code("--fail-on", "failed") == 3
    assert "1 conversation(s) tripped it (failed: 1)" in capsys.readouterr().err


def test_fail_on_names_the_session_detectors_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--fail-on`` gates on session findings, but took only the trace detectors' names:
    ``repeated_request`` (a session detector, docs/sessions.md) was a usage error (exit 2).
    Now a conversation whose user asked the same thing again trips it, a warning: not
    ``failed``."""
    asked = scripted("gate-asked", "session.id", [
        ("please cancel my reservation ZFA04Y now",
         [{"role": "assistant", "content": "Done."}]) for _ in range(2)])
    paths = [str(p) for p in _write(tmp_path, "asked", asked)]

    def code(*gate: str) -> int:
        return cmd_eval(build_parser().parse_args(["eval", *paths, "--format", "jsonl", *gate]),
                        io.StringIO())

    assert code("--fail-on", "failed") == 0
    capsys.readouterr()
    assert code("--fail-on", "repeated_request") == 3
    assert "1 conversation(s) tripped it (repeated_request: 1)" in capsys.readouterr().err
