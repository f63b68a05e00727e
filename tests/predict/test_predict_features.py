"""Features: bounded under hostile tool names, judge scores only when they are the judge's, how
the run ends (end.*), and which features versions a model file may have."""

from __future__ import annotations

import math
import random
import re
from typing import Any

import pytest

from otel_eval.base.results import Evaluation, Finding
from otel_eval.base.steps import Step, Trajectory
from otel_eval.evaluate.predict import Predictor
from otel_eval.evaluate.predict.features import (
    _SAYS_FAILURE,
    _SAYS_SUCCESS,
    END_CHARS,
    END_REPLIES,
    MAX_TOOL_FEATURES,
    MAX_TOOL_NAME_CHARS,
    _programs,
    features,
)
from otel_eval.evaluate.predict.modelfile import from_document


def _evaluation(tools: list[str], judge: dict[str, Any] | None = None,
                findings: list[Finding] | None = None) -> Evaluation:
    steps = [Step(index=0, span_id="0" * 16, parent_span_id=None, kind="agent", name="run")]
    steps += [Step(index=i + 1, span_id=f"{i + 1:016x}", parent_span_id="0" * 16, kind="tool",
                   name=f"execute_tool {t}", tool_name=t, arguments={"i": i % 2})
              for i, t in enumerate(tools)]
    traj = Trajectory("ab" * 16, "otlp", "complete", steps, output="done")
    return Evaluation(traj, findings or [], judge=judge)


def test_hostile_tool_names_give_a_bounded_feature_set() -> None:
    got = features(_evaluation([f"{i}" + "x" * 1000 for i in range(500)]))
    tool = [k for k in got if k.startswith("tool.")]
    assert len(tool) == MAX_TOOL_FEATURES
    assert max(map(len, tool)) == len("tool.") + MAX_TOOL_NAME_CHARS


def test_repetition_and_tool_counts() -> None:
    got = features(_evaluation(["search"] * 4 + ["book"]))
    assert got["calls.distinct_ratio"] == pytest.approx(3 / 5)  # (search, i=0|1), (book, 0)
    assert got["tool.search"] > got["tool.book"] > 0
    assert got["output.present"] == 1.0 and got["last.is_tool"] == 1.0


def test_judge_scores_with_missing_indicators_and_never_a_label() -> None:
    none = features(_evaluation(["a"]))
    assert none["judge.process.process"] == 0.0 and none["judge.process.process.missing"] == 1.0
    judged = features(_evaluation(["a"], judge={
        "judges": {"process": {"scores": {"process": 0.75}}},
        "overall": {"outcome_score": 1.0, "outcome_source": "label"}}))
    assert judged["judge.process.process"] == 0.75
    assert judged["judge.process.process.missing"] == 0.0
    assert judged["judge.outcome.missing"] == 1.0  # the label, not the judge's estimate
    own = features(_evaluation(["a"], judge={
        "overall": {"outcome_score": 0.4, "outcome_source": "judge"}}))
    assert own["judge.outcome"] == 0.4 and own["judge.outcome.missing"] == 0.0


def test_outcome_and_reference_findings_are_not_features() -> None:
    got = features(_evaluation(["a"], findings=[
        Finding("lucky_pass", "lucky_pass", "warning", "x"),
        Finding("reference", "mismatch", "error", "x"),
        Finding("recovery", "unrecovered", "error", "x")]))
    assert [k for k in got if k.startswith("finding.")] == ["finding.recovery.gave_up"]
    assert got["findings.warning"] == 0.0


def test_clip_bounds_a_far_out_value() -> None:
    doc = {"format": "otel-eval-predictor", "format_version": 1, "name": "m", "version": "v",
           "features_version": 3, "features": ["steps"],
           "scaler": {"mean": [0.0], "scale": [1.0], "clip": 2.0}, "coefficients": [1.0],
           "intercept": 0.0, "calibration": {"method": "platt", "a": 1.0, "b": 0.0}}
    model = from_document(doc)
    assert model.p_success({"steps": 1e9}) == model.p_success({"steps": 2.0}) < 1.0
    with pytest.raises(ValueError, match=r"scaler\.clip: must be > 0"):
        from_document({**doc, "scaler": {**doc["scaler"], "clip": 0}})


