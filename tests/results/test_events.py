"""EvaluationEvents: exact gen_ai.evaluation.result records received by a real OTLP server."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import grpc
import pytest
from opentelemetry.proto.logs.v1 import logs_pb2
from results_sample import LLM, ROOT, TOOL, TRACE_ID, evaluation, trace
from support.otlp_capture import Capture

from otel_eval.app.config import Config
from otel_eval.base import model
from otel_eval.base.results import Evaluation, Finding, stored_evaluation
from otel_eval.base.steps import Step
from otel_eval.decode.otlp import attributes_to_dict
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.outputs.config import ExportConfig
from otel_eval.outputs.events import EVENT_NAME, EvaluationEvents
from otel_eval.telemetry.metrics import Metrics


def _config(ds: Capture, **kw: Any) -> ExportConfig:
    return ExportConfig(events_endpoint=f"127.0.0.1:{ds.port}", initial_backoff_s=0.01,
                        max_backoff_s=0.05, **kw)


def _records(ds: Capture) -> list[logs_pb2.LogRecord]:
    return [r for req in ds.logs for rl in req.resource_logs for sl in rl.scope_logs
            for r in sl.log_records]


def _value(m: Metrics, name: str, **labels: str) -> float:
    return m.registry.get_sample_value(name, labels) or 0.0


def test_one_record_per_finding_and_verdict(downstream: Capture) -> None:
    m = Metrics()
    events = EvaluationEvents(_config(downstream), m, evaluator_version="9.9.9")
    events.start()
    events.export(trace(), evaluation())
    events.shutdown(5.0)
    recs = _records(downstream)
    assert [r.event_name for r in recs] == [EVENT_NAME] * 4
    assert all(r.trace_id.hex() == TRACE_ID and r.time_unix_nano == 123_456 for r in recs)
    assert [r.span_id.hex() for r in recs] == [TOOL, TOOL, ROOT, ROOT]
    assert [r.severity_text for r in recs] == ["ERROR", "WARN", "INFO", "INFO"]
    loop = attributes_to_dict(recs[0].attributes)
    assert loop == {
        "gen_ai.evaluation.name": "loop",
        "gen_ai.evaluation.score.label": "repeated_tool_call",
        "gen_ai.evaluation.explanation": "search called 3 times",
        "otel_eval.detector": "loop",
        "otel_eval.severity": "error",
        "gen_ai.evaluation.evaluator.id": "otel-eval/loop",
        "gen_ai.evaluation.evaluator.version": "9.9.9",
        "gen_ai.evaluation.evaluator.type": "deterministic",
        "otel_eval.evaluator.version": "9.9.9",
        "otel_eval.trace.revision": 0,
        "otel_eval.span_ids": [TOOL, LLM],
    }
    verdict = attributes_to_dict(recs[3].attributes)
    assert verdict == {
        "gen_ai.evaluation.name": "otel_eval.verdict",
        "gen_ai.evaluation.score.value": 0.0,
        "gen_ai.evaluation.score.label": "fail",
        "gen_ai.evaluation.explanation": "loop: search called 3 times",
        "gen_ai.evaluation.evaluator.id": "otel-eval/verdict",
        "gen_ai.evaluation.evaluator.version": "9.9.9",
        "gen_ai.evaluation.evaluator.type": "deterministic",
        "otel_eval.evaluator.version": "9.9.9",
        "otel_eval.trace.revision": 0,
    }
    resource = attributes_to_dict(downstream.logs[0].resource_logs[0].resource.attributes)
    assert resource == {"service.name": "otel-eval", "service.version": "9.9.9"}
    assert _value(m, "otel_eval_events_emitted_total") == 4


def test_failed_evaluation_carries_error_type(downstream: Capture) -> None:
    events = EvaluationEvents(_config(downstream), Metrics(), evaluator_version="1")
    events.start()
    events.evaluation_failed(trace(), "judge.trace", "timeout", "judge did not answer in 30 s")
    events.shutdown(5.0)
    (rec,) = _records(downstream)
    assert rec.span_id.hex() == ROOT
    attrs = attributes_to_dict(rec.attributes)
    assert attrs["error.type"] == "timeout"
    assert attrs["gen_ai.evaluation.name"] == "judge.trace"
    assert "gen_ai.evaluation.score.value" not in attrs
    assert attrs["gen_ai.evaluation.evaluator.id"] == "otel-eval/judge.trace"
    assert attrs["gen_ai.evaluation.evaluator.type"] == "llm_judge"


def test_every_record_names_its_evaluator(downstream: Capture) -> None:
    """Evaluator provenance (semantic-conventions-genai PR 359's names): the detectors and
    the verdict are deterministic evaluators, the judge's grades and failures an LLM judge,
    each with otel-eval's version, on the records as a backend receives them."""
    ev = evaluation()
    ev.judge = {"model": "gpt-4o-mini", "judges": {
        "trace": {"status": "ok", "scores": {"trace": 0.7},
                  "critiques": [{"dimension": "trace", "score": 0.7, "text": "ok"}]},
        "process": {"status": "ok", "scores": {"goal_alignment": 0.2}, "critiques": []},
        "step": {"status": "timeout", "error": "no answer in 30 s"}}}
    events = EvaluationEvents(_config(downstream), Metrics(), evaluator_version="2.1.0")
    events.start()
    events.export(trace(), ev)
    events.export_judge(ev, ROOT, 0.5)
    events.shutdown(5.0)
    seen = {}
    for r in _records(downstream):
        a = attributes_to_dict(r.attributes)
        seen[a["gen_ai.evaluation.name"]] = (a["gen_ai.evaluation.evaluator.id"],
                                             a["gen_ai.evaluation.evaluator.type"],
                                             a["gen_ai.evaluation.evaluator.version"])
    assert seen == {
        "loop": ("otel-eval/loop", "deterministic", "2.1.0"),
        "tool_call": ("otel-eval/tool_call", "deterministic", "2.1.0"),
        "budget": ("otel-eval/budget", "deterministic", "2.1.0"),
        "otel_eval.verdict": ("otel-eval/verdict", "deterministic", "2.1.0"),
        "trace": ("otel-eval/judge.trace", "llm_judge", "2.1.0"),
        "process.goal_alignment": ("otel-eval/judge.process", "llm_judge", "2.1.0"),
        "step": ("otel-eval/judge.step", "llm_judge", "2.1.0"),
    }


def test_retries_unavailable_then_delivers(downstream: Capture) -> None:
    downstream.fail_next = [grpc.StatusCode.UNAVAILABLE, (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                                          0.01)]  # throttled with RetryInfo
    m = Metrics()
    events = EvaluationEvents(_config(downstream), m)
    events.start()
    events.export(trace(), evaluation(passed=True))
    downstream.wait_for(lambda ds: len(ds.logs) == 1)
    events.shutdown(5.0)
    assert downstream.failed == [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED]
    assert len(_records(downstream)) == 4
    assert _value(m, "otel_eval_events_emitted_total") == 4


def test_non_retryable_error_drops_with_reason(downstream: Capture) -> None:
    downstream.fail_next = [grpc.StatusCode.INVALID_ARGUMENT]
    m = Metrics()
    events = EvaluationEvents(_config(downstream), m)
    events.start()
    events.export(trace(), evaluation())
    events.shutdown(5.0)
    assert downstream.logs == []
    assert _value(m, "otel_eval_sink_dropped_total", sink="events", reason="rejected") == 4


def test_export_after_shutdown_is_counted(downstream: Capture) -> None:
    m = Metrics()
    events = EvaluationEvents(_config(downstream), m)
    events.start()
    events.shutdown(1.0)
    events.export(trace(), evaluation())
    assert _value(m, "otel_eval_sink_dropped_total", sink="events", reason="shutdown") == 4


def test_a_run_whose_root_never_arrived_is_reported_on_its_earliest_span(
        downstream: Capture) -> None:
    """``model.run_span``: no local root (a killed run), so the earliest span, for the
    findings, the verdict and a failure alike."""
    t = trace()
    t.spans = [s for s in t.spans if s.span_id != ROOT]  # LLM starts first, then TOOL
    t.status = "incomplete"
    events = EvaluationEvents(_config(downstream), Metrics(), evaluator_version="1")
    events.start()
    events.export(t, evaluation())
    events.evaluation_failed(t, "judge.trace", "timeout", "judge did not answer in 30 s")
    events.shutdown(5.0)
    # the two findings on their own span; the budget finding, the verdict and the failure on
    # the run's span
    assert [r.span_id.hex() for r in _records(downstream)] == [TOOL, TOOL, LLM, LLM, LLM]


def test_a_session_verdict_names_its_evaluator(downstream: Capture) -> None:
    """Every gen_ai.evaluation.result names its evaluator (docs/guide.md), the completed
    session's verdict too: a deterministic evaluator, ``otel-eval/session.verdict``."""
    events = EvaluationEvents(_config(downstream), Metrics(), evaluator_version="2.1.0")
    events.start()
    events.export_session({"session_id": "conv-1", "turns": 2,
                           "verdict": {"passed": False, "reasons": ["loop across turns"]},
                           "findings": [{"detector": "loop", "kind": "repeated_across_turns"}]},
                          TRACE_ID, ROOT)
    events.shutdown(5.0)
    (rec,) = _records(downstream)
    a = attributes_to_dict(rec.attributes)
    assert a["gen_ai.evaluation.name"] == "otel_eval.session.verdict"
    assert a["gen_ai.conversation.id"] == "conv-1"
    assert (a.get("gen_ai.evaluation.evaluator.id"), a.get("gen_ai.evaluation.evaluator.type"),
            a.get("gen_ai.evaluation.evaluator.version")) == (
        "otel-eval/session.verdict", "deterministic", "2.1.0")


def test_a_session_verdict_is_timed_at_its_completion(downstream: Capture) -> None:
    """An event owed since before a restart is sent by the next process (sessions.job's
    ``_owed``): it carried the time of its sending, not of the completion it reports."""
    events = EvaluationEvents(_config(downstream), Metrics(), evaluator_version="1")
    events.start()
    done = 1_700_000_000_000_000_000
    for at in (done, None):
        events.export_session({"session_id": "c", "turns": 2, "completed_at_unix_nano": at,
                               "verdict": {"passed": True, "reasons": []}, "findings": []},
                              TRACE_ID, ROOT)
    events.shutdown(5.0)
    owed, unknown = _records(downstream)
    assert (owed.time_unix_nano, owed.observed_time_unix_nano) == (done, done)
    assert unknown.time_unix_nano > done  # no completion time recorded: now


def test_a_session_verdict_names_its_service(downstream: Capture) -> None:
    """A session is a conversation id within one service (docs/sessions.md): two services'
    conversations of one id are two sessions, and the ``otel_eval.session.verdict`` event
    names "it and the service apart". Each event names its service; a session of turns
    without a ``service.name`` names none."""
    events = EvaluationEvents(_config(downstream), Metrics(), evaluator_version="2.1.0")
    events.start()
    for service in ("shop", "bank", None):
        events.export_session({"session_id": "1", "service": service, "turns": 1,
                               "verdict": {"passed": True, "reasons": []}, "findings": []},
                              TRACE_ID, ROOT)
    events.shutdown(5.0)
    named = [attributes_to_dict(r.attributes) for r in _records(downstream)]
    assert [a["gen_ai.conversation.id"] for a in named] == ["1", "1", "1"]
    assert [a.get("otel_eval.session.service") for a in named] == ["shop", "bank", None]


def test_a_record_on_an_llm_call_names_its_response_id(downstream: Capture) -> None:
    """The conventions recommend ``gen_ai.response.id`` on ``gen_ai.evaluation.result``
    "when available": the completion evaluated. Set on the records of an LLM step's span
    whose response id was recorded (a finding, a judge's critique); not on the others (a
    tool's span, the root's verdict)."""
    ev = evaluation()
    ev.trajectory.steps = [
        Step(0, ROOT, None, "agent", "invoke_agent shop", "shop"),
        Step(1, LLM, ROOT, "llm", "chat gpt-4o", "shop", response_id="chatcmpl-123"),
        Step(2, TOOL, ROOT, "tool", "execute_tool search", "shop",
             response_id="not-a-call")]
    ev.findings.append(Finding("non_termination", "llm_error", "error", "the last LLM call "
                               "failed", span_ids=[LLM]))
    ev.judge = {"model": "m", "judges": {"step": {"status": "ok", "scores": {}, "critiques": [
        {"dimension": "step", "score": 0.2, "text": "wrong", "span_id": LLM},
        {"dimension": "step", "score": 0.9, "text": "fine", "span_id": TOOL}]}}}
    events = EvaluationEvents(_config(downstream), Metrics(), evaluator_version="1")
    events.start()
    events.export(trace(), ev)
    events.export_judge(ev, ROOT, 0.5)
    events.shutdown(5.0)
    seen = [(r.span_id.hex(), attributes_to_dict(r.attributes).get("gen_ai.response.id"))
            for r in _records(downstream)]
    assert seen == [(TOOL, None), (TOOL, None), (ROOT, None), (LLM, "chatcmpl-123"),
                    (ROOT, None), (LLM, "chatcmpl-123"), (TOOL, None)]


def _sends(downstream: Capture, *evaluations: tuple[model.Trace, Evaluation]
           ) -> list[list[tuple[str, int, dict[str, Any]]]]:
    """Each evaluation's records as sent (its findings and verdict, then the judge's), by
    span, severity and attributes (the time is the sending's)."""
    events = EvaluationEvents(_config(downstream), Metrics(), evaluator_version="1")
    events.start()
    counts = []
    for t, ev in evaluations:
        events.export(t, ev)
        events.export_judge(ev, model.run_span_id(t.spans), 0.5)
        counts.append(len(ev.findings) + 1 + len(ev.judge["judges"]["step"]["critiques"]))
    events.shutdown(5.0)
    seen = [(r.span_id.hex(), r.severity_number, attributes_to_dict(r.attributes))
            for r in _records(downstream)]
    out, at = [], 0
    for n in counts:
        out.append(seen[at:at + n])
        at += n
    return out


@pytest.mark.parametrize("one_call", [False, True])
def test_events_sent_again_from_the_stored_evaluation_equal_the_first(
        downstream: Capture, one_call: bool) -> None:
    """A replay the store already holds (a restart: ``finishing``) and the judgement of a
    stopped process (``judge.stage``) are sent again from the stored v1 object, no steps
    rebuilt: their records name the LLM calls' ``gen_ai.response.id`` as the first send's
    did (a failed call's finding, a one-call run's verdict, the judge's critiques)."""
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.id": "chatcmpl-abc",
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [
                {"type": "text", "content": "Find shoes"}]}])}
    agent = model.Span(TRACE_ID, ROOT, None, "invoke_agent shop", 1_000, 9_000,
                       attributes={"gen_ai.operation.name": "invoke_agent",
                                   "gen_ai.agent.name": "shop"})
    call = model.Span(TRACE_ID, LLM, None if one_call else ROOT, "chat gpt-4o", 2_000, 3_000,
                      status="error", status_message="upstream 500", attributes=chat)
    t = model.Trace(TRACE_ID, [call] if one_call else [agent, call], "complete")
    ev = Evaluator(Config()).evaluate(t)
    assert ev is not None
    ev.judge = {"model": "m", "judges": {"step": {"status": "ok", "scores": {}, "critiques": [
        {"dimension": "step", "score": 0.2, "text": "gave up", "span_id": LLM}]}}}
    stored = json.loads(ev.to_json_text())  # the row the store holds
    again = stored_evaluation(model.Trace(TRACE_ID, [], "complete"), stored)
    first, second = _sends(downstream, (t, ev), (t, again))
    assert ("chatcmpl-abc" in str(first)) and first == second


