"""The store's row writers (engine, judge, feedback) cannot lose each other's work: each
changes its own part of the row for the revision it read."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from support.harness import running_service

from otel_eval.app.config import Config
from otel_eval.base.results import Evaluation, Finding, Verdict
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.store import Store
from otel_eval.store.query import EvaluationQuery

JUDGE = {"judges": {}, "overall": {"status": "ok", "process_score": 0.9}}


def _evaluation(trace_id: str, revision: int = 0) -> Evaluation:
    traj = Trajectory(trace_id, "otlp", "complete", [], agent="a", revision=revision)
    loop = Finding("loop", "repeated_call", "warning", "x called twice")
    return Evaluation(traj, [loop], Verdict(True, []), evaluated_at_ns=1)


def _feedback(store: Store, body: dict[str, Any], outcome: str) -> bool:
    updated = Evaluator(Config()).with_outcome(body, outcome)
    return store.put_feedback_and_verdict(body["trace_id"], body["revision"], outcome, 1,
                                          updated["findings"], updated["verdict"])


def test_feedback_read_before_the_judge_wrote_keeps_the_judge(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    store.put_many([_evaluation("a" * 32)])
    read = store.get("a" * 32)  # feedback reads ...
    assert read is not None and read.get("judge") is None
    assert store.put_judge("a" * 32, 0, JUDGE)  # ... the judge writes ...
    assert _feedback(store, read, "failure")  # ... feedback writes what it computed
    body = store.get("a" * 32)
    assert body is not None
    assert body["judge"] == JUDGE
    assert body["verdict"]["outcome"] == "failure"


def test_feedback_moves_the_passed_column_with_the_verdict(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    store.put_many([_evaluation("e" * 32)])
    assert store.put_feedback_and_verdict("e" * 32, 0, "failure", 1, [],
                                          {"passed": False, "reasons": ["r"]})
    failed = store.query(EvaluationQuery(passed=False)).evaluations
    assert [b["trace_id"] for b in failed] == ["e" * 32]


def test_the_judge_after_feedback_keeps_the_verdict(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    store.put_many([_evaluation("b" * 32)])
    read = store.get("b" * 32)
    assert read is not None and _feedback(store, read, "success")
    assert store.put_judge("b" * 32, 0, JUDGE)
    body = store.get("b" * 32)
    assert body is not None and body["judge"] == JUDGE
    assert body["verdict"]["outcome"] == "success"


def test_writers_for_an_older_revision_change_nothing(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    store.put_many([_evaluation("c" * 32)])
    read = store.get("c" * 32)
    assert read is not None
    store.put_many([_evaluation("c" * 32, revision=1)])  # late spans: the engine re-evaluated
    assert not _feedback(store, read, "failure")
    assert not store.put_judge("c" * 32, 0, JUDGE)
    body = store.get("c" * 32)
    assert body is not None and body["revision"] == 1
    assert body.get("judge") is None and body["verdict"]["outcome"] is None


def test_concurrent_judge_and_feedback_writers_both_land(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    ids = [f"{i:032x}" for i in range(1, 201)]
    store.put_many([_evaluation(t) for t in ids])
    start = threading.Barrier(2)

    def judge() -> None:
        start.wait()
        for t in ids:
            assert store.put_judge(t, 0, {**JUDGE, "trace": t})

    def feedback() -> None:
        start.wait()
        for t in ids:
            body = store.get(t)
            assert body is not None and _feedback(store, body, "failure")

    threads = [threading.Thread(target=judge), threading.Thread(target=feedback)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for t in ids:
        body = store.get(t)
        assert body is not None and body["judge"]["trace"] == t
        assert body["verdict"]["outcome"] == "failure"


def test_service_feedback_returns_the_row_with_the_judge(tmp_path: Path) -> None:
    with running_service(tmp_path) as h:
        h.svc.store.put_many([_evaluation("d" * 32)])
        assert h.svc.store.put_judge("d" * 32, 0, JUDGE)
        body = h.svc.feedback("d" * 32, "failure")
        assert body is not None and body["judge"] == JUDGE
        assert body["verdict"]["outcome"] == "failure"


def test_put_many_says_which_rows_superseded_one_already_stored(tmp_path: Path) -> None:
    """One lookup per batch: a trace stored before, or earlier in the same batch, is
    superseded; the last revision written wins."""
    store = Store(str(tmp_path / "s.db"))
    assert store.put_many([_evaluation("a" * 32)]) == [False]
    got = store.put_many([_evaluation("b" * 32), _evaluation("a" * 32, 1),
                          _evaluation("b" * 32, 1), _evaluation("c" * 32)])
    assert got == [False, True, True, False]
    bodies = [store.get(t) for t in ("a" * 32, "b" * 32, "c" * 32)]
    assert [b["revision"] if b else None for b in bodies] == [1, 1, 0]