@pytest.mark.parametrize(("command", "programs"), [
    ("cd /testbed && FOO=1 python -m pytest x.py | tail -20; /usr/bin/git diff",
     ["cd", "python", "tail", "git"]),
    ("cat <<'EOF' > /tmp/r.py\nimport os\nrm -rf /\nEOF\npython /tmp/r.py", ["cat", "python"]),
    ("grep -rn foo . || echo none", ["grep", "echo"]),
    ("", []),
])
def test_programs_of_a_shell_command(command: str, programs: list[str]) -> None:
    assert _programs(command) == programs


def test_shell_programs_are_features_and_bounded() -> None:
    ev = _evaluation(["bash"])
    ev.trajectory.steps[1].arguments = {"command": "python a.py && python b.py; ls"}
    got = features(ev)
    assert got["program.python"] > got["program.ls"] > 0
    ev.trajectory.steps[1].arguments = {"command": "; ".join(f"p{i}" for i in range(10_000))}
    assert len([k for k in features(ev) if k.startswith("program.")]) == MAX_TOOL_FEATURES


def _ending(said: list[str], tail: list[Step], output: str | None) -> dict[str, float]:
    steps = [Step(index=0, span_id="0" * 16, parent_span_id=None, kind="agent", name="run")]
    steps += [Step(index=i + 1, span_id=f"{i + 1:016x}", parent_span_id="0" * 16, kind="llm",
                   name="chat", answer=a) for i, a in enumerate(said)]
    for i, s in enumerate(tail, len(steps)):
        s.index, s.span_id, s.parent_span_id = i, f"{i:016x}", "0" * 16
        steps.append(s)
    got = features(Evaluation(Trajectory("ab" * 16, "otlp", "complete", steps, output=output),
                              []))
    return {k: v for k, v in got.items() if k.startswith("end.")}


def test_the_end_of_a_run_what_the_agent_says_and_does_last() -> None:
    failed = Step(index=0, span_id="", parent_span_id=None, kind="tool", name="t",
                  tool_name="t", status="error")
    ok = Step(index=0, span_id="", parent_span_id=None, kind="tool", name="t", tool_name="t")
    asks = _ending(["Let me look.", "Which flight do you mean?**"], [], None)
    assert asks["end.asks"] == 1.0 and asks["end.says_failure"] == 0.0
    # a question in Chinese or Japanese (fullwidth mark, corner quotes) or Arabic is one too
    for question in ("您想改签到哪一天\uff1f", "「どの便に変更しますか\uff1f」",
                     "\u0645\u0627 \u0631\u0642\u0645 \u0627\u0644\u062d\u062c\u0632\u061f"):
        assert _ending([question], [], None)["end.asks"] == 1.0, question
    assert _ending(["已为您改签到明天。"], [], None)["end.asks"] == 0.0
    gave_up = _ending(["I'm sorry, I am unable to cancel it.",
                       "Unfortunately that failed."], [failed, ok, ok],
                      "I cannot do this. The booking has been kept.")
    assert gave_up["end.asks"] == 0.0
    # sorry, unable, unfortunately, failed, cannot; has been
    assert gave_up["end.says_failure"] == pytest.approx(math.log1p(5))
    assert gave_up["end.says_success"] == pytest.approx(math.log1p(1))
    assert gave_up["end.tools_since_text"] == pytest.approx(math.log1p(3))
    assert gave_up["end.steps_since_error"] == pytest.approx(math.log1p(2))
    done = _ending(["Successfully cancelled; all tests passed."], [], "")
    assert done["end.says_success"] == pytest.approx(math.log1p(2))
    assert done["end.steps_since_error"] == pytest.approx(math.log1p(1))


# the expressions the phrase counts were first written as (``features._Phrases``)
_FAILURE_RE = re.compile(r"\b(?:unable|cannot|can't|could not|couldn't|sorry|apologi[sz]e|"
                         r"unfortunately|not able|failed|fails)\b")
_SUCCESS_RE = re.compile(r"\b(?:successfully|completed|confirmed|has been|have been|fixed|"
                         r"resolved|all tests pass(?:ed)?)\b")