def test_every_judge_record_of_a_reopened_run_names_its_revision(
        downstream: Capture) -> None:
    """Late spans re-open a run: its revision 1 is evaluated and judged again, and its events
    go out beside revision 0's. The judge's grades named their revision
    (``otel_eval.trace.revision``), but a judge that failed (timeout, parse error) sent a
    record without it: a consumer could not tell revision 1's failure from revision 0's, nor
    which grades it replaced."""
    ev = evaluation()
    ev.trajectory.revision = 1
    ev.judge = {"model": "m", "judges": {
        "trace": {"status": "ok", "scores": {"trace": 0.7},
                  "critiques": [{"dimension": "trace", "score": 0.7, "text": "ok"}]},
        "step": {"status": "timeout", "error": "no answer in 30 s"}}}
    events = EvaluationEvents(_config(downstream), Metrics(), evaluator_version="1")
    events.start()
    events.export_judge(ev, ROOT, 0.5)
    events.shutdown(5.0)
    revisions = {a["gen_ai.evaluation.name"]: a.get("otel_eval.trace.revision")
                 for a in (attributes_to_dict(r.attributes) for r in _records(downstream))}
    assert revisions == {"trace": 1, "step": 1}


def test_every_record_of_a_cut_run_names_why_it_was_released(downstream: Capture) -> None:
    """A run otel-eval cut for room (``pressure``) is judged on what came before the cut, as
    the v1 object's ``release_reason`` and the pass-through root's
    ``otel_eval.trace.release_reason`` say; its events (findings, verdict, the judge's grades
    and failures) said nothing of it, so a consumer of the events could not tell a cut run's
    verdict from a whole run's. Each carries ``otel_eval.trace.release_reason``, and a whole
    run's none; one sent again from the stored object carries the same."""
    ev = evaluation()
    ev.trajectory.status, ev.trajectory.release_reason = "truncated", "pressure"
    ev.judge = {"model": "m", "judges": {
        "trace": {"status": "ok", "scores": {"trace": 0.7},
                  "critiques": [{"dimension": "trace", "score": 0.7, "text": "ok"}]},
        "step": {"status": "timeout", "error": "no answer in 30 s"}}}
    again = stored_evaluation(trace(), json.loads(ev.to_json_text()))
    whole = evaluation()
    whole.trajectory.release_reason = "root_ended"
    events = EvaluationEvents(_config(downstream), Metrics(), evaluator_version="1")
    events.start()
    for e in (ev, again, whole):
        events.export(trace(), e)
        events.export_judge(e, ROOT, 0.5)
    events.shutdown(5.0)
    reasons = [attributes_to_dict(r.attributes).get("otel_eval.trace.release_reason")
               for r in _records(downstream)]
    # a cut run's 3 findings, its verdict and 2 judge records, twice; the whole run's 4
    assert Counter(reasons) == {"pressure": 12, None: 4}
