"""A judgement that ends before it is done (it raises partway, or the stop cancels it) still
says what it spent: the calls already paid reach the stored ``totals`` and ``eval``'s cost
line, as they reached the metrics (``otel_eval_judge_calls_total`` ...)."""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
import threading
from typing import Any

import pytest
from judge_fake_llm import FakeLLM, Reply, completion, good
from judge_fixtures import config, evaluation

from otel_eval.base.results import Evaluation
from otel_eval.evaluate.judge import Judge, JudgeQueue
from otel_eval.evaluate.judge.observer import NoopObserver
from otel_eval.evaluate.judge.offline import Spend, judged
from otel_eval.evaluate.judge.rubric_cache import Criteria

_CRITERIA = {"criteria": [{"id": "c1", "criterion": "Cancels ABC123"}]}


class LockedCache:
    """A rubric cache whose write fails (the shared SQLite file locked by the store)."""

    def get(self, key: str) -> Criteria | None:
        return None

    def put(self, key: str, criteria: Criteria, model: str) -> None:
        raise sqlite3.OperationalError("database is locked")


class Calls(NoopObserver):
    """The calls the metrics count."""

    def __init__(self) -> None:
        self.paid: list[tuple[str, str]] = []

    def call(self, judge: str, status: str, *figures: Any) -> None:
        self.paid.append((judge, status))


def _judge(llm: FakeLLM, calls: Calls) -> Judge:
    llm.by_schema({"rubric_generate_grade": good(_CRITERIA)})
    return Judge(config(llm.api_base, enabled=("rubric",)), rubric_cache=LockedCache(),
                 observer=calls)


def test_a_judgement_that_raises_keeps_its_spent_calls_in_the_stored_totals(
        llm: FakeLLM) -> None:
    calls = Calls()
    skipped: list[tuple[Evaluation, str]] = []

    async def main() -> None:
        done = asyncio.Event()

        def skip(ev: Evaluation, reason: str) -> None:
            skipped.append((ev, reason))
            done.set()

        q = JudgeQueue(_judge(llm, calls), 10, lambda ev: None, skip)
        await q.start()
        q.submit(evaluation())
        await done.wait()
        await q.shutdown(1.0)

    asyncio.run(asyncio.wait_for(main(), 30))
    assert calls.paid == [("rubric_generate", "ok")]  # counted in the metrics
    (ev, reason), = skipped
    assert reason == "worker_error"
    assert ev.judge is not None and ev.judge["overall"]["reason"] == "worker_error"
    totals = ev.judge.get("totals")
    assert totals is not None and (totals["calls"], totals["tokens"]) == (
        1, {"input": 1000, "output": 100}), ev.judge


def test_a_judgement_that_raises_is_on_evals_cost_line(llm: FakeLLM) -> None:
    calls, spend = Calls(), Spend()
    out = list(judged([evaluation(), evaluation(trace_id="9" * 32)], _judge(llm, calls),
                      spend))
    assert len(calls.paid) == 2 and len(out) == 2
    assert [ev.judge["overall"].get("reason") for ev in out if ev.judge] == ["worker_error"] * 2
    assert (spend.calls, spend.input_tokens, spend.output_tokens) == (2, 2000, 200)
    assert spend.skipped == {"worker_error": 2}
    assert "in 2 calls, 2000 input + 200 output tokens" in spend.line("m")


def test_a_judgement_cut_by_the_stop_keeps_its_spent_calls(llm: FakeLLM) -> None:
    calls, asked = Calls(), threading.Event()

    def route(body: dict[str, Any]) -> Reply:
        if body["response_format"]["json_schema"]["name"] == "rubric_generate_grade":
            return good(_CRITERIA)
        asked.set()
        return Reply(hang=True)  # the check: a slow model, still thinking at the stop

    llm.route = route
    skipped: list[tuple[Evaluation, str]] = []

    async def main() -> None:
        q = JudgeQueue(Judge(config(llm.api_base, enabled=("rubric",)), observer=calls), 10,
                       lambda ev: None, lambda ev, reason: skipped.append((ev, reason)))
        await q.start()
        q.submit(evaluation())
        assert await asyncio.to_thread(asked.wait, 30)
        await q.shutdown(0.0)

    asyncio.run(asyncio.wait_for(main(), 30))
    # the check the server had at the stop is billed: counted as cut
    assert calls.paid == [("rubric_generate", "ok"), ("rubric_verify", "cancelled")]
    (ev, reason), = skipped
    assert reason == "shutdown" and ev.judge is not None
    assert ev.judge.get("totals", {}).get("calls") == 2, ev.judge


