"""What the judge stores is bounded and never silently lost (issue 33, findings 7 and 9): a
judgement is cut to fit the stored result (a 10 MB critique gave a 20.9 MB body, limit
4 MiB), and the work a killed process held is marked skipped ``restart`` at the next start
and counted (kill -9 lost 190 of 393 judge jobs without a mark)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from judge_fake_llm import FakeLLM, Reply, good
from judge_fixtures import combined_reply, config, evaluation
from prometheus_client import CollectorRegistry
from support.poll import poll

from otel_eval.base.aio import LoopThread
from otel_eval.base.model import Trace
from otel_eval.evaluate.judge.fit import fit, size
from otel_eval.evaluate.judge.stage import JudgeStage
from otel_eval.store import SqliteStore
from otel_eval.telemetry.metrics import Metrics

SHAPE = {"mode": "combined", "model": "m", "overall": {"status": "ok", "passed": True},
         "totals": {"calls": 1}}


def _judge(critique: str, n: int = 3) -> dict[str, Any]:
    entry = {"status": "ok", "scores": {"trace": 0.5},
             "critiques": [{"dimension": "trace", "score": 0.5, "text": critique}] * n}
    return {**SHAPE, "judges": {"trace": entry}}


def test_fit_cuts_each_text_then_the_whole_object_keeping_the_verdict() -> None:
    small = _judge("fine")
    assert fit(small, 10_000, 1024) is small  # nothing cut: the same object, no mark
    out = fit(_judge("é" * 50_000), 1_000_000, 1024)
    texts = [c["text"] for c in out["judges"]["trace"]["critiques"]]
    assert all(len(t.encode()) <= 1024 and t.endswith("…") for t in texts)
    assert out["truncated"]["texts_cut"] == 3 and out["truncated"]["dropped"] is None
    out = fit(_judge("x" * 5000, n=50), 2000, 1024)  # 50 texts of 64 bytes do not fit either
    assert size(out) <= 2000 and out["truncated"]["dropped"] == "details"
    assert out["judges"]["trace"]["scores"] == {"trace": 0.5}
    out = fit(_judge("x"), 10, 1024)  # no room at all: the verdict and totals stay
    assert {k: out[k] for k in SHAPE} == SHAPE and out["truncated"]["dropped"] == "judges"
    assert out["judges"] == {}


def _scripted(critique: str) -> Any:
    def route(body: dict[str, Any]) -> Reply:
        steps = re.search(r"steps ([\d, ]+)\.", body["messages"][-1]["content"])
        assert steps is not None
        reply = combined_reply([int(i) for i in steps.group(1).split(",")])
        reply["trace"]["critique"] = critique
        return good(reply)
    return route


def _wait_judged(store: SqliteStore, trace_id: str) -> dict[str, Any]:
    """Poll the row until its judge object is stored."""
    judge = poll(lambda: (store.get(trace_id) or {}).get("judge"),
                 f"trace {trace_id} to get a judge object", interval_s=0.02)
    return dict(judge)


def _journaled(stage: JudgeStage) -> None:
    poll(lambda: stage._journal is not None and stage._journal.pending(),
         "the queued trace to reach the journal", interval_s=0.02)


def test_a_huge_critique_is_stored_cut(llm: FakeLLM, tmp_path: Path) -> None:
    llm.route = _scripted("z" * 600_000)  # under max_reply_bytes (1 MiB), over a value's 16 KiB
    store = SqliteStore(str(tmp_path / "s.db")).open()
    ev = evaluation(trace_id="a1" * 16)
    store.put_many([ev])
    loop = LoopThread()
    loop.start()
    stage = JudgeStage(config(llm.api_base, combined=True), loop, store,
                       Metrics(CollectorRegistry()), cache_path=str(tmp_path / "s.db"))
    try:
        stage.start()
        stage.export(Trace(ev.trace_id, [], "complete"), ev)
        judge = _wait_judged(store, ev.trace_id)
        text = judge["judges"]["trace"]["critiques"][0]["text"]
        assert len(text) <= 16 * 1024 and text.startswith("zzz")
        assert judge["truncated"]["texts_cut"] == 1
        assert judge["judges"]["trace"]["scores"]["trace"] == 0.7
    finally:
        stage.shutdown(5.0)
        loop.stop()
        store.close()


def test_work_of_a_killed_process_is_marked_restart_and_counted(llm: FakeLLM,
                                                                tmp_path: Path) -> None:
    llm.route = lambda body: Reply(hang=True)  # the judge call never ends: then the "kill"
    path = str(tmp_path / "s.db")
    store = SqliteStore(path).open()
    ev = evaluation(trace_id="b2" * 16)
    store.put_many([ev])
    dead_loop, loop = LoopThread(), LoopThread()
    dead_loop.start()
    # its call hangs past the test (no timeout, no retry): nothing of it is ever stored
    dead = JudgeStage(config(llm.api_base, combined=True, timeout_s=600.0, max_retries=0),
                      dead_loop, store, Metrics(CollectorRegistry()), cache_path=path)
    registry = CollectorRegistry()
    restarted = JudgeStage(config(llm.api_base, combined=True), loop, store,
                           Metrics(registry), cache_path=path)
    try:
        dead.start()
        dead.export(Trace(ev.trace_id, [], "complete"), ev)
        assert llm.arrived.wait(30)  # queued and being judged when the process "dies",
        _journaled(dead)  # its journal entry written (the writer thread's, after the submit)
        loop.start()  # nothing of it is stored; a new process starts on the same files
        restarted.start()
        judge = _wait_judged(store, ev.trace_id)
        assert judge["overall"] == {"status": "skipped", "reason": "restart"}
        assert registry.get_sample_value("otel_eval_judge_skipped_total",
                                         {"reason": "restart"}) == 1.0
    finally:
        llm.released.set()
        restarted.shutdown(5.0)
        dead.shutdown(5.0)
        loop.stop()
        dead_loop.stop()
        store.close()
