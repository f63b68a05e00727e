"""Judge.judge end to end over litellm and the loopback server: modes, statuses, rubric cache,
redaction on the wire, observer, the judge object's shape."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from judge_fake_llm import FakeLLM, Reply, completion, good
from judge_fixtures import combined_reply, config, evaluation, step_reply, turns_reply
from support.clock import ManualClock

from otel_eval.base.results import Evaluation
from otel_eval.evaluate.judge import Judge, SqliteRubricCache
from otel_eval.evaluate.judge.config import CompactionConfig
from otel_eval.evaluate.judge.judge import FAILURE_LOG_INTERVAL_S
from otel_eval.evaluate.judge.rubric_cache import rubric_key
from otel_eval.evaluate.judge.session import render_session
from otel_eval.outputs.events import judge_records
from otel_eval.outputs.issues.critiques import extract

STEPS = [1, 3, 5]


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.scores: list[tuple[str, str, float]] = []
        self.skips: list[str] = []

    def call(self, judge: str, status: str, input_tokens: int, output_tokens: int,
             cost_usd: float, latency_s: float) -> None:
        self.calls.append((judge, status, input_tokens, output_tokens))

    def skip(self, reason: str) -> None:
        self.skips.append(reason)

    def score(self, judge: str, dimension: str, value: float) -> None:
        self.scores.append((judge, dimension, value))


def run(judge: Judge, ev: Evaluation) -> dict[str, Any]:
    return asyncio.run(judge.judge(ev))


def test_combined_mode_one_call_full_judge_object(llm: FakeLLM) -> None:
    llm.script(good(combined_reply(STEPS)))
    rec = Recorder()
    out = run(Judge(config(llm.api_base), observer=rec), evaluation())
    assert len(llm.requests) == 1
    j = out["judges"]
    assert set(j) == {"combined", "step", "process", "trace", "outcome"}
    assert j["combined"]["calls"] == 1 and j["combined"]["tokens"] == {"input": 1000,
                                                                       "output": 100}
    assert all(j[p]["via"] == "combined" and j[p]["status"] == "ok"
               for p in ("step", "process", "trace", "outcome"))
    steps = [c for c in j["step"]["critiques"]]
    assert [(c["step_index"], c["span_id"], c["node"]) for c in steps] == [
        (1, "b" * 16, "airline_agent"), (3, "d" * 16, "airline_agent"),
        (5, "f" * 16, "airline_agent")]
    assert j["step"]["scores"] == {"step": 0.8, "step_min": 0.8}
    assert j["step"]["by_node"] == {"airline_agent": 0.8}
    assert j["process"]["scores"]["result_verification"] == 0.2
    assert j["process"]["scores"]["process"] == 0.5  # (0.6 * 3 + 0.2) / 4 per turn
    assert j["process"]["turns"][0]["span_ids"] == ["b" * 16, "c" * 16]
    assert {c["dimension"] for c in j["process"]["critiques"]} == {
        "goal_alignment", "efficiency", "information_utilization", "result_verification"}
    assert j["trace"]["critiques"] == [{"dimension": "trace", "score": 0.7,
                                        "text": "Cancelled without confirmation.",
                                        "span_id": None, "node": None, "step_index": None}]
    assert out["overall"] == {"status": "ok", "process_score": 0.5, "outcome_score": 1.0,
                              "outcome_source": "judge", "passed": False, "lucky_pass": True,
                              "tau_task": 0.5, "tau_process": 0.6}
    assert out["totals"]["calls"] == 1 and out["totals"]["cost_usd"] > 0
    assert rec.calls == [("combined", "ok", 1000, 100)]
    assert ("process", "process", 0.5) in rec.scores
    json.dumps(out)  # the judge object is plain JSON


def test_text_leaving_the_process_is_redacted(llm: FakeLLM) -> None:
    llm.script(good(combined_reply(STEPS)))
    run(Judge(config(llm.api_base)), evaluation())
    wire = json.dumps(llm.requests[0]["messages"])
    assert "jane.doe@example.com" not in wire and "555 0132" not in wire
    assert "[EMAIL]" in wire and "[PHONE]" in wire


def test_a_secret_across_a_cut_is_redacted_whole(llm: FakeLLM) -> None:
    """Texts are redacted before they are cut: cut first, a key across the cut kept its end
    without its ``sk-proj-`` prefix, which no longer read as a key and reached the prompt."""
    secret = "Zq8Xw3Lm9Pt2Rv7Ks4Nd6Hj1Bf5Gc0Ya8Ue3Wi7Ox"
    ev = evaluation()
    ev.trajectory.steps[2].result = " ".join(["sk-proj-" + secret] * 120)  # cut: 5,880 chars
    judge = Judge(config(llm.api_base, compaction=CompactionConfig(view_share=0)))
    sent = "\n".join(m["content"] for r in judge.requests(ev) for m in r.messages)
    assert "chars trimmed" in sent and "[API_KEY]" in sent
    assert not [secret[i:i + 12] for i in range(len(secret) - 11) if secret[i:i + 12] in sent]


def test_an_address_across_a_cut_of_a_conversation_is_redacted_whole(llm: FakeLLM) -> None:
    """The same for a conversation's transcript (each text cut to its first 1,500): the
    cut kept "jane.doe@", no longer an address."""
    said = "x" * 1490 + " jane.doe@example.com " + "y" * 100  # the cut at 1,500 in it
    turns = [{"trace_id": "1" * 32, "input": said, "output": said, "steps": []}]
    rendered = render_session({"findings": []}, turns, Judge(config(llm.api_base)).redactor.redact)
    shown = rendered.task + rendered.trajectory + rendered.final_output
    assert "cut]" in shown and "[EMAIL]" in shown and "jane.doe" not in shown


def test_separate_mode_one_call_per_judge(llm: FakeLLM) -> None:
    llm.by_schema({"step_grade": good(step_reply(STEPS, 0.5)),
                   "process_grade": good(turns_reply(STEPS, 1.0)),
                   "trace_grade": good({"critique": "ok", "score": 0.9}),
                   "outcome_grade": good({"reasoning": "done", "score": 1.0})})
    out = run(Judge(config(llm.api_base, combined=False)), evaluation())
    assert len(llm.requests) == 4 and "combined" not in out["judges"]
    assert out["judges"]["step"]["scores"]["step"] == 0.5
    assert out["judges"]["process"]["scores"]["process"] == 0.8
    assert out["overall"]["passed"] is True and out["totals"]["calls"] == 4


def test_parse_error_gives_no_scores_and_says_why(llm: FakeLLM) -> None:
    llm.script(completion("I think it went well"), completion('{"steps": []}'))
    out = run(Judge(config(llm.api_base)), evaluation())
    assert len(llm.requests) == 2  # one repair retry, then give up
    for part in ("combined", "step", "process", "trace", "outcome"):
        assert out["judges"][part]["status"] == "parse_error"
        assert out["judges"][part]["scores"] == {}
    assert out["overall"]["status"] == "parse_error" and out["overall"]["passed"] is None


def test_incomplete_reply_is_repaired(llm: FakeLLM) -> None:
    partial = combined_reply([1, 3])
    llm.script(good(partial), good(combined_reply(STEPS)))
    out = run(Judge(config(llm.api_base)), evaluation())
    assert "missing step 5" in llm.requests[1]["messages"][-1]["content"]
    assert out["judges"]["combined"]["calls"] == 1 and out["overall"]["status"] == "ok"


def test_a_step_graded_twice_is_repaired(llm: FakeLLM) -> None:
    """Step 1 graded 0.0 and then 1.0 in one reply has no one grade (the last one stood):
    the reply goes back for repair, as one missing a step does."""
    twice = combined_reply(STEPS)
    twice["steps"].insert(0, {"step": 1, "critique": "step 1 is wrong", "score": 0.0})
    llm.script(good(twice), good(combined_reply(STEPS)))
    out = run(Judge(config(llm.api_base)), evaluation())
    assert "grades step 1 more than once" in llm.requests[1]["messages"][-1]["content"]
    assert out["judges"]["combined"]["calls"] == 1 and out["overall"]["status"] == "ok"


def test_a_lone_surrogate_in_a_reply_is_written_as_u_fffd(llm: FakeLLM) -> None:
    """A critique holding "\\ud800" (JSON can spell a lone surrogate) went to the store and
    the judge's OTLP events as it was, and the events' encoding raised on it (the run's judge
    events never sent)."""
    reply = combined_reply(STEPS)
    reply["trace"]["critique"] = "bad \ud800 text"
    llm.script(completion(json.dumps(reply)))
    out = run(Judge(config(llm.api_base)), evaluation())
    assert "bad \ufffd text" in [c["text"] for c in out["judges"]["trace"]["critiques"]]
    judge_records(Evaluation(evaluation().trajectory, judge=out), "a" * 16, "test", 1)


def test_known_outcome_label_skips_the_outcome_grader(llm: FakeLLM) -> None:
    llm.script(good(combined_reply(STEPS, outcome=False)))
    out = run(Judge(config(llm.api_base)), evaluation(outcome="failure"))
    schema = llm.requests[0]["response_format"]["json_schema"]["schema"]
    assert "outcome" not in schema["properties"]
    assert out["judges"]["outcome"]["status"] == "skipped"
    assert out["judges"]["outcome"]["reason"] == "outcome_label_known"
    assert (out["overall"]["outcome_score"], out["overall"]["outcome_source"]) == (0.0, "label")


def test_steps_are_chunked_and_chunks_after_the_first_carry_no_trace_part(
        llm: FakeLLM) -> None:
    def route(body: dict[str, Any]) -> Reply:
        text = body["messages"][1]["content"]
        if "steps 1, 3" in text:
            return good(combined_reply([1, 3]))
        return good({**step_reply([5]), **turns_reply([5])})

    llm.route = route
    out = run(Judge(config(llm.api_base, max_steps_per_call=2)), evaluation())
    assert len(llm.requests) == 2
    assert len(out["judges"]["step"]["critiques"]) == 3
    assert out["judges"]["combined"]["calls"] == 2 and out["overall"]["status"] == "ok"


def test_rubric_generated_once_per_task_and_cached_in_sqlite(llm: FakeLLM,
                                                             tmp_path: Path) -> None:
    criteria = {"criteria": [{"id": "c1", "criterion": "Cancels ABC123"},
                             {"id": "c2", "criterion": "Asks for confirmation first"}]}
    verdicts = {"results": [{"id": "c1", "reasoning": "step 3", "fulfilled": True},
                            {"id": "c2", "reasoning": "never asked", "fulfilled": False}]}
    llm.by_schema({"rubric_generate_grade": good(criteria),
                   "rubric_verify_grade": good(verdicts)})
    db = str(tmp_path / "store.db")
    judge = Judge(config(llm.api_base, enabled=("rubric",)), rubric_cache=SqliteRubricCache(db))
    first = run(judge, evaluation())["judges"]["rubric"]
    assert (first["cache"], first["scores"], first["calls"]) == ("miss", {"rubric": 0.5}, 2)
    assert first["critiques"][1]["text"] == "Asks for confirmation first: never asked"
    again = Judge(config(llm.api_base, enabled=("rubric",)), rubric_cache=SqliteRubricCache(db))
    second = run(again, evaluation(trace_id="9" * 32))["judges"]["rubric"]
    assert (second["cache"], second["calls"], len(llm.requests)) == ("hit", 1, 3)
    rows = sqlite3.connect(db).execute("SELECT key, model FROM judge_rubrics").fetchall()
    assert rows == [(rubric_key("airline-7", None, None, judge.rubric_writer),
                     "openai/gpt-4o-mini")]


def test_two_services_tasks_of_one_id_get_their_own_criteria(llm: FakeLLM,
                                                             tmp_path: Path) -> None:
    """Task ids are each team's own ("1", "refund-7"): two services on one otel-eval may use
    the same id for two different tasks. The rubric cache was keyed by the task id alone, so
    the second service's run was checked against criteria written for the first one's task
    (and its verdicts stored as its own)."""
    llm.by_schema({
        "rubric_generate_grade": good({"criteria": [{"id": "c1", "criterion": "Cancels"}]}),
        "rubric_verify_grade": good({"results": [{"id": "c1", "reasoning": "step 3",
                                                  "fulfilled": True}]})})
    judge = Judge(config(llm.api_base, enabled=("rubric",)),
                  rubric_cache=SqliteRubricCache(str(tmp_path / "store.db")))
    airline = evaluation(task_id="7")
    airline.trajectory.service = "airline"
    hotel = evaluation(task_id="7", trace_id="9" * 32)
    hotel.trajectory.service = "hotel"
    hotel.trajectory.input = "Book a room in Lisbon for two nights."
    assert run(judge, airline)["judges"]["rubric"]["cache"] == "miss"
    second = run(judge, hotel)["judges"]["rubric"]
    assert (second["cache"], second["calls"]) == ("miss", 2), second
    asked = [r for r in llm.requests
             if r["response_format"]["json_schema"]["name"] == "rubric_generate_grade"]
    assert len(asked) == 2 and "Lisbon" in asked[1]["messages"][-1]["content"]
    again = evaluation(task_id="7", trace_id="8" * 32)  # the same service's task: a hit
    again.trajectory.service = "airline"
    assert run(judge, again)["judges"]["rubric"]["cache"] == "hit"


def test_a_rubric_cache_that_cannot_be_written_costs_no_judgement(llm: FakeLLM,
                                                                  tmp_path: Path) -> None:
    """The cache is an economy: a write it refuses (a full disk, a read-only file) raised
    out of the judge, and the judgement whose calls were made and paid was stored skipped
    ``worker_error``, for every trace of a new task while the disk stayed full. Now the
    criteria are used, not kept, and the next trace of the task generates them again."""
    criteria = {"criteria": [{"id": "c1", "criterion": "Cancels ABC123"}]}
    verdicts = {"results": [{"id": "c1", "reasoning": "step 3", "fulfilled": True}]}
    llm.by_schema({"rubric_generate_grade": good(criteria),
                   "rubric_verify_grade": good(verdicts)})
    cache = SqliteRubricCache(str(tmp_path / "store.db"))
    cache._db.execute("PRAGMA query_only=ON")  # every write refused, as on a read-only file
    judge = Judge(config(llm.api_base, enabled=("rubric",)), rubric_cache=cache)
    first = run(judge, evaluation())["judges"]["rubric"]
    assert (first["cache"], first["scores"], first["calls"]) == ("miss", {"rubric": 1.0}, 2)
    cache._db.execute("PRAGMA query_only=OFF")  # space is back: kept from the next one on
    second = run(judge, evaluation(trace_id="9" * 32))["judges"]["rubric"]
    assert (second["cache"], second["scores"]) == ("miss", {"rubric": 1.0})
    assert run(judge, evaluation(trace_id="8" * 32))["judges"]["rubric"]["cache"] == "hit"


def test_disabled_without_model(llm: FakeLLM) -> None:
    out = run(Judge(config(llm.api_base, model="")), evaluation())
    assert out["overall"] == {"status": "disabled"} and llm.requests == []


def test_failed_call_status_reaches_overall(llm: FakeLLM) -> None:
    llm.script(Reply(500, {"error": {"message": "boom"}}))
    out = run(Judge(config(llm.api_base, max_retries=0)), evaluation())
    assert out["judges"]["trace"]["status"] == "error"
    assert out["overall"]["status"] == "error"


def test_a_judge_that_keeps_failing_is_one_log_line_per_interval(
        llm: FakeLLM, caplog: pytest.LogCaptureFixture) -> None:
    """A judge down (a provider outage, a wrong api_base) wrote a WARNING per failed call and
    an INFO line per retry: with every run judged, lines at the rate runs come, burying the
    rest of the log. Each call is still counted (otel_eval_judge_calls_total); the log says
    one of each, then, after ``FAILURE_LOG_INTERVAL_S``, how many it left out meanwhile."""
    llm.route = lambda body: Reply(500, {"error": {"message": "boom"}})
    clock = ManualClock()
    judge = Judge(config(llm.api_base, max_retries=1), clock=clock)
    with caplog.at_level(logging.INFO, logger="otel_eval.evaluate.judge"):
        for _ in range(5):
            assert run(judge, evaluation())["overall"]["status"] == "error"
        clock.advance(FAILURE_LOG_INTERVAL_S)
        run(judge, evaluation())
    failed = [r.getMessage() for r in caplog.records if " call: error" in r.getMessage()]
    retries = [r.getMessage() for r in caplog.records if ", retry 1 in" in r.getMessage()]
    assert len(failed) == 2 and failed[1].endswith(
        " (4 more failed judge calls not logged since the last)"), failed
    assert len(retries) == 2 and retries[1].endswith(
        " (4 more judge retries not logged since the last)"), retries


def test_a_reply_without_choices_still_sets_every_status(llm: FakeLLM) -> None:
    empty = completion("{}")
    empty.body["choices"] = []
    llm.script(empty)
    out = run(Judge(config(llm.api_base, max_retries=0)), evaluation())
    assert out["judges"]["combined"]["status"] == "parse_error"
    assert out["overall"]["status"] == "parse_error"


def test_a_failed_judges_critiques_reach_neither_the_events_nor_the_issues(
        llm: FakeLLM) -> None:
    """A step chunk graded before another chunk failed leaves its critiques in a judge whose
    status is a failure (no scores): the events send no grade of it, only the failure, and
    the issues job clusters none of its critiques (one rule, read by both)."""
    def route(body: dict[str, Any]) -> Reply:
        if "steps 1, 3" in body["messages"][1]["content"]:
            return good(step_reply([1, 3], score=0.1))
        return Reply(500, {"error": {"message": "boom"}})

    llm.route = route
    out = run(Judge(config(llm.api_base, enabled=("step", "trace"), combined=False,
                           max_steps_per_call=2, max_retries=0)), evaluation())
    step = out["judges"]["step"]
    assert (step["status"], step["scores"], len(step["critiques"])) == ("error", {}, 2)
    ev = Evaluation(evaluation().trajectory, judge=out)
    events = [{a.key: a.value.string_value for a in r.attributes} for r in
              judge_records(ev, "a" * 16, "test", 1)]
    step_events = [e for e in events if e["gen_ai.evaluation.name"].startswith("step")]
    assert [e.get("error.type") for e in step_events] == ["error"]
    critiques = extract([ev.to_json()], threshold=0.5).critiques
    assert [c.source for c in critiques if c.source == "judge:step"] == []


def test_cached_criteria_are_the_writers_own_model_and_prompt(llm: FakeLLM,
                                                              tmp_path: Path) -> None:
    """Cached criteria are reused only by the judge model and rubric prompt that wrote them.
    The cache kept the writing model but never read it back: after ``judge.model`` or
    ``rubric_generate.txt`` changed, runs were checked for up to ``rubric_ttl_days`` against
    criteria the old model or prompt wrote."""
    criteria = {"criteria": [{"id": "c1", "criterion": "Cancels ABC123"}]}
    verdicts = {"results": [{"id": "c1", "reasoning": "step 3", "fulfilled": True}]}
    llm.by_schema({"rubric_generate_grade": good(criteria),
                   "rubric_verify_grade": good(verdicts)})
    db = str(tmp_path / "store.db")
    prompts = tmp_path / "prompts"
    prompts.mkdir()

    def cache(judge_config: Any, trace_id: str) -> str:
        judge = Judge(judge_config, rubric_cache=SqliteRubricCache(db))
        return str(run(judge, evaluation(trace_id=trace_id))["judges"]["rubric"]["cache"])

    base = config(llm.api_base, enabled=("rubric",))
    assert cache(base, "1" * 32) == "miss"
    assert cache(base, "2" * 32) == "hit"
    other_model = config(llm.api_base, enabled=("rubric",), model="openai/gpt-4o")
    assert cache(other_model, "3" * 32) == "miss"
    assert cache(other_model, "4" * 32) == "hit"
    (prompts / "rubric_generate.txt").write_text(
        "List what a correct answer to this task must do.\n$task\n$reply", encoding="utf-8")
    own_prompt = config(llm.api_base, enabled=("rubric",), prompt_dir=str(prompts))
    assert cache(own_prompt, "5" * 32) == "miss"
    assert cache(own_prompt, "6" * 32) == "hit"
    assert cache(base, "7" * 32) == "hit"  # the packaged prompt's own are still valid