def test_a_call_cut_during_its_repair_keeps_the_reply_it_paid_for(llm: FakeLLM) -> None:
    """A reply paid for, then the stop while its repair was under way: the call's figures
    were dropped with it (not in the stored totals, nor in the metrics), though its cost was
    spent against the hourly budget."""
    calls, asked = Calls(), threading.Event()

    def route(body: dict[str, Any]) -> Reply:
        if len(body["messages"]) > 2:  # the repair round trip: a slow model at the stop
            asked.set()
            return Reply(hang=True)
        return completion("the run looks fine to me")  # not JSON: paid, then repaired

    llm.route = route
    skipped: list[tuple[Evaluation, str]] = []
    judge = Judge(config(llm.api_base, enabled=("trace",)), observer=calls)

    async def main() -> None:
        q = JudgeQueue(judge, 10, lambda ev: None,
                       lambda ev, reason: skipped.append((ev, reason)))
        await q.start()
        q.submit(evaluation())
        assert await asyncio.to_thread(asked.wait, 30)
        await q.shutdown(0.0)

    asyncio.run(asyncio.wait_for(main(), 30))
    # counted in the metrics as cut by us (cancelled), not as the provider's error, which
    # OtelEvalJudgeFailing pages for
    assert calls.paid == [("trace", "cancelled")]
    (ev, reason), = skipped
    assert reason == "shutdown" and ev.judge is not None
    totals = ev.judge.get("totals", {})
    repair = llm.requests[1]  # the server had it at the stop: its prompt billed, estimated
    sent = len(json.dumps(repair["messages"])) + len(json.dumps(repair["response_format"]))
    assert (totals.get("calls"), totals.get("tokens")) == (
        1, {"input": 1000 + math.ceil(sent / 3.5), "output": 100}), ev.judge
    spent = judge.client.budget.spent(judge.client.clock())  # what the budget counted
    assert totals["cost_usd"] > 0 and spent == pytest.approx(totals["cost_usd"])


def test_a_request_sent_then_cut_by_the_stop_is_spent_as_a_timed_out_one(
        llm: FakeLLM) -> None:
    """A request the provider had when the stop cancelled it is billed all the same (its
    prompt was sent), as a timed-out one is: it was counted in no total, metric or budget.
    It now spends the prompt's estimate, counted as a call cut (status cancelled)."""
    calls, asked = Calls(), threading.Event()

    def route(body: dict[str, Any]) -> Reply:
        asked.set()
        return Reply(hang=True)  # a slow model, still thinking at the stop

    llm.route = route
    skipped: list[tuple[Evaluation, str]] = []
    judge = Judge(config(llm.api_base, enabled=("trace",)), observer=calls)

    async def main() -> None:
        q = JudgeQueue(judge, 10, lambda ev: None,
                       lambda ev, reason: skipped.append((ev, reason)))
        await q.start()
        q.submit(evaluation())
        assert await asyncio.to_thread(asked.wait, 30)
        await q.shutdown(0.0)

    asyncio.run(asyncio.wait_for(main(), 30))
    # counted in the metrics as cut by us (cancelled), not as the provider's error, which
    # OtelEvalJudgeFailing pages for
    assert calls.paid == [("trace", "cancelled")]
    (ev, reason), = skipped
    assert reason == "shutdown" and ev.judge is not None
    totals = ev.judge.get("totals", {})
    sent = len(json.dumps(llm.requests[0]["messages"])) + len(json.dumps(
        llm.requests[0]["response_format"]))
    assert (totals.get("calls"), totals.get("tokens")) == (
        1, {"input": math.ceil(sent / 3.5), "output": 0}), ev.judge
    spent = judge.client.budget.spent(judge.client.clock())
    assert totals["cost_usd"] > 0 and spent == pytest.approx(totals["cost_usd"])


def test_a_request_cancelled_before_it_was_sent_spends_nothing(llm: FakeLLM) -> None:
    """Cancelled while it waited for the rate limit (nothing sent): no cost, no call."""
    calls = Calls()
    judge = Judge(config(llm.api_base, enabled=("trace",), requests_per_min=1),
                  observer=calls)
    judge.client.limiter.reserve = lambda now, tokens: 60.0  # type: ignore[method-assign]

    async def main() -> None:
        waiting, never = asyncio.Event(), asyncio.Event()

        async def wait(delay: float) -> None:  # the rate limit's wait, held
            waiting.set()
            await never.wait()

        judge.client.sleep = wait
        task = asyncio.ensure_future(judge.judge(evaluation()))
        await waiting.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(main(), 30))
    assert calls.paid == [] and llm.requests == []
    assert judge.client.budget.spent(judge.client.clock()) == 0
