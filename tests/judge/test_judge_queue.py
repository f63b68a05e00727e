"""JudgeQueue: never blocks, skips with reasons from a closed set, drains then cancels on
shutdown. Runs on one asyncio loop per test, with the loopback LLM server."""

from __future__ import annotations

import asyncio
from typing import Any

from judge_fake_llm import FakeLLM, Reply, good
from judge_fixtures import combined_reply, config, evaluation

from otel_eval.base.results import Evaluation
from otel_eval.evaluate.judge import SKIP_REASONS, Judge, JudgeQueue
from otel_eval.evaluate.judge.config import SamplingConfig


class Sink:
    def __init__(self) -> None:
        self.done: list[Evaluation] = []
        self.skipped: list[tuple[str, str]] = []
        self.finished = asyncio.Event()
        self.expect = 1

    def on_done(self, ev: Evaluation) -> None:
        self.done.append(ev)
        self._check()

    def on_skip(self, ev: Evaluation, reason: str) -> None:
        assert reason in SKIP_REASONS
        self.skipped.append((ev.trace_id, reason))
        self._check()

    def _check(self) -> None:
        if len(self.done) + len(self.skipped) >= self.expect:
            self.finished.set()


def queue(llm: FakeLLM, sink: Sink, maxsize: int = 10, **changes: Any) -> JudgeQueue:
    return JudgeQueue(Judge(config(llm.api_base, **changes)), maxsize, sink.on_done,
                      sink.on_skip)


def ev(n: int) -> Evaluation:
    return evaluation(trace_id=f"{n:032x}")


def test_judged_evaluations_come_back_through_on_done(llm: FakeLLM) -> None:
    llm.route = lambda body: good(combined_reply([1, 3, 5]))

    async def main() -> Sink:
        sink = Sink()
        sink.expect = 3
        q = queue(llm, sink)
        await q.start()
        assert all(q.submit(ev(i)) for i in range(3))
        await asyncio.wait_for(sink.finished.wait(), 10)
        await q.shutdown(1.0)
        return sink

    sink = asyncio.run(main())
    assert sorted(e.trace_id for e in sink.done) == [f"{i:032x}" for i in range(3)]
    assert all(e.judge and e.judge["overall"]["status"] == "ok" for e in sink.done)


def test_full_queue_skips_without_blocking(llm: FakeLLM) -> None:
    llm.route = lambda body: good(combined_reply([1, 3, 5]))

    async def main() -> tuple[list[bool], Sink]:
        sink = Sink()
        q = queue(llm, sink, maxsize=1, max_concurrency=1)
        await q.start()
        accepted = [q.submit(ev(i)) for i in range(3)]  # no await: workers have not run
        await q.shutdown(10.0)
        return accepted, sink

    accepted, sink = asyncio.run(main())
    assert accepted == [True, False, False]
    assert [r for _, r in sink.skipped] == ["queue_full", "queue_full"]
    assert len(sink.done) == 1



def test_the_queue_is_bounded_in_bytes_too(llm: FakeLLM) -> None:
    """A waiting evaluation holds its run's texts: past max_bytes of traces waiting, new ones
    are skipped queue_full however few they are; one alone is taken whatever its size, and
    what a worker takes no longer counts."""
    llm.route = lambda body: good(combined_reply([1, 3, 5]))

    async def main() -> tuple[list[bool], Sink, int]:
        sink = Sink()
        sink.expect = 3
        q = JudgeQueue(Judge(config(llm.api_base, max_concurrency=1)), 100, sink.on_done,
                       sink.on_skip, max_bytes=1000)
        await q.start()
        accepted = [q.submit(ev(0), 5000),  # alone: taken though larger than the bound
                    q.submit(ev(1), 10)]  # 5,010 waiting: over
        while q.queued_bytes:  # until the worker takes the first (a yield, not a wait)
            await asyncio.sleep(0)
        accepted += [q.submit(ev(2), 600), q.submit(ev(3), 300), q.submit(ev(4), 200)]
        waiting = q.queued_bytes
        await q.shutdown(10.0)
        return accepted, sink, waiting

    accepted, sink, waiting = asyncio.run(main())
    assert accepted == [True, False, True, True, False]
    assert waiting == 900
    assert [(int(t, 16), r) for t, r in sink.skipped] == [(1, "queue_full"), (4, "queue_full")]
    assert sorted(int(e.trace_id, 16) for e in sink.done) == [0, 2, 3]

