"""The judge's writes to the store happen off the event loop (issue 23: one writer per part
of the evaluation row, none blocking the loop the Kafka consumer shares). A store whose
``put_judge`` blocks until released: while it is blocked, the loop still runs other work,
and the judgement lands once it is released, in the order the writes were made. The same for
the rubric cache (a SQLite table in the store's file)."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from judge_fake_llm import FakeLLM, Reply, good
from judge_fixtures import combined_reply, config, evaluation
from prometheus_client import CollectorRegistry

from otel_eval.base.aio import LoopThread
from otel_eval.base.backoff import Backoff
from otel_eval.base.model import Trace
from otel_eval.evaluate.judge import Judge
from otel_eval.evaluate.judge.config import SamplingConfig
from otel_eval.evaluate.judge.rubric_cache import Criteria, MemoryRubricCache, rubric_key
from otel_eval.evaluate.judge.stage import JudgeStage
from otel_eval.store import SqliteStore
from otel_eval.store.judge_writes import JudgeWrites
from otel_eval.store.sessions import session_key
from otel_eval.telemetry.metrics import Metrics


class BlockingStore(SqliteStore):
    """``put_judge`` waits for ``release``; says which thread called it and in what order."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.open()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls: list[tuple[str, str]] = []  # (trace id, overall status)
        self.threads: set[str] = set()

    def put_judge(self, trace_id: str, revision: int, judge: dict[str, Any],
                  evaluated_at_ns: int | None = None) -> bool:
        self.threads.add(threading.current_thread().name)
        self.entered.set()
        assert self.release.wait(30), "never released"
        self.calls.append((trace_id, judge["overall"]["status"]))
        return super().put_judge(trace_id, revision, judge, evaluated_at_ns)


def _scripted(body: dict[str, Any]) -> Reply:
    steps = re.search(r"steps ([\d, ]+)\.", body["messages"][-1]["content"])
    assert steps is not None
    return good(combined_reply([int(i) for i in steps.group(1).split(",")]))


def _trace(trace_id: str) -> Trace:
    return Trace(trace_id, [], "complete")


async def _served() -> str:
    return "served"


def test_a_blocked_judge_write_does_not_hold_the_event_loop(llm: FakeLLM,
                                                           tmp_path: Path) -> None:
    llm.route = _scripted
    store = BlockingStore(str(tmp_path / "s.db"))
    judged, skipped = evaluation(trace_id="a1" * 16), evaluation(trace_id="b2" * 16)
    skipped.trajectory.agent = "sampled_out_agent"
    store.put_many([judged, skipped])
    loop = LoopThread()
    loop.start()
    cfg = config(llm.api_base, combined=True, sampling=SamplingConfig(
        rate=0.0, rate_by_agent={"airline_agent": 1.0}, always_severities=()))
    stage = JudgeStage(cfg, loop, store, Metrics(CollectorRegistry()))
    try:
        stage.start()
        stage.export(_trace(judged.trace_id), judged)
        assert store.entered.wait(30)  # the judgement is being written, and held there
        assert loop.run(_served(), timeout_s=30) == "served"  # the loop still serves
        # a trace skipped meanwhile: its write queues behind the held one, no blocking either
        stage.export(_trace(skipped.trace_id), skipped)
        assert loop.run(_served(), timeout_s=30) == "served"
        store.release.set()
        stage.shutdown(30.0)  # waits for the writes
        assert store.calls == [(judged.trace_id, "ok"), (skipped.trace_id, "skipped")]
        assert store.threads == {"otel-eval-judge-writer"}
        stored = store.get(judged.trace_id)
        assert stored is not None and stored["judge"]["overall"]["status"] == "ok"
        skip = store.get(skipped.trace_id)
        assert skip is not None and skip["judge"]["overall"]["reason"] == "sampled_out"
    finally:
        store.release.set()
        stage.shutdown(5.0)
        loop.stop()
        store.close()