def test_the_phrase_counts_are_the_expressions_findall() -> None:
    """Scanned from the first phrase found, the count is ``findall``'s of the whole text: the
    word boundary before that place still sees the character before it (``xsorry sorry``)."""
    rng = random.Random(34)
    words = ["sorry", "xsorry", "unable", "can't", "could", "not", "able", "fail", "failed",
             "fails", "apologise", "apologize", "has", "been", "have", "all", "tests", "pass",
             "passed", "passes", "fixed", "_fixed", "résolu", "resolved", "completed2", "é",
             "successfully", "confirmed", "couldn't", "unfortunately", "cannot", "1"]
    texts = ["", "xsorry sorry", "_unable unable", "all tests passed", "all tests passes",
             "could not able", "notable not able"]
    texts += ["".join(rng.choice([*words, " ", "  ", "\n", ".", "'", "-"])
                      for _ in range(rng.randrange(1, 40))) for _ in range(3000)]
    for text in texts:
        assert _SAYS_FAILURE.count(text) == len(_FAILURE_RE.findall(text)), text
        assert _SAYS_SUCCESS.count(text) == len(_SUCCESS_RE.findall(text)), text


def test_what_the_agent_says_is_read_from_a_bounded_tail() -> None:
    long = "sorry " * 100_000 + "fine"
    got = _ending([long] * 50, [], long)
    # at most END_REPLIES replies and the output, each its last END_CHARS characters
    assert got["end.says_failure"] < math.log1p((END_REPLIES + 1) * END_CHARS / 6 + 1)


def test_a_model_of_features_version_3_still_loads_and_predicts() -> None:
    doc = {"format": "otel-eval-predictor", "format_version": 1, "name": "m", "version": "v",
           "features_version": 3, "features": ["steps"],
           "scaler": {"mean": [0.0], "scale": [1.0]}, "coefficients": [1.0],
           "intercept": 0.0, "calibration": {"method": "platt", "a": 1.0, "b": 0.0}}
    model = from_document(doc)
    assert model.p_success(features(_evaluation(["a", "b"]))) > 0.5
    with pytest.raises(ValueError, match="train it again"):
        from_document({**doc, "features_version": 2})


def test_a_model_naming_end_features_gets_them_and_one_without_does_not_need_them() -> None:
    doc = {"format": "otel-eval-predictor", "format_version": 1, "name": "m", "version": "v",
           "features_version": 4, "features": ["end.asks"],
           "scaler": {"mean": [0.0], "scale": [1.0]}, "coefficients": [2.0],
           "intercept": 0.0, "calibration": {"method": "platt", "a": 1.0, "b": 0.0}}
    asks = Evaluation(Trajectory("ab" * 16, "otlp", "complete", [
        Step(index=0, span_id="0" * 16, parent_span_id=None, kind="llm", name="chat",
             answer="Which one?")], output=None), [])
    assert Predictor(from_document(doc)).predict(asks)["p_success"] == round(
        1 / (1 + math.exp(-2.0)), 4)
    counts_only = {**doc, "features_version": 3, "features": ["steps"]}
    predictor = Predictor(from_document(counts_only))
    assert predictor.predict(asks)["p_success"] == round(
        from_document(counts_only).p_success(features(asks)), 4)


# A model that gives every run with steps a p_success above 0.5 (the rule under test says 0).
_CONFIDENT = {"format": "otel-eval-predictor", "format_version": 1, "name": "m", "version": "v",
              "features_version": 3, "features": ["steps"],
              "scaler": {"mean": [0.0], "scale": [1.0]}, "coefficients": [1.0],
              "intercept": 2.0, "calibration": {"method": "platt", "a": 1.0, "b": 0.0}}


@pytest.mark.parametrize(("detector", "kind", "finished"), [
    ("non_termination", "incomplete", False), ("non_termination", "truncated", False),
    ("non_termination", "halted", False), ("non_termination", "length_stop", False),
    ("non_termination", "pending_tool_calls", False), ("non_termination", "no_output", False),
    ("non_termination", "root_error", False), ("non_termination", "llm_error", False),
    ("loop", "repeated_call", True), ("tool_call", "arguments", True)])