def test_sessions_held_share_the_byte_bound_with_the_traces(llm: FakeLLM) -> None:
    """The judge stage's sessions (``hold`` / ``release``) and the traces waiting are one
    ``max_bytes``: a session held leaves a trace that does not fit with it queue_full, and the
    other way round; one alone is held whatever its size."""
    async def main() -> tuple[list[bool], Sink]:
        sink = Sink()
        q = JudgeQueue(Judge(config(llm.api_base)), 100, sink.on_done, sink.on_skip,
                       max_bytes=1000)  # not started: nothing takes the traces queued
        q._accepting = True
        held = [q.hold(5000), q.hold(1)]  # alone: held though larger than the bound
        q.release(5000)
        held += [q.hold(600), q.submit(ev(1), 500), q.submit(ev(2), 400), q.hold(1)]
        q.release(600)
        return held, sink

    held, sink = asyncio.run(main())
    assert held == [True, False, True, False, True, False]
    assert [(int(t, 16), r) for t, r in sink.skipped] == [(1, "queue_full")]


def test_sampled_out_disabled_and_not_started(llm: FakeLLM) -> None:
    async def main() -> Sink:
        sink = Sink()
        q = queue(llm, sink, sampling=SamplingConfig(rate=0.0))
        await q.start()
        assert not q.submit(ev(1))
        off = JudgeQueue(Judge(config(model="")), 5, sink.on_done, sink.on_skip)
        await off.start()
        assert not off.submit(ev(2))
        idle = queue(llm, sink)  # never started
        assert not idle.submit(ev(3))
        await q.shutdown(0.0)
        return sink

    sink = asyncio.run(main())
    assert [r for _, r in sink.skipped] == ["sampled_out", "disabled", "shutdown"]
    assert llm.requests == []


def test_over_budget_skips_new_traces(llm: FakeLLM) -> None:
    llm.route = lambda body: good(combined_reply([1, 3, 5]))

    async def main() -> tuple[Sink, Evaluation]:
        sink = Sink()
        q = queue(llm, sink, max_cost_usd_per_hour=0.0001)
        await q.start()
        assert q.submit(ev(1))
        await asyncio.wait_for(sink.finished.wait(), 10)
        late = ev(2)
        assert not q.submit(late)
        await q.shutdown(1.0)
        return sink, late

    sink, late = asyncio.run(main())
    assert sink.skipped == [(late.trace_id, "over_budget")]
    assert late.judge == {"judges": {}, "overall": {"status": "skipped",
                                                    "reason": "over_budget"}}


def test_shutdown_cancels_in_flight_and_queued_after_deadline(llm: FakeLLM) -> None:
    llm.route = lambda body: Reply(hang=True)

    async def main() -> Sink:
        sink = Sink()
        q = queue(llm, sink, max_concurrency=1, timeout_s=30.0)
        await q.start()
        assert q.submit(ev(1)) and q.submit(ev(2))
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, llm.arrived.wait, 10)  # ev(1) is in flight
        await q.shutdown(0.05)
        assert not q.submit(ev(3))
        return sink

    sink = asyncio.run(main())
    assert sorted(sink.skipped) == [(f"{i:032x}", "shutdown") for i in (1, 2, 3)]
    assert sink.done == []


def test_a_judge_bug_is_counted_and_the_worker_survives(llm: FakeLLM) -> None:
    llm.route = lambda body: good(combined_reply([1, 3, 5]))

    async def main() -> tuple[Sink, JudgeQueue]:
        sink = Sink()
        sink.expect = 2
        q = queue(llm, sink, max_concurrency=1)
        broken = ev(1)
        broken.trajectory.steps = None  # type: ignore[assignment]
        await q.start()
        q.submit(broken)
        q.submit(ev(2))
        await asyncio.wait_for(sink.finished.wait(), 10)
        await q.shutdown(1.0)
        return sink, q

    sink, q = asyncio.run(main())
    assert sink.skipped == [(f"{1:032x}", "worker_error")] and len(sink.done) == 1
    assert q.errors == 1


class Died(BaseException):
    """What the worker's boundary (``except Exception``) does not catch: its death."""


def test_a_worker_that_dies_makes_the_queue_report_it(llm: FakeLLM) -> None:
    """Not only logged: ``alive`` turns False (the judge stage's ``healthy``, /healthz)."""

    async def die(_evaluation: Evaluation, _spent: Any = None) -> dict[str, Any]:
        raise Died()

    async def main() -> tuple[bool, bool]:
        q = queue(llm, Sink(), max_concurrency=1)
        q.judge.judge = die  # type: ignore[method-assign]
        await q.start()
        before = q.alive
        assert q.submit(ev(1))
        await asyncio.gather(*q._workers, return_exceptions=True)
        after = q.alive
        await q.shutdown(0.0)
        return before, after

    assert asyncio.run(main()) == (True, False)