class BlockingRubrics(MemoryRubricCache):
    """A rubric cache whose ``get`` waits for ``release`` (a SQLite file locked by a write)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def get(self, key: str) -> Criteria | None:
        self.entered.set()
        assert self.release.wait(30), "never released"
        return super().get(key)


def test_a_blocked_rubric_cache_does_not_hold_the_event_loop(llm: FakeLLM) -> None:
    llm.by_schema({
        "rubric_generate_grade": good({"criteria": [{"id": "c1", "criterion": "Cancels"}]}),
        "rubric_verify_grade": good({"results": [{"id": "c1", "reasoning": "step 3",
                                                  "fulfilled": True}]})})
    cache = BlockingRubrics()
    judge = Judge(config(llm.api_base, enabled=("rubric",)), rubric_cache=cache)
    loop = LoopThread()
    loop.start()
    try:
        judging = asyncio.run_coroutine_threadsafe(judge.judge(evaluation()), loop.loop)
        assert cache.entered.wait(30)  # the judge is reading the cache, held there
        assert loop.run(_served(), timeout_s=30) == "served"  # the loop still serves
        cache.release.set()
        out = judging.result(30)
        assert out["judges"]["rubric"]["cache"] == "miss"
        assert cache.get(str(rubric_key("airline-7", None, None, judge.rubric_writer))) == [
            {"id": "c1", "criterion": "Cancels"}]
    finally:
        cache.release.set()
        loop.stop()


def test_export_after_the_loop_closed_is_a_counted_skip(tmp_path: Path) -> None:
    """An engine thread exporting once the service's loop has closed (a stop out of order):
    counted as skipped ``shutdown``, never raised into the engine."""
    registry = CollectorRegistry()
    store = SqliteStore(str(tmp_path / "s.db")).open()
    loop = LoopThread()
    loop.start()
    loop.stop()  # closes the loop: call_soon_threadsafe raises RuntimeError
    stage = JudgeStage(config(), loop, store, Metrics(registry))
    ev = evaluation(trace_id="c3" * 16)
    stage.export(_trace(ev.trace_id), ev)
    assert registry.get_sample_value("otel_eval_judge_skipped_total",
                                     {"reason": "shutdown"}) == 1
    store.close()


class SessionJudgeStore(SqliteStore):
    """Records the session judgements it is asked to write (no session rows needed)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.open()
        self.session_judges: list[tuple[str, int, dict[str, Any]]] = []
        self.written = threading.Event()  # set by the writer thread's first write

    def put_session_judge(self, key: str, completions: int, judge: dict[str, Any]) -> bool:
        self.session_judges.append((key, completions, judge))
        self.written.set()
        return True


