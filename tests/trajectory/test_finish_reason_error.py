"""A reply whose finish reason is ``error`` (a value the GenAI conventions define: the output
messages' ``FinishReason`` is stop, length, content_filter, tool_call or error) is a failed LLM
call, as one whose span ended in ERROR is; every other value keeps its meaning.

Found 2026-12 (review of the GenAI conventions): the finish reasons were read only for a cut
(``length``) and a stop; a call that answered ``error`` on a span whose status said nothing
(or OK) passed the verdict, its failed reply taken as the run's last word."""

from __future__ import annotations

import json
from typing import Any

import pytest
from trajectory_factory import span, trace

from otel_eval.app.config import Config
from otel_eval.base.model import SpanEvent, Trace
from otel_eval.evaluate.evaluator import Evaluator

_IN = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}])


def _out(reason: str) -> str:
    return json.dumps([{"role": "assistant", "finish_reason": reason,
                        "parts": [{"type": "text", "content": "It is sunn"}]}])


def _run(chat: dict[str, Any], status: str = "unset",
         events: list[SpanEvent] | None = None) -> Trace:
    return trace(
        span("invoke_agent weather", attrs={"gen_ai.operation.name": "invoke_agent",
                                            "gen_ai.agent.name": "weather"}, end=100),
        span("chat", "invoke_agent weather", 10, {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "m", **chat},
            status=status, events=events))


def _reason_attrs(reason: str) -> dict[str, Any]:
    return {"gen_ai.input.messages": _IN, "gen_ai.output.messages": _out(reason),
            "gen_ai.response.finish_reasons": [reason]}


def _findings(t: Trace) -> tuple[bool, list[tuple[str, str]]]:
    ev = Evaluator(Config()).evaluate(t)
    assert ev is not None and ev.verdict is not None
    return ev.verdict.passed, [(f.detector, f.kind) for f in ev.findings]


@pytest.mark.parametrize("recorded", [
    _run(_reason_attrs("error")),  # the attribute and the output message
    _run(_reason_attrs("error"), status="ok"),  # an instrumentation's OK: the call returned
    _run({"gen_ai.input.messages": _IN, "gen_ai.output.messages": _out("error")}),
    # the older convention: the choice event on the span
    _run({}, events=[SpanEvent("gen_ai.user.message", 0, {"content": "Weather in Paris?"}),
                     SpanEvent("gen_ai.choice", 0, {"message": "It is sunn",
                                                    "finish_reason": "error"})]),
], ids=["attribute", "status-ok", "output-message", "choice-event"])
def test_a_reply_ending_in_error_is_a_failed_call(recorded: Trace) -> None:
    passed, findings = _findings(recorded)
    assert not passed
    assert findings == [("non_termination", "llm_error")]
    llm = Evaluator(Config()).evaluate(recorded).trajectory.llm_steps  # type: ignore[union-attr]
    assert llm[0].status == "error" and llm[0].error is not None
    assert "finish reason error" in llm[0].error


@pytest.mark.parametrize("reason", ["stop", "tool_call", "content_filter", "end_turn",
                                    "a value no convention defines"])
def test_other_finish_reasons_keep_their_meaning(reason: str) -> None:
    passed, findings = _findings(_run(_reason_attrs(reason)))
    assert passed and findings == []


def test_the_span_s_own_error_is_kept() -> None:
    t = _run({**_reason_attrs("error"), "error.type": "rate_limit_exceeded"}, status="error")
    ev = Evaluator(Config()).evaluate(t)
    assert ev is not None
    assert ev.trajectory.llm_steps[0].error == "rate_limit_exceeded"