def test_a_run_that_did_not_finish_on_its_own_terms_did_not_succeed(
        detector: str, kind: str, finished: bool) -> None:
    """The default model gave the conformance corpus's killed runs a higher p_success than
    their clean runs (median 0.76 against 0.70), and its runs that answered nothing or whose
    last model call failed 0.73 and 0.55: the dev half's runs all finished on their own terms
    (no non_termination finding), so no model learns those ends from them. A run with any
    non_termination finding gets 0; another detector's finding leaves the model's value."""
    run = _evaluation(["a", "b"])
    run.findings = [Finding(detector, kind, "error", "x")]
    p = Predictor(from_document(_CONFIDENT)).predict(run)["p_success"]
    assert (p > 0.5) if finished else (p == 0.0)


@pytest.mark.parametrize(("early", "last", "finished"), [
    (None, None, True), ("llm_error", None, True), ("no_output", None, True),
    ("root_error", None, True), ("incomplete", None, False), (None, "llm_error", False),
    (None, "no_output", False), (None, "halted", False)])
def test_a_conversation_ends_with_its_last_turn(early: str | None, last: str | None,
                                                finished: bool) -> None:
    """A conversation's p_success is 0 when a turn did not end, or when its last turn did not
    finish on its own terms; an earlier turn that raised, answered nothing or whose model
    call failed was asked again, and leaves the model's value."""
    from otel_eval.evaluate.sessions.predict import session_prediction


    def turn(n: int, kind: str | None) -> dict[str, Any]:
        found = [{"detector": "non_termination", "kind": kind, "severity": "error",
                  "message": "x"}] if kind else []
        return {"trace_id": f"{n:032x}", "start_time_unix_nano": n, "duration_s": 1.0,
                "status": "complete", "input": "q", "output": "a", "findings": found,
                "steps": [{"span_id": f"{n:016x}", "kind": "tool", "name": "t",
                           "tool_name": "t", "status": "ok"}]}

    p = session_prediction(Predictor(from_document(_CONFIDENT)), "s",
                           [turn(1, early), turn(2, None), turn(3, last)])["p_success"]
    assert (p > 0.5) if finished else (p == 0.0)


@pytest.mark.parametrize(("tokens", "expected"), [
    # (input, output) per LLM call; None = not recorded
    ([(100, 5), (900, 7)], math.log1p(900)),  # the last call's input: the context at the end
    ([(100, 5), (None, 7)], 0.0),  # the last call recorded output only: its input unknown
    ([(100, 5), (None, None)], math.log1p(100)),  # a call recording no tokens is passed over
    ([], 0.0),  # no LLM call: unknown, not a finding
])
def test_last_input_is_the_context_the_run_ended_with(
        tokens: list[tuple[int | None, int | None]], expected: float) -> None:
    steps = [Step(index=i, span_id=f"{i + 1:016x}", parent_span_id=None, kind="llm",
                  name="chat", input_tokens=inp, output_tokens=out)
             for i, (inp, out) in enumerate(tokens)]
    got = features(Evaluation(Trajectory("ab" * 16, "otlp", "complete", steps), []))
    assert got["tokens.last_input"] == pytest.approx(expected)


def test_a_model_of_features_version_4_still_loads_and_predicts_as_before() -> None:
    doc = {"format": "otel-eval-predictor", "format_version": 1, "name": "m", "version": "v",
           "features_version": 4, "features": ["steps", "end.asks"],
           "scaler": {"mean": [0.0, 0.0], "scale": [1.0, 1.0]}, "coefficients": [1.0, 0.5],
           "intercept": 0.0, "calibration": {"method": "platt", "a": 1.0, "b": 0.0}}
    ev = _evaluation(["a", "b"])
    got = features(ev)
    assert from_document(doc).p_success(got) == pytest.approx(
        1 / (1 + math.exp(-(got["steps"] + 0.5 * got["end.asks"]))))


def test_longest_result_is_read_and_unrecorded_results_are_zero() -> None:
    ev = _evaluation(["a", "b", "c"])
    for step, result in zip(ev.trajectory.steps[1:], ("xx", "x" * 50, None), strict=True):
        step.result = result
    assert features(ev)["results.max_chars"] == pytest.approx(math.log1p(50))
    assert features(_evaluation([]))["results.max_chars"] == 0.0