def test_a_session_reaching_the_stage_once_it_stops_is_a_counted_shutdown_skip(
        llm: FakeLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A completion handed over as the stop begins (the session job overran its deadline) is
    not judged after the stop (no call sent) and not dropped silently: stored as skipped
    ``shutdown`` and counted, as a trace's; sessions are completed once, never re-judged at
    the next start (docs/sessions.md)."""
    registry = CollectorRegistry()
    store = SessionJudgeStore(str(tmp_path / "s.db"))
    loop = LoopThread()
    loop.start()
    stage = JudgeStage(config(llm.api_base), loop, store, Metrics(registry))
    stage.start()
    entered, release, stopping = threading.Event(), threading.Event(), threading.Event()
    run = loop.run

    def recording_run(coro: Any, timeout_s: float | None = None) -> Any:
        stopping.set()  # shutdown has begun: it hands its drain to the loop
        return run(coro, timeout_s)

    def block() -> None:
        entered.set()
        release.wait(30)  # a guard only: the test releases it

    monkeypatch.setattr(loop, "run", recording_run)
    stopper = threading.Thread(target=stage.shutdown, args=(30.0,))
    try:
        loop.call(block)  # holds the loop: the session and the drain queue behind it
        assert entered.wait(30)
        stage.judge_session({"session_id": "conv-a", "service": "shop", "completion": 0},
                            [{"trace_id": "a1" * 16}], 40)
        stopper.start()
        assert stopping.wait(30)
        release.set()
        stopper.join(30)
        assert not stopper.is_alive()
        assert [(key, n, judge["overall"]) for key, n, judge in store.session_judges] == [
            (session_key("shop", "conv-a"), 1, {"status": "skipped", "reason": "shutdown"})]
        assert registry.get_sample_value("otel_eval_judge_skipped_total",
                                         {"reason": "shutdown"}) == 1
        assert llm.requests == []
    finally:
        release.set()
        loop.stop()
        store.close()


def test_a_session_judgement_cut_by_the_stop_is_a_counted_shutdown_skip(
        llm: FakeLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session judgement still under way at the shutdown deadline is cut, as a trace's
    queued judgement is; before, it vanished: no skip counted, nothing written onto the
    completion (a completion is judged once, never at the next start, so that work was lost
    with no mark and no count). Now it is stored as skipped ``shutdown`` and counted."""
    registry = CollectorRegistry()
    store = SessionJudgeStore(str(tmp_path / "s.db"))
    loop = LoopThread()
    loop.start()
    stage = JudgeStage(config(llm.api_base), loop, store, Metrics(registry))
    stage.start()
    entered = threading.Event()

    async def never_answers(record: dict[str, Any], turns: Any,
                            spent: Any = None) -> dict[str, Any]:
        entered.set()
        await asyncio.Event().wait()  # a slow model: only the stop ends it
        raise AssertionError("unreachable")

    assert stage.judge is not None
    monkeypatch.setattr(stage.judge, "judge_session", never_answers)
    try:
        stage.judge_session({"session_id": "conv-a", "service": "shop", "completion": 0},
                            [{"trace_id": "a1" * 16}], 40)
        assert entered.wait(30)
        stage.shutdown(0.2)
        assert store.written.wait(30)  # queued before the stop returned, written past it
        assert [(key, n, judge["overall"]) for key, n, judge in store.session_judges] == [
            (session_key("shop", "conv-a"), 1, {"status": "skipped", "reason": "shutdown"})]
        assert registry.get_sample_value("otel_eval_judge_skipped_total",
                                         {"reason": "shutdown"}) == 1
    finally:
        loop.stop()
        store.close()


def test_a_session_judgement_that_raises_is_a_counted_worker_error_skip(
        llm: FakeLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session judgement ended by an exception was stored as status ``error`` and counted
    nowhere, though a session not judged is skipped with its reason and counted in
    otel_eval_judge_skipped_total (docs/sessions.md), as a trace's judgement that raises is
    (``worker_error``)."""
    registry = CollectorRegistry()
    store = SessionJudgeStore(str(tmp_path / "s.db"))
    loop = LoopThread()
    loop.start()
    stage = JudgeStage(config(llm.api_base), loop, store, Metrics(registry))
    stage.start()

    async def broken(record: dict[str, Any], turns: Any, spent: Any = None) -> dict[str, Any]:
        raise RuntimeError("a bug in rendering this conversation")

    assert stage.judge is not None
    monkeypatch.setattr(stage.judge, "judge_session", broken)
    try:
        stage.judge_session({"session_id": "conv-a", "service": "shop", "completion": 0},
                            [{"trace_id": "a1" * 16}], 40)
        assert store.written.wait(30)
        assert [(key, n, judge["overall"]) for key, n, judge in store.session_judges] == [
            (session_key("shop", "conv-a"), 1, {"status": "skipped", "reason": "worker_error"})]
        assert registry.get_sample_value("otel_eval_judge_skipped_total",
                                         {"reason": "worker_error"}) == 1
    finally:
        stage.shutdown(5.0)
        loop.stop()
        store.close()


def test_a_session_after_the_loop_closed_is_a_counted_skip(tmp_path: Path) -> None:
    """The session job's thread handing a completion over once the loop has closed: counted
    as skipped ``shutdown``, never raised into the session job (as ``export``)."""
    registry = CollectorRegistry()
    store = SqliteStore(str(tmp_path / "s.db")).open()
    loop = LoopThread()
    loop.start()
    loop.stop()
    stage = JudgeStage(config(), loop, store, Metrics(registry))
    stage.judge_session({"session_id": "conv-a", "completion": 0}, [{"trace_id": "a1" * 16}],
                        40)
    assert registry.get_sample_value("otel_eval_judge_skipped_total",
                                     {"reason": "shutdown"}) == 1
    store.close()


class RefusingStore(SqliteStore):
    """``put_judge`` refused ``refusals`` times as a store refuses a write (the lock held
    past the busy timeout), then taken."""

    def __init__(self, path: str, refusals: int) -> None:
        super().__init__(path)
        self.open()
        self.refusals = refusals
        self.session_writes = 0

    def put_judge(self, trace_id: str, revision: int, judge: dict[str, Any],
                  evaluated_at_ns: int | None = None) -> bool:
        if self.refusals:
            self.refusals -= 1
            error = sqlite3.OperationalError("database is locked")
            error.sqlite_errorname = "SQLITE_BUSY"
            raise error
        return super().put_judge(trace_id, revision, judge, evaluated_at_ns)

    def put_session_judge(self, session_id: str, completions: int,
                          judge: dict[str, Any]) -> bool:
        self.session_writes += 1
        if self.refusals:
            self.refusals -= 1
            raise OSError("connection to the store lost")
        return super().put_session_judge(session_id, completions, judge)


def test_a_judgement_the_store_refuses_for_a_while_is_written_once_it_takes_it(
        tmp_path: Path) -> None:
    """A judgement paid for was dropped on the store's first refusal (a lock held past the
    busy timeout, a PostgreSQL failover): logged, the row left with no judge at all, and
    marked skipped ``restart`` at the next start, though the store refusing writes is a
    state the engine waits out (store.write_retry_*)."""
    store = RefusingStore(str(tmp_path / "r.db"), refusals=2)
    ev = evaluation()
    store.put_many([ev])
    writes = JudgeWrites(store, backoff=Backoff(0.0, 0.0))
    writes.start()
    judged = {"judges": {}, "overall": {"status": "ok", "passed": True}}
    after: list[bool] = []
    try:
        done = writes.put(ev.trace_id, 0, judged, after=after.append,
                          evaluated_at_ns=ev.evaluated_at_ns)
        assert done.result(30) is True
    finally:
        writes.stop()
    assert after == [True] and store.refusals == 0
    row = store.get(ev.trace_id)
    assert row is not None and row["judge"]["overall"] == judged["overall"]
    store.close()


def test_a_judgement_the_store_cannot_take_is_not_retried(tmp_path: Path) -> None:
    store = RefusingStore(str(tmp_path / "r.db"), refusals=0)
    writes = JudgeWrites(store, backoff=Backoff(0.0, 0.0))
    writes.start()
    try:
        done = writes.put("1" * 32, 0, {"judges": {}, "overall": {"status": "ok"}},
                          shape=lambda judge: {**judge, "bad": object()})
        with pytest.raises(TypeError):
            done.result(30)
    finally:
        writes.stop()
        store.close()


def test_a_session_judgement_the_store_refuses_for_a_while_is_written_again(
        tmp_path: Path) -> None:
    store = RefusingStore(str(tmp_path / "r.db"), refusals=2)
    writes = JudgeWrites(store, backoff=Backoff(0.0, 0.0))
    writes.start()
    try:
        done = writes.put_session(session_key("shop", "conv-a"), 1,
                                  {"judges": {}, "overall": {"status": "ok"}})
        assert done.result(30) is False  # taken by the store (no completion of that number)
    finally:
        writes.stop()
        store.close()
    assert (store.session_writes, store.refusals) == (3, 0)


def test_serve_refuses_an_hourly_cap_on_a_model_without_a_price(tmp_path: Path) -> None:
    """The judge stage starts only when its hourly cap can apply: a model litellm has no
    price for (newer than the pinned litellm, a vLLM name) with no judge prices was costed
    $0 a call, so judge.max_cost_usd_per_hour never stopped it."""
    from otel_eval.base.configcheck import ConfigError

    store = SqliteStore(str(tmp_path / "s.db")).open()
    loop = LoopThread()
    try:
        for model in ("openai/gpt-9-unreleased", "hosted_vllm/my-llama"):
            stage = JudgeStage(config("http://127.0.0.1:9/v1", model=model), loop, store,
                               Metrics(CollectorRegistry()))
            with pytest.raises(ConfigError, match="max_cost_usd_per_hour: 0"):
                stage.start()
    finally:
        store.close()
