"""A long run's judge prompts are bounded whatever its findings: the findings are listed up to
``FINDINGS_SHOWN`` (the rest counted). An audit reproduced 84 requests and 208 M characters
of prompt for a 9,999-span trace of failed tool calls: its 9,998 findings were written whole
into every step chunk. Each chunk carries the whole view, so they are built as they are
sent: a trace holds the requests in flight, not all of them."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from judge_fixtures import config, evaluation
from support.bench_module import load_bench

from otel_eval.base.results import Evaluation, Finding
from otel_eval.evaluate.detectors import Detectors, DetectorsConfig
from otel_eval.evaluate.judge import Judge
from otel_eval.evaluate.judge.client import CallResult
from otel_eval.evaluate.judge.prompting import Request
from otel_eval.evaluate.judge.render import FINDING_CHARS, FINDINGS_SHOWN, render
from otel_eval.evaluate.judge.session import render_session

_failing_run = load_bench("judge_scaling.py", "judge_scaling").failing_trajectory


def test_thousands_of_findings_are_listed_up_to_the_cap_the_most_severe_first() -> None:
    ev = evaluation()
    many = [Finding("tool_call", "runtime", "warning", "M" * 5000, [], list(range(500)))
            for _ in range(3000)]
    ev.findings = [*many, Finding("loop", "repeat", "error", "the last one", [], [7])]
    findings = render(ev, config().compaction).findings
    listed = findings.split("\n- ")
    assert len(listed) == FINDINGS_SHOWN
    assert listed[-1].endswith(f"\n({3001 - FINDINGS_SHOWN} more findings)")
    assert "[error] loop/repeat: the last one (steps 7)" in listed[-1]  # the error, though last
    assert all(len(f) < FINDING_CHARS + 200 for f in listed[:-1])  # message and steps cut
    assert listed[0].endswith(" (steps 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 490 more)")


def test_a_few_findings_are_listed_whole_in_their_order() -> None:
    ev = evaluation()
    ev.findings = [Finding("budget", "cost_unknown", "info", "no price", [], []),
                   Finding("loop", "repeat", "error", "same call", [], [1, 3])]
    assert render(ev, config().compaction).findings == (
        "- [info] budget/cost_unknown: no price\n- [error] loop/repeat: same call (steps 1, 3)")


def test_a_session_lists_its_findings_by_the_same_cap() -> None:
    record = {"findings": [{"detector": "d", "kind": "k", "severity": "info", "message": "m"}]
              * 50 + [{"detector": "loop", "kind": "repeat", "severity": "error",
                       "message": "late"}]}
    lines = render_session(record, [{"input": "hi", "output": "ho"}]).findings.splitlines()
    assert len(lines) == FINDINGS_SHOWN + 1
    assert lines[-1] == f"({51 - FINDINGS_SHOWN} more findings)"
    assert "- loop/repeat (error, turn 1): late" in lines


def test_a_long_failing_runs_requests_are_bounded_in_number_and_size() -> None:
    calls = 1500
    t = _failing_run(calls)
    findings, verdict = Detectors(DetectorsConfig()).evaluate(t)
    assert len(findings) >= calls  # a finding per failed call
    judge = Judge(config())
    reqs = judge.requests(Evaluation(t, findings, verdict))
    c = judge.config
    per_call = max(len(r.steps) for r in reqs)  # as many as a reply holds (prompting)
    assert per_call <= c.max_steps_per_call and len(reqs) == math.ceil(calls / per_call)
    # a request: the view (steps up to max_trajectory_chars, task and final output up to
    # max_task_chars each, the listed findings) and the instructions; before, each carried
    # all the findings (~380 KB here, 2.5 MB at 5,000 calls)
    per_request = (c.compaction.max_trajectory_chars + 2 * c.compaction.max_task_chars
                   + 20_000)
    sizes = [sum(len(m["content"]) for m in r.messages) for r in reqs]
    assert max(sizes) <= per_request
    assert sum(sizes) <= len(reqs) * per_request


class _Counting(Judge):
    """A judge whose calls answer at once, counting the requests built before each call."""

    def __init__(self, **changes: Any) -> None:
        super().__init__(config(**changes))
        self.built = 0
        self.done = 0
        self.ahead: list[int] = []  # requests built but not yet answered, at each call

    def redacted(self, request: Request) -> Request:
        self.built += 1
        return super().redacted(request)

    async def call(self, request: Request, cut: Any = None) -> CallResult:
        self.ahead.append(self.built - self.done)
        await asyncio.sleep(0)  # the other senders run
        self.done += 1
        return CallResult("error", error="test")


def test_a_runs_step_chunks_are_built_as_they_are_sent() -> None:
    judge = _Counting(max_concurrency=2, max_steps_per_call=10)
    t = _failing_run(300)
    asyncio.run(judge.judge(Evaluation(t, [], None)))
    assert len(judge.ahead) == judge.built == 30
    assert max(judge.ahead) <= 2  # before: all 30 built before the first was sent
