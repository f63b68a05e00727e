"""One contract for both stores: every test runs on SQLite (a temp file) and on PostgreSQL (a
fresh database on the real server the suite starts). Writes, the revision rules, the results
API's filters and cursor, feedback, retention, the issues catalogue and its advisory lock,
and the versioned migrations."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from otel_eval.app.config import Config
from otel_eval.base import model
from otel_eval.base.results import Evaluation, Finding, Verdict
from otel_eval.base.steps import Step, Trajectory
from otel_eval.evaluate.calibration import scores_of
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.feedback import Feedback
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.reader import SessionReader
from otel_eval.evaluate.stage import evaluate_and_store
from otel_eval.outputs.issues.catalogue import Catalogue, StoredIssue
from otel_eval.store import EvaluationStore, SqliteStore, open_store
from otel_eval.store.base import RETENTION_BATCH, Window
from otel_eval.store.migrations import LATEST, SchemaError
from otel_eval.store.query import (
    LABEL_CHARS,
    OTHER_LABEL,
    UNKNOWN_LABEL,
    Cursor,
    EvaluationQuery,
)
from otel_eval.store.sessions import SessionQuery
from otel_eval.telemetry.labels import MAX_LABEL_CHARS, OTHER, UNKNOWN, labels_of
from otel_eval.telemetry.metrics import Metrics

T0 = 1_764_547_200 * 10**9
JUDGE = {"judges": {}, "overall": {"status": "ok", "process_score": 0.9}}

Open = Callable[[], EvaluationStore]


@pytest.fixture
def store(stores: Open) -> EvaluationStore:
    return stores()


def _ev(i: int, *, revision: int = 0, agent: str = "planner", passed: bool | None = True,
        detector: str | None = None, status: model.TraceStatus = "complete",
        at: int | None = None, service: str = "shop") -> Evaluation:
    traj = Trajectory(f"{i:032x}", "otlp", status, [], service=service, agent=agent,
                      task_id=f"task-{i % 3}", revision=revision)
    findings = [Finding(detector, "stagnation" if detector == "loop" else "over",
                        "error", "x")] if detector else []
    verdict = None if passed is None else Verdict(passed, [])
    return Evaluation(traj, findings, verdict,
                      evaluated_at_ns=T0 + i * 10**9 if at is None else at)


def _ids(rows: list[dict[str, Any]]) -> list[int]:
    return [int(b["trace_id"], 16) for b in rows]


def test_put_get_and_supersede(store: EvaluationStore) -> None:
    assert store.put_many([]) == []
    assert store.put_many([_ev(1), _ev(2)]) == [False, False]
    assert store.put_many([_ev(1, revision=1, agent="coder")]) == [True]
    # the same trace twice in one batch: the second supersedes the first
    assert store.put_many([_ev(3), _ev(3, revision=1)]) == [False, True]
    body = store.get(f"{1:032x}")
    assert body == _ev(1, revision=1, agent="coder").to_json()
    assert store.get("f" * 32) is None
    assert store.get_stamped(f"{1:032x}") == (body, T0 + 10**9)  # what replays send again
    assert store.get_stamped("f" * 32) is None
    assert store.count() == 3


def test_the_same_evaluation_written_again_supersedes_nothing(store: EvaluationStore) -> None:
    """A row of the same revision evaluated at the same time is the evaluation itself (a
    batch written again after its commit's answer was lost): both stores say so alike."""
    assert store.put_many([_ev(1), _ev(2)]) == [False, False]
    assert store.put_many([_ev(1), _ev(2, at=T0)]) == [False, True]
    assert store.put_many([_ev(1, revision=1), _ev(1, revision=1)]) == [True, False]


def test_a_replay_at_a_lower_revision_supersedes(store: EvaluationStore) -> None:
    """A replay after a crash restarts at revision 0 and carries every pending span."""
    store.put_many([_ev(1, revision=2)])
    assert store.put_many([_ev(1, revision=0, agent="replayed")]) == [True]
    body = store.get(f"{1:032x}")
    assert body is not None and (body["revision"], body["agent"]) == (0, "replayed")


def test_writers_change_only_the_revision_they_read(store: EvaluationStore) -> None:
    tid = f"{1:032x}"
    store.put_many([_ev(1)])
    assert store.put_judge(tid, 0, JUDGE)
    assert store.put_feedback_and_verdict(tid, 0, "failure", 1, [],
                                          {"passed": False, "reasons": ["r"]})
    body = store.get(tid)
    assert body is not None and body["judge"] == JUDGE and body["verdict"]["passed"] is False
    assert _ids(store.query(EvaluationQuery(passed=False)).evaluations) == [1]
    store.put_many([_ev(1, revision=1)])  # re-evaluated: writers of revision 0 are late
    assert not store.put_judge(tid, 0, {"overall": {"status": "late"}})
    assert not store.put_feedback_and_verdict(tid, 0, "success", 2, [],
                                              {"passed": True, "reasons": []})
    assert store.get(tid) == _ev(1, revision=1).to_json()
    assert store.feedback(tid) == "failure"  # a write refused writes no outcome either
    assert not store.put_judge("e" * 32, 0, JUDGE)  # gone


def test_judge_and_feedback_from_two_connections_both_land(stores: Open) -> None:
    """As from two processes: each writer its own connection, the same rows, at once."""
    engine, judge, feedback = stores(), stores(), stores()
    engine.put_many([_ev(i) for i in range(40)])
    evaluator = Evaluator(Config())
    errors: list[BaseException] = []

    def run(work: Callable[[int], None]) -> None:
        try:
            for i in range(40):
                work(i)
        except BaseException as e:  # re-raised below
            errors.append(e)

    def judge_one(i: int) -> None:
        assert judge.put_judge(f"{i:032x}", 0, JUDGE)

    def feedback_one(i: int) -> None:
        body = feedback.get(f"{i:032x}")
        assert body is not None
        updated = evaluator.with_outcome(body, "failure")
        assert feedback.put_feedback_and_verdict(body["trace_id"], 0, "failure", i,
                                                 updated["findings"], updated["verdict"])

    threads = [threading.Thread(target=run, args=(w,)) for w in (judge_one, feedback_one)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(40):
        body = engine.get(f"{i:032x}")
        assert body is not None and body["judge"] == JUDGE, i
        assert body["verdict"]["outcome"] == "failure", i


class _Paused(Evaluator):
    """Runs ``between()`` once, in the first re-judging: after that feedback read the row and
    before it writes (where a request thread may be descheduled), in a chosen order."""

    def __init__(self, between: Callable[[], object]) -> None:
        super().__init__(Config())
        self._between: Callable[[], object] | None = between

    def with_outcome(self, body: dict[str, Any], outcome: str) -> dict[str, Any]:
        between, self._between = self._between, None
        if between is not None:
            between()
        return super().with_outcome(body, outcome)


def _feedback(store: EvaluationStore, evaluator: Evaluator) -> Feedback:
    return Feedback(store, evaluator, Metrics(CollectorRegistry()).prediction)


def test_conflicting_feedback_leaves_the_verdict_of_the_outcome_stored(stores: Open) -> None:
    """Two outcomes for one trace at once, each on its own connection: B's whole request runs
    after A read the row and before A writes. Before, A had written its outcome first and its
    verdict last, B both in between: the feedback table said B's failure (what calibration,
    the engine and training read), the verdict A's success. Now each writes both at once:
    the last to write, A, decides both."""
    a_store, b_store = stores(), stores()
    a_store.put_many([_ev(1)])
    tid = f"{1:032x}"
    b = _feedback(b_store, Evaluator(Config()))
    a = _feedback(a_store, _Paused(lambda: b.record(tid, "failure")))
    answered = a.record(tid, "success")
    assert answered is not None and answered["verdict"]["outcome"] == "success"
    stored = b_store.get(tid)
    assert stored is not None and stored["verdict"]["outcome"] == "success"
    assert b_store.feedback(tid) == "success"
    assert [o for o, _ in b_store.labelled(10)] == ["success"]


def test_feedback_lands_on_the_evaluation_it_read_not_a_replay_of_its_revision(
        stores: Open) -> None:
    """Another worker (a Kafka replay after a rebalance, or a restart's spool replay)
    evaluates the trace again at revision 0, now with a loop, between feedback's read and its
    write. Before, the write matched the revision only: it put the first evaluation's
    findings (none) and verdict over the replay's, and the loop was gone from the fleet's
    results. Now it lands only on the evaluation read: refused, read again, re-judged."""
    a_store, worker = stores(), stores()
    a_store.put_many([_ev(1, at=T0)])
    tid = f"{1:032x}"
    replay = _ev(1, detector="loop", passed=False, at=T0 + 5 * 10**9)
    feedback = _feedback(a_store, _Paused(lambda: worker.put_many([replay])))
    answered = feedback.record(tid, "failure")
    assert answered is not None
    stored = worker.get(tid)
    assert stored is not None and [f["detector"] for f in stored["findings"]] == ["loop"]
    assert stored["verdict"]["outcome"] == "failure" and worker.feedback(tid) == "failure"


def test_the_judge_writes_only_onto_the_evaluation_it_judged(stores: Open) -> None:
    """A replay at the same revision is another evaluation: a judgement of the first one is
    refused on it (its own judge writes there), as a later revision's is."""
    a_store, worker = stores(), stores()
    a_store.put_many([_ev(1, at=T0)])
    tid = f"{1:032x}"
    worker.put_many([_ev(1, detector="loop", passed=False, at=T0 + 5 * 10**9)])
    assert not a_store.put_judge(tid, 0, JUDGE, evaluated_at_ns=T0)
    assert not a_store.put_feedback_and_verdict(tid, 0, "success", 1, [],
                                                {"passed": True, "reasons": []},
                                                evaluated_at_ns=T0)
    stored = worker.get(tid)
    assert stored is not None and "judge" not in stored and stored["verdict"]["passed"] is False
    assert worker.feedback(tid) is None
    assert a_store.put_judge(tid, 0, JUDGE, evaluated_at_ns=T0 + 5 * 10**9)
    stored = worker.get(tid)
    assert stored is not None and stored["judge"] == JUDGE


def test_feedback_on_a_row_deleted_meanwhile_records_nothing(stores: Open) -> None:
    """Retention deleted the trace between feedback's read and its write: nothing is recorded
    (before, the outcome's row stayed, of no evaluation), the answer is a 404."""
    store, retention = stores(), stores()
    store.put_many([_ev(1)])
    tid = f"{1:032x}"
    feedback = _feedback(store, _Paused(lambda: retention.delete_older_than(T0 + 10**12)))
    assert feedback.record(tid, "failure") is None
    assert store.get(tid) is None and store.feedback(tid) is None


def test_retention_deletes_the_feedback_of_the_evaluations_it_deletes(
        target: str, store: EvaluationStore) -> None:
    """Before, it deleted evaluations only: the feedback table grew for ever (and ``labelled``
    sorted all of it at each read; it reads along feedback_by_time now)."""
    store.put_many([_ev(i) for i in range(1, 5)])  # evaluated at T0 + i s
    ids = [f"{i:032x}" for i in range(1, 5)]
    for i, tid in enumerate(ids):
        store.put_feedback(tid, "success" if i % 2 else "failure", i)
    store.put_feedback("f" * 32, "failure", 9)  # left by an earlier version: no evaluation
    assert store.delete_older_than(T0 + 3 * 10**9) == 2
    assert store.feedback_many([*ids, "f" * 32]) == {ids[2]: "failure", ids[3]: "success"}
    assert [o for o, _ in store.labelled(10)] == ["success", "failure"]
    assert store.delete_older_than(T0 + 10**12) == 2
    assert store.feedback_many(ids) == {} and store.labelled(10) == []
    index = ("SELECT name FROM sqlite_master WHERE type = 'index'"
             if not target.startswith("postgresql://") else "SELECT indexname FROM pg_indexes")
    assert ("feedback_by_time",) in _sql(target, index)


def test_retention_deletes_in_batches_oldest_first_with_their_feedback_and_sessions(
        store: EvaluationStore) -> None:
    """A batch a transaction: every expired evaluation, its feedback and its session's row go
    however many batches it takes; the rest (a session with a turn left) stays."""
    store.put_many([_turn(i, "old" if i < 4 else ("both" if i < 7 else None), T0 + i)
                    for i in range(1, 10)])  # turns of "old" at 1-3, of "both" at 4-6
    for i in range(1, 10):
        store.put_feedback(f"{i:032x}", "success", i)
    asked: list[bool] = []  # a shutdown: the pass ends after the batch under way

    def stop() -> bool:
        asked.append(True)
        return len(asked) > 1
    assert store.delete_older_than(T0 + 6, batch=2, stop=stop) == 2
    assert store.count() == 7 and store.session_record(_key("old")) is not None
    assert store.delete_older_than(T0 + 6, batch=2) == 3
    assert store.count() == 4 and store.get(f"{5:032x}") is None
    assert sorted(store.feedback_many([f"{i:032x}" for i in range(1, 10)])) == [
        f"{i:032x}" for i in range(6, 10)]
    assert store.session_record(_key("old")) is None
    kept = store.session_record(_key("both"))
    assert kept is not None and kept.last_turn_ns == T0 + 6
    assert store.delete_older_than(T0 + 6, batch=2) == 0


def test_another_writer_gets_in_while_retention_works_through_a_backlog(
        tmp_path: Path) -> None:
    """SQLite: retention let go of the file's write lock only once every expired row was
    deleted (50,000 evaluations of 40 kB: 37 s, past the busy wait of the worker processes
    writing the same file, whose writes were then refused as `locked`). Now each batch is
    its own transaction: a writer on another connection gets in between two."""
    path = str(tmp_path / "store.db")
    store = open_store(path)
    assert isinstance(store, SqliteStore)
    store.put_many([_ev(i) for i in range(1, 3 * RETENTION_BATCH)])
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    written: list[int] = []  # expired rows left when the other writer's write went through
    deleting = False

    def between(statement: str) -> None:
        nonlocal deleting
        deleting = deleting or statement.startswith("DELETE FROM evaluations")
        if deleting and not written:
            try:
                other.execute("INSERT INTO agent_history VALUES ('s', 'f', 'a', 1)")
            except sqlite3.OperationalError as e:  # the write lock is held: "locked"
                assert "locked" in str(e)
                return
            written.append(other.execute("SELECT COUNT(*) FROM evaluations WHERE "
                                         "evaluated_at_ns < ?", (T0 + 10**13,)).fetchone()[0])

    store._db.set_trace_callback(between)
    try:
        assert store.delete_older_than(T0 + 10**13) == 3 * RETENTION_BATCH - 1
    finally:
        store._db.set_trace_callback(None)
        other.close()
        store.close()
    assert written and written[0] > 0


def _fill(store: EvaluationStore) -> None:
    store.put_many([_ev(i, agent="planner" if i % 2 else "coder", passed=i % 4 != 0,
                        detector="loop" if i % 5 == 0 else ("budget" if i % 7 == 0 else None),
                        status="incomplete" if i == 9 else "complete") for i in range(1, 41)])


@pytest.mark.parametrize(("q", "expected"), [
    (EvaluationQuery(agent="planner", passed=True, limit=100), list(range(39, 0, -2))),
    (EvaluationQuery(agent="coder", passed=False), [40, 36, 32, 28, 24, 20, 16, 12, 8, 4]),
    (EvaluationQuery(detector="loop"), [40, 35, 30, 25, 20, 15, 10, 5]),
    (EvaluationQuery(detector="budget:over", agent="planner"), [21, 7]),
    (EvaluationQuery(detector="loop:over"), []),
    # any of several kinds (an alert's link: the kinds its metric counts)
    (EvaluationQuery(detector="loop:cycle,stagnation"), [40, 35, 30, 25, 20, 15, 10, 5]),
    (EvaluationQuery(detector="budget:under,over", agent="planner"), [21, 7]),
    (EvaluationQuery(status="incomplete"), [9]),
    (EvaluationQuery(task_id="task-0", since_ns=T0 + 30 * 10**9), [39, 36, 33, 30]),
    (EvaluationQuery(since_ns=T0 + 36 * 10**9, until_ns=T0 + 39 * 10**9 + 1), [39, 38, 37, 36]),
    (EvaluationQuery(service="elsewhere"), []),
])
def test_query_filters(store: EvaluationStore, q: EvaluationQuery, expected: list[int]) -> None:
    _fill(store)
    assert _ids(store.query(q).evaluations) == expected


def test_a_metric_label_selects_the_runs_it_counts(store: EvaluationStore) -> None:
    """A dashboard or alert link filters by the (service, agent) labels of a series; a run
    with no agent is counted as agent="unknown", and agent=unknown matched no stored row (its
    agent is NULL), so the page behind every "unknown" series listed nothing. A label value
    (``labels_of``: missing or "" as "unknown", a name cut to 128 characters, its control
    characters escaped) now selects the runs it labels; "_other" (pairs past the metrics'
    budget) filters nothing."""
    assert (UNKNOWN_LABEL, OTHER_LABEL, LABEL_CHARS) == (UNKNOWN, OTHER, MAX_LABEL_CHARS)
    long = "agent-" + "x" * 200
    esc = "\x1b]52;c;cHduZWQ=\x07\r\u202e"  # escaped in the label (``label_text``)
    pairs = [("shop", None), ("shop", ""), ("shop", "unknown"), ("shop", "planner"),
             (None, "planner"), ("", None), ("shop", long), ("shop", long[:128]),
             ("shop" + esc, "bot" + esc), ("shop", "bot\\x1b]52"), ("shop", esc + long),
             ("shop", (esc + long)[:128])]
    rows = []
    for i, (service, agent) in enumerate(pairs, 1):
        ev = _ev(i, service="shop")
        ev.trajectory.service, ev.trajectory.agent = service, agent
        rows.append(ev)
    store.put_many(rows)
    labelled: dict[tuple[str, str], list[int]] = {}
    for i, (service, agent) in reversed(list(enumerate(pairs, 1))):
        labelled.setdefault(labels_of(service, agent), []).append(i)
    assert labelled[("shop", "unknown")] == [3, 2, 1]
    for (service, agent), expected in labelled.items():
        q = EvaluationQuery.from_params({"service": [service], "agent": [agent]})
        assert _ids(store.query(q).evaluations) == expected, (service, agent[:10])
    everything = EvaluationQuery.from_params({"service": ["_other"], "agent": ["_other"]})
    assert _ids(store.query(everything).evaluations) == list(range(len(pairs), 0, -1))
    sessions = SessionReader(store, SessionsConfig())
    assert sessions.page(SessionQuery(service="shop", agent="unknown"))["sessions"] == []
    turn = _ev(20, service="shop")
    turn.trajectory.agent, turn.trajectory.session_id = None, "conversation-1"
    store.put_many([turn])
    found = sessions.page(SessionQuery.from_params({"service": ["shop"],
                                                    "agent": ["unknown"]}))["sessions"]
    assert [s["session_id"] for s in found] == ["conversation-1"]


def test_cursor_pages_through_ties_without_gaps(store: EvaluationStore) -> None:
    """Half the rows share one evaluation time: the cursor orders them by trace id."""
    store.put_many([_ev(i, at=T0 if i % 2 else T0 + i) for i in range(1, 30)])
    seen: list[int] = []
    cursor: Cursor | None = None
    while True:
        page = store.query(EvaluationQuery(limit=4, cursor=cursor))
        seen += _ids(page.evaluations)
        if page.next_cursor is None:
            break
        cursor = Cursor.decode(page.next_cursor)
    evens = sorted(range(2, 30, 2), reverse=True)
    assert seen == evens + list(range(1, 30, 2))
    assert _ids(store.latest(3)) == evens[:3]


def test_a_detector_page_looks_at_a_bounded_number_of_runs(store: EvaluationStore) -> None:
    """With ``detector`` a page looks at 5 x limit runs at most (each one's body is read),
    then ends with its cursor, in both stores; the cursors still reach every match."""
    _fill(store)
    first = store.query(EvaluationQuery(detector="budget", limit=1))
    assert first.evaluations == [] and first.next_cursor is not None  # 40..36: none
    seen: list[int] = []
    cursor: Cursor | None = None
    while True:
        page = store.query(EvaluationQuery(detector="budget", limit=1, cursor=cursor))
        seen += _ids(page.evaluations)
        if page.next_cursor is None:
            break
        cursor = Cursor.decode(page.next_cursor)
    assert seen == [28, 21, 14, 7]


def test_pages_are_bounded_by_bytes_and_end_early_with_their_cursor(
        store: EvaluationStore) -> None:
    """Issue 21: one page of 20 bodies of 4 MB was 80 MB (566 MB seen). A page ends before
    the body that would take it past ``max_bytes``, never empty, and its cursor goes on from
    there: every row once, in order."""
    evs = [_ev(i, at=T0 + i) for i in range(1, 13)]
    for ev in evs:  # 10 kB each, 3 of them 40 kB
        ev.trajectory.task = "x" * (40_000 if ev.trace_id[-1] in "369" else 10_000)
    store.put_many(evs)
    pages: list[list[int]] = []
    seen: list[int] = []
    cursor: Cursor | None = None
    while True:
        page = store.query(EvaluationQuery(limit=10, cursor=cursor, max_bytes=35_000))
        pages.append(_ids(page.evaluations))
        seen += pages[-1]
        if page.next_cursor is None:
            break
        cursor = Cursor.decode(page.next_cursor)
    assert seen == list(range(12, 0, -1))
    # a 40 kB body alone is a page (never an empty one); the others stop before 35 kB
    assert pages == [[12, 11, 10], [9], [8, 7], [6], [5, 4], [3], [2, 1]]
    whole = store.query(EvaluationQuery(limit=1000))
    assert len(whole.evaluations) == 12 and whole.next_cursor is None


def test_a_page_is_bounded_by_the_bytes_the_api_sends(store: EvaluationStore) -> None:
    """Bodies are stored as UTF-8 text and sent with non-ASCII escaped (``json.dumps``'
    default: "日" is 6 bytes): the bound counts those bytes, not the stored characters.
    Before, two bodies of 2,000 CJK characters (~12 kB each as sent) made one 14 kB page."""
    evs = [_ev(i, at=T0 + i) for i in (1, 2)]
    for ev in evs:
        ev.trajectory.task = "日" * 2000
    store.put_many(evs)
    sent = len(json.dumps(store.get(f"{2:032x}")))
    assert sent > 12_000
    page = store.query(EvaluationQuery(limit=10, max_bytes=sent + 2_000))
    assert _ids(page.evaluations) == [2] and page.next_cursor is not None
    page = store.query(EvaluationQuery(limit=10, max_bytes=2 * sent))
    assert _ids(page.evaluations) == [2, 1] and page.next_cursor is None


def test_the_window_is_read_in_chunks_and_kept_as_asked(store: EvaluationStore) -> None:
    """``since`` reads SINCE_CHUNK rows per query (keyset: ties on the evaluation time
    included) and, with ``keep``, holds only what it keeps of each body (issue 21: the issues
    job held 10,000 whole bodies of 47 kB)."""
    from otel_eval.store.base import SINCE_CHUNK

    n = 2 * SINCE_CHUNK + 7
    store.put_many([_ev(i, at=T0 + (i // 3) * 10**9) for i in range(1, n + 1)])  # ties of 3
    newest_first = sorted(range(1, n + 1), key=lambda i: (-(i // 3), i))
    assert _ids(store.since(T0 - 1).rows) == newest_first[::-1]  # oldest first
    window = store.since(T0 - 1, keep=lambda b: {"trace_id": b["trace_id"]}).rows
    assert _ids(window) == newest_first[::-1]
    assert all(set(b) == {"trace_id"} for b in window)
    newest = store.since(T0 - 1, limit=SINCE_CHUNK + 1)
    assert _ids(newest.rows) == newest_first[:SINCE_CHUNK + 1][::-1] and newest.truncated


def test_content_digests_are_stored_with_each_row_and_read_in_one_batch(stores: Open) -> None:
    a, b = stores(), stores()  # two workers of a fleet on one store
    digested = [_ev(i) for i in range(1, 4)]
    for i, ev in enumerate(digested, 1):
        ev.content_digest = f"d{i}"
    a.put_many([*digested, _ev(4)])  # 4: no digest (a row from before the column)
    ids = [f"{i:032x}" for i in range(1, 6)]
    assert b.content_digests(ids) == {ids[0]: "d1", ids[1]: "d2", ids[2]: "d3", ids[3]: ""}
    assert b.content_digests([]) == {}
    # a re-evaluation (late spans: new content) replaces the digest with the row
    again = _ev(2, revision=1)
    again.content_digest = "d2-late"
    assert b.put_many([again]) == [True]
    assert a.content_digests(ids[:2]) == {ids[0]: "d1", ids[1]: "d2-late"}
    many = [f"{i:032x}" for i in range(1200)]  # past SQLite's 500-id chunks
    assert len(a.content_digests(many)) == 4


def test_a_since_poll_misses_a_run_committed_late_and_an_overlap_finds_it(
        stores: Open) -> None:
    """docs/api.md, polling for new runs: ``since`` selects the evaluation time, which a run
    has before it is stored, so a run another writer (a worker process) commits after a poll
    that returned a run evaluated later is missed by a poll from that time, and found by one
    set back by a margin; the judge's write keeps the run's evaluation time (not returned
    again); a new revision is, at its own time."""
    first, second = stores(), stores()
    later = _ev(2, at=T0 + 2 * 10**9)
    first.put_many([later])
    assert _ids(second.query(EvaluationQuery(since_ns=T0)).evaluations) == [2]
    second.put_many([_ev(1, at=T0 + 10**9)])  # evaluated before, committed after that poll
    assert _ids(first.query(EvaluationQuery(since_ns=T0 + 2 * 10**9)).evaluations) == [2]
    assert _ids(first.query(EvaluationQuery(since_ns=T0 + 10**9 // 2)).evaluations) == [2, 1]
    assert first.put_judge(f"{2:032x}", 0, JUDGE, T0 + 2 * 10**9)
    assert first.query(EvaluationQuery(since_ns=T0 + 3 * 10**9)).evaluations == []
    second.put_many([_ev(2, revision=1, at=T0 + 4 * 10**9)])
    (again,) = first.query(EvaluationQuery(since_ns=T0 + 3 * 10**9)).evaluations
    assert (again["trace_id"], again["revision"]) == (f"{2:032x}", 1)


def test_a_results_record_owed_stays_until_the_debt_of_its_own_outcome_is_paid(
        store: EvaluationStore) -> None:
    """``results_owed`` (migration 21): an outcome's results-topic record, owed until
    delivered; a later outcome's owing of the same trace is not paid by the earlier
    delivery."""
    a, b = f"{7:032x}", f"{8:032x}"
    assert store.results_owed(10) == []
    store.owe_results(b, 2)
    store.owe_results(a, 1)
    assert store.results_owed(10) == [(a, 1), (b, 2)]  # oldest first
    assert store.results_owed(1) == [(a, 1)]
    store.owe_results(a, 3)  # a second outcome before the first's record was delivered
    store.results_paid(a, 1)  # the first's delivery: the second's is still owed
    assert store.results_owed(10) == [(b, 2), (a, 3)]
    store.results_paid(a, 3)
    store.results_paid(b, 2)
    assert store.results_owed(10) == []


def test_feedback_retention_and_window(store: EvaluationStore) -> None:
    tid = f"{5:032x}"
    assert store.feedback(tid) is None
    store.put_feedback(tid, "success", 1)
    store.put_feedback(tid, "failure", 2)
    assert store.feedback(tid) == "failure"
    store.put_feedback("a" * 32, "success", 3)
    assert store.feedback_many([tid, "a" * 32, "b" * 32]) == {tid: "failure", "a" * 32: "success"}
    assert store.feedback_many([]) == {}
    assert store.feedback_many([f"{i:032x}" for i in range(1200)]) == {tid: "failure"}
    store.put_many([_ev(i) for i in range(1, 11)])
    assert _ids(store.since(T0 + 7 * 10**9).rows) == [8, 9, 10]
    assert store.since(T0 + 7 * 10**9).truncated is False
    assert store.delete_older_than(T0 + 4 * 10**9) == 3
    assert store.count() == 7 and store.get(f"{3:032x}") is None


def test_a_window_cut_at_its_limit_says_so(store: EvaluationStore) -> None:
    """Past ``limit`` ``since`` keeps the newest; it said nothing, so any caller but the
    issues job (which asked for one row more) took the newest rows for the whole window.
    The cut comes with the rows now."""
    store.put_many([_ev(i) for i in range(1, 11)])
    cut = store.since(0, limit=2)
    assert (_ids(cut.rows), cut.truncated) == ([9, 10], True)  # the newest, oldest first
    whole = store.since(0, limit=10)  # exactly the limit: nothing left out
    assert (len(whole.rows), whole.truncated) == (10, False)


def test_labelled_runs_join_each_outcome_to_its_evaluation_newest_first(
        store: EvaluationStore) -> None:
    store.put_many([_ev(i, agent=f"a{i}") for i in range(1, 5)])
    store.put_feedback(f"{2:032x}", "success", 10)
    store.put_feedback(f"{4:032x}", "failure", 30)
    store.put_feedback(f"{3:032x}", "success", 20)
    store.put_feedback("f" * 32, "failure", 40)  # no evaluation (deleted): not labelled
    found = store.labelled(10)
    assert [(o, b["agent"]) for o, b in found] == [("failure", "a4"), ("success", "a3"),
                                                   ("success", "a2")]
    assert [b["agent"] for _, b in store.labelled(1)] == ["a4"]


def test_labelled_runs_carry_only_what_calibration_reads(store: EvaluationStore) -> None:
    """Both stores pick the judges' scores and p_success (with its model) out of the body
    (reading whole bodies took ~100 kB of memory per run and held SQLite's writer lock for
    seconds), the same on both, whatever the shapes, and nothing else: no findings, no
    verdict."""
    judges = {"trace": {"status": "ok", "scores": {"trace": 0.25}, "critique": "long " * 99},
              "step": {"status": "error"}, "odd": "not an object"}
    evs = [_ev(1, agent="a1", detector="loop"), _ev(2, agent="a2"), _ev(3, agent="a3")]
    evs[0].judge, evs[0].prediction = {"judges": judges}, {"p_success": 0.75, "model": "m"}
    evs[1].judge, evs[1].prediction = {"judges": "odd"}, {"p_success": True}
    store.put_many(evs)
    for i in (1, 2, 3):
        store.put_feedback(f"{i:032x}", "success", i)
    found = store.labelled(10)
    assert found == [
        ("success", {"service": "shop", "agent": "a3", "judge": {"judges": {}}}),
        ("success", {"service": "shop", "agent": "a2", "judge": {"judges": {}},
                     "prediction": {"p_success": True, "model": None}}),
        ("success", {"service": "shop", "agent": "a1", "judge": {"judges": {
            "trace": {"scores": {"trace": 0.25}}, "step": {"scores": None},
            "odd": {"scores": None}}}, "prediction": {"p_success": 0.75, "model": "m"}})]
    assert scores_of(found[2][1]) == {"trace": 0.25, "p_success": 0.75}


def test_hostile_text_is_stored_and_found(store: EvaluationStore) -> None:
    """NUL (PostgreSQL text refuses it), lone surrogates' escapes, quotes: nothing fails, the
    body comes back as written, and a filter with the same value finds the row."""
    name = "sh\x00op'; DROP TABLE evaluations; --\u2028"
    store.put_many([_ev(1, service=name), _ev(2)])
    body = store.get(f"{1:032x}")
    assert body is not None and body["service"] == name
    assert _ids(store.query(EvaluationQuery(service=name)).evaluations) == [1]
    assert store.get("\x00") is None and store.feedback("\x00") is None


def test_nul_in_text_reads_back_the_same_from_either_store(target: str,
                                                          stores: Open) -> None:
    """PostgreSQL text cannot hold NUL: its store writes U+FFFD. SQLite kept the NUL, so the
    same turn listed its session (service, conversation id) and recalled its agent
    differently by store; and the issues catalogue's write failed on PostgreSQL. Both hold
    U+FFFD now, and a lookup given the NUL still finds it."""
    from otel_eval.store.sessions import split_session_key
    store = stores()
    store.put_many([_turn(1, "c\x00nv", T0, service="sh\x00op")])
    ((key, _at),) = store.session_ids(SessionQuery(), None, 5)
    assert split_session_key(key) == ("sh\ufffdop", "c\ufffdnv")
    assert store.session_keys("c\x00nv", 5) == [key]
    row = store.session_record(_key("c\x00nv", "sh\x00op"))
    assert row is not None and row.turns == 1
    assert _ids(store.query(EvaluationQuery(service="sh\x00op")).evaluations) == [1]
    store.remember_agents([("sh\x00op", "pl\x00anner", ("service",))])
    assert store.recall_agent("sh\x00op", ["service"]) == "pl\ufffdanner"
    catalogue = Catalogue.open(target)
    try:
        issue = _issue("iss_a", 1.0)
        catalogue.save([StoredIssue(issue.issue_id, issue.level, "to\x00ol", issue.embedding,
                                    "t\x00", "d\x00", issue.centroid, 0.0, 1.0, 0.5,
                                    "sh\x00op")])
        ((stored,),) = [catalogue.load("tfidf")]
        assert (stored.node, stored.title, stored.description, stored.service) == (
            "to\ufffdol", "t\ufffd", "d\ufffd", "sh\ufffdop")
    finally:
        catalogue.close()


def test_migrations_are_versioned_and_applied_once(target: str, stores: Open) -> None:
    stores()
    stores()  # a second open applies nothing
    versions = _sql(target, "SELECT version FROM schema_version ORDER BY version")
    assert [v[0] for v in versions] == list(range(1, LATEST + 1))
    _sql(target, f"INSERT INTO schema_version VALUES ({LATEST + 1}, 'future', 0)")
    with pytest.raises(SchemaError, match="newer than this otel-eval"):
        stores()


def test_a_read_only_open_reads_and_never_migrates_nor_writes(target: str, stores: Open) -> None:
    """``calibrate`` and ``show`` only read a store: they opened it as serve does, which
    migrated it (an older store, or an empty file given tables). Opened read-only, a store
    is read as it is: an up-to-date one is read and refuses writes; one of another schema
    version, or a database that holds no store, is refused saying why, left unchanged."""
    stores().put_many([_ev(1)])
    reader = open_store(target, read_only=True)
    try:
        assert reader.get(f"{1:032x}") is not None
        with pytest.raises(Exception, match=r"read-?only"):
            reader.put_many([_ev(2)])
    finally:
        reader.close()
    assert open_store(target).get(f"{2:032x}") is None
    _sql(target, f"DELETE FROM schema_version WHERE version = {LATEST}")
    with pytest.raises(SchemaError, match=f"version {LATEST - 1} is older than"):
        open_store(target, read_only=True)
    assert _sql(target, "SELECT MAX(version) FROM schema_version") == [(LATEST - 1,)]
    _sql(target, f"INSERT INTO schema_version VALUES ({LATEST}, 'now', 0), "
         f"({LATEST + 1}, 'future', 0)")
    with pytest.raises(SchemaError, match="newer than this otel-eval"):
        open_store(target, read_only=True)
    _sql(target, "DROP TABLE schema_version")
    with pytest.raises(SchemaError, match="not an otel-eval store"):
        open_store(target, read_only=True)
    with pytest.raises(Exception, match="schema_version"):  # not made again
        _sql(target, "SELECT version FROM schema_version")


def _key(session_id: str, service: str = "shop") -> str:
    from otel_eval.store.sessions import session_key
    return session_key(service, session_id)


def test_sessions_of_turns_stored_before_migration_7_are_backfilled_open(
        target: str, stores: Open) -> None:
    store = stores()
    turns = [_ev(i, at=T0 + i) for i in range(3)]
    for ev in turns:
        ev.trajectory.session_id = "conv"
    store.put_many(turns)
    store.put_many([turns[2]])  # a re-evaluated turn is no new turn
    kept = store.session_record(_key("conv"))
    assert kept is not None and (kept.state, kept.turns, kept.last_turn_ns) == (
        "open", 3, T0 + 2)
    # as a store of version 6 was: no sessions table, the turns under the conversation id
    _sql(target, "DROP TABLE sessions")
    _sql(target, "UPDATE evaluations SET session_id = 'conv'")
    _sql(target, "DELETE FROM schema_version WHERE version >= 7")
    again = stores()
    kept = again.session_record(_key("conv"))
    assert kept is not None and (kept.state, kept.turns, kept.last_turn_ns) == (
        "open", 3, T0 + 2)
    assert again.claim_session(_key("conv"), T0 + 2, "me", T0 + 10, 0)
    assert not again.claim_session(_key("conv"), T0 + 2, "you", T0 + 10, 0)  # claimed: once
    assert again.complete_session(_key("conv"), "me", {"verdict": {"passed": True}}, T0 + 11)
    assert again.open_session_count() == 0
    assert again.delete_older_than(T0 + 3) == 3  # retention takes the session with its turns
    assert again.session_record(_key("conv")) is None


def test_turns_stored_before_migration_13_are_read_by_their_start(
        target: str, stores: Open) -> None:
    """Migration 13 gives each stored turn its start, from its body (a NUL escape in it, a
    start of 0 or none read as 0): a store of version 12 reads its sessions' newest turns by
    when they began, as one written since; rows without a session are left 0."""
    store = stores()
    turns = [_turn(i, "conv", T0 + i) for i in (1, 2, 3, 4)]
    for i, ev in enumerate(turns, 1):
        ev.trajectory.start_ns = T0 - 100 + i
    turns[0].trajectory.task_id = "nul \x00 here"
    turns[3].trajectory.start_ns = 0  # unknown: the oldest in turn order
    store.put_many([*turns, _turn(5, None, T0 + 5)])
    store.put_many([turns[1]])  # re-evaluated last (its evaluation time stays T0 + 2 here)
    _sql(target, "UPDATE evaluations SET evaluated_at_ns = evaluated_at_ns + 100 "
         f"WHERE trace_id = '{1:032x}'")  # turn 1 re-evaluated last
    # as a store of version 12 was: no start column, nor its index
    _sql(target, "DROP INDEX evaluations_by_session_start")
    _sql(target, "ALTER TABLE evaluations DROP COLUMN started_at_ns")
    _sql(target, "DELETE FROM schema_version WHERE version >= 13")
    again = stores()
    bodies, total, last_ns, _ = again.session_turns(_key("conv"), 3)
    assert [int(b["trace_id"], 16) for b in bodies] == [3, 2, 1]
    assert (total, last_ns) == (4, T0 + 101)
    assert sorted(_sql(target, "SELECT started_at_ns FROM evaluations")) == [
        (0,), (0,), (T0 - 99,), (T0 - 98,), (T0 - 97,)]


def test_migration_13_reads_only_the_runs_own_start_on_both_stores(
        target: str, stores: Open) -> None:
    """A body whose run start is null, true, a number no integer column holds, or absent (bodies
    an earlier version wrote), gives its turn the start 0 (unknown) on both stores, never a
    step's start nor one of a key inside a value; a service with braces and the key's text
    does not hide the run's start."""
    store = stores()
    turns = [_turn(i, "conv", T0 + i) for i in (1, 2, 3, 4, 5, 6)]
    for i, ev in enumerate(turns, 1):
        ev.trajectory.start_ns = T0 - 100 + i
        ev.trajectory.steps = [Step(0, f"s{i}", None, "llm", "chat", node="node",
                                    start_ns=T0 - 50 + i, end_ns=T0)]
    turns[4].trajectory.service = '{["start_time_unix_nano": 7, '
    store.put_many(turns)
    for i, value in ((1, "null"), (2, "-5"), (3, "18446744073709551615"), (6, "true")):
        _sql(target, "UPDATE evaluations SET body = REPLACE(body, "
             f"'\"start_time_unix_nano\": {T0 - 100 + i},', "
             f"'\"start_time_unix_nano\": {value},') WHERE trace_id = '{i:032x}'")
    _sql(target, "UPDATE evaluations SET body = REPLACE(body, "
         f"'\"start_time_unix_nano\": {T0 - 96}, ', '') WHERE trace_id = '{4:032x}'")
    # as a store of version 12 was: no start column, nor its index
    _sql(target, "DROP INDEX evaluations_by_session_start")
    _sql(target, "ALTER TABLE evaluations DROP COLUMN started_at_ns")
    _sql(target, "DELETE FROM schema_version WHERE version >= 13")
    stores()
    expected = [(f"{1:032x}", 0), (f"{2:032x}", 0), (f"{3:032x}", 0), (f"{4:032x}", 0),
                (f"{5:032x}", T0 - 95), (f"{6:032x}", 0)]
    assert sorted(_sql(target, "SELECT trace_id, started_at_ns FROM evaluations")) == expected
    # a store migration 13 gave a step's start (PostgreSQL) or a REAL (SQLite): 17 reads again
    _sql(target, f"UPDATE evaluations SET started_at_ns = {T0 - 49} WHERE trace_id = "
         f"'{1:032x}'")
    if not target.startswith("postgresql://"):
        _sql(target, "UPDATE evaluations SET started_at_ns = 1.8446744073709552e19 WHERE "
             f"trace_id = '{3:032x}'")
    _sql(target, "DELETE FROM schema_version WHERE version >= 17")
    stores()
    assert sorted(_sql(target, "SELECT trace_id, started_at_ns FROM evaluations")) == expected


def test_sessions_are_keyed_by_service_from_migration_9(target: str, stores: Open) -> None:
    """A store of version 8 held sessions by conversation id alone. Migration 9 keys them by
    (service, id): a session of one service keeps its row (state, completions, record); one
    whose turns came from two services becomes two open sessions, completed anew."""
    store = stores()
    one = [_turn(i, "solo", T0 + i) for i in range(1, 3)]
    both = [_turn(3, "1", T0 + 3), _turn(4, "1", T0 + 4, service="other"),
            _turn(5, "1", T0 + 5)]
    long = "s" * 1500  # a service.name past what a key holds of it
    store.put_many([*one, *both, _turn(6, "x6", T0 + 6), _turn(7, "x7", T0 + 7),
                    _turn(8, "long", T0 + 8, service=long)])
    assert store.claim_session(_key("solo"), T0 + 2, "me", T0 + 10, 0)
    assert store.complete_session(_key("solo"), "me", {"session_id": "solo"}, T0 + 11)
    # as a store of version 8 was: one row per conversation id, the turns under the id
    _sql(target, "UPDATE evaluations SET session_id = CASE WHEN trace_id IN ("
         + ", ".join(f"'{i:032x}'" for i in (1, 2)) + ") THEN 'solo' WHEN trace_id = "
         f"'{8:032x}' THEN 'long' ELSE '1' END")
    _sql(target, "DELETE FROM sessions WHERE session_id NOT LIKE 'solo%' AND session_id NOT "
         "LIKE 'long%'")
    _sql(target, "UPDATE sessions SET session_id = 'long' WHERE session_id LIKE 'long%'")
    _sql(target, "UPDATE sessions SET session_id = 'solo' WHERE session_id LIKE 'solo%'")
    _sql(target, "INSERT INTO sessions (session_id, state, first_turn_ns, last_turn_ns, turns, "
         f"bytes, completions, body) VALUES ('1', 'complete', {T0 + 3}, {T0 + 5}, 3, 9, 1, "
         "'{\"session_id\": \"1\"}')")
    # two ids a separator of their own tells apart (they share a key: joined, not refused)
    fn = "chr" if target.startswith("postgresql://") else "char"
    _sql(target, f"UPDATE evaluations SET session_id = 'x' || {fn}(31) WHERE trace_id = "
         f"'{6:032x}'")
    _sql(target, f"UPDATE evaluations SET session_id = 'x' || {fn}(65533) WHERE trace_id = "
         f"'{7:032x}'")
    _sql(target, "INSERT INTO sessions (session_id, state, first_turn_ns, last_turn_ns, turns, "
         f"bytes) SELECT session_id, 'open', 0, 0, 1, 1 FROM evaluations WHERE trace_id IN "
         f"('{6:032x}', '{7:032x}')")
    _sql(target, "DELETE FROM schema_version WHERE version >= 9")
    again = stores()
    solo = again.session_record(_key("solo"))
    assert solo is not None and (solo.state, solo.turns, solo.completions) == ("complete", 2, 1)
    assert solo.record == {"session_id": "solo"}
    shop, other = again.session_record(_key("1")), again.session_record(_key("1", "other"))
    assert shop is not None and (shop.state, shop.turns, shop.last_turn_ns) == (
        "open", 2, T0 + 5)
    assert other is not None and (other.state, other.turns) == ("open", 1)
    assert again.session_record("1") is None and again.session_record("solo") is None
    assert sorted(again.session_keys("1", 9)) == sorted([_key("1"), _key("1", "other")])
    assert [int(b["trace_id"], 16) for b in again.session_turns(_key("1"), 9)[0]] == [5, 3]
    joined = again.session_record(_key("x\ufffd"))
    assert joined is not None and (joined.state, joined.turns) == ("open", 2)
    # the migration keys a long service.name as a new turn's key does: one session
    again.put_many([_turn(9, "long", T0 + 9, service=long)])
    assert again.session_keys("long", 9) == [_key("long", long)]
    kept = again.session_record(_key("long", long))
    assert kept is not None and kept.turns == 2


def test_an_ids_sessions_are_found_whatever_other_ids_hold(stores: Open) -> None:
    """A conversation id's sessions are one range of keys: ids that start with it and a
    separator of their own (a sender's "1\x1fA") neither enter it nor hide it."""
    store = stores()
    store.put_many([_turn(i, f"1\x1f{i}", T0 + i) for i in range(1, 30)]
                   + [_turn(40, "1", T0 + 40), _turn(41, "1", T0 + 41, service="other")])
    assert sorted(store.session_keys("1", 21)) == sorted([_key("1"), _key("1", "other")])
    assert store.session_keys("1\x1f3", 21) == [_key("1\ufffd3")]


def test_text_with_nul_stored_before_migration_15_is_read_as_written_since(
        tmp_path: Path) -> None:
    """SQLite stored NUL as it was until its text arguments held U+FFFD (PostgreSQL never
    held NUL). Upgraded, such a store split a conversation (its old turns under the NUL key,
    a new turn under U+FFFD), recalled no agent for the service and listed its old runs under
    no service. Migration 15 rewrites the stored text: one session of every turn, the agent
    recalled, the runs listed, the catalogue's node as new issues have it; a session key only
    its NUL told apart from another is one open session of both's turns."""
    path = str(tmp_path / "old.db")
    store = open_store(path)
    store.put_many([_turn(1, "c\x00nv", T0 + 1, service="sh\x00op"),
                    _turn(2, "c\x00nv", T0 + 2, service="sh\x00op"),
                    _turn(3, "x\x00", T0 + 3), _turn(4, "x\ufffd", T0 + 4)])
    store.remember_agents([("sh\x00op", "pl\x00anner", ("service",))])
    store.close()
    catalogue = Catalogue.open(path)
    try:
        catalogue.save([StoredIssue("iss_a", "agent", "to\x00ol", "tfidf", "t", "d",
                                    {"loop": 1.0}, 0.0, 1.0, 0.5, "sh\x00op")])
    finally:
        catalogue.close()
    # as the code before stored_args wrote it: NUL in the text (a plain connection keeps it)
    db = sqlite3.connect(path, isolation_level=None)
    try:
        old = _key("c\x00nv", "sh\x00op")
        db.execute("UPDATE evaluations SET service = ?, agent = ?, session_id = ? WHERE "
                   "trace_id IN (?, ?)", ("sh\x00op", "pl\x00anner", old, f"{1:032x}",
                                          f"{2:032x}"))
        db.execute("UPDATE evaluations SET session_id = ? WHERE trace_id = ?",
                   (_key("x\x00"), f"{3:032x}"))
        db.execute("UPDATE sessions SET session_id = ? WHERE session_id LIKE 'c%'", (old,))
        db.execute("UPDATE sessions SET turns = 1, session_id = ? WHERE session_id LIKE 'x%'",
                   (_key("x\x00"),))
        db.execute("INSERT INTO sessions (session_id, state, first_turn_ns, last_turn_ns, "
                   f"turns, bytes) VALUES (?, 'open', {T0 + 4}, {T0 + 4}, 1, 1)",
                   (_key("x\ufffd"),))
        db.execute("UPDATE agent_history SET service = ?, agent = ?",
                   ("sh\x00op", "pl\x00anner"))
        db.execute("UPDATE issues_catalogue SET node = ?, service = ?",
                   ("to\x00ol", "sh\x00op"))
        db.execute("DELETE FROM schema_version WHERE version >= 15")
    finally:
        db.close()
    again = open_store(path)
    try:
        again.put_many([_turn(5, "c\x00nv", T0 + 5, service="sh\x00op")])
        new = _key("c\ufffdnv", "sh\ufffdop")
        assert again.session_keys("c\x00nv", 9) == [new]
        row = again.session_record(new)
        assert row is not None and (row.state, row.turns) == ("open", 3)
        assert [int(b["trace_id"], 16) for b in again.session_turns(new, 9)[0]] == [5, 2, 1]
        assert again.recall_agent("sh\x00op", ["service"]) == "pl\ufffdanner"
        assert _ids(again.query(EvaluationQuery(service="sh\x00op")).evaluations) == [5, 2, 1]
        joined = again.session_record(_key("x\ufffd"))
        assert joined is not None and (joined.state, joined.turns) == ("open", 2)
        assert again.session_keys("x\x00", 9) == [_key("x\ufffd")]
    finally:
        again.close()
    catalogue = Catalogue.open(path)
    try:
        assert [(s.node, s.service) for s in catalogue.load("tfidf")] == [
            ("to\ufffdol", "sh\ufffdop")]
    finally:
        catalogue.close()


def test_a_store_from_before_versioning_is_adopted(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE evaluations (trace_id TEXT PRIMARY KEY, revision INTEGER "
                     "NOT NULL, evaluated_at_ns INTEGER NOT NULL, service TEXT, agent TEXT, "
                     "task_id TEXT, status TEXT NOT NULL, passed INTEGER, body TEXT NOT NULL);"
                     "INSERT INTO evaluations VALUES ('ab', 0, 1, NULL, NULL, NULL, "
                     "'complete', 1, '{\"trace_id\": \"ab\"}');")
    db.commit()
    db.close()
    store = open_store(str(path))
    try:
        assert store.get("ab") == {"trace_id": "ab"}
        # made before digests: stored (a late span is late), no digest matches (evaluated again)
        assert store.content_digests(["ab"]) == {"ab": ""}
        versions = _sql(str(path), "SELECT version FROM schema_version")
        assert [v[0] for v in versions] == list(range(1, LATEST + 1))
    finally:
        store.close()


def _issue(issue_id: str, last_seen: float) -> StoredIssue:
    return StoredIssue(issue_id, "trace", "*", "tfidf", "title", "desc", {"loop": 1.0},
                       0.0, last_seen, 0.5)


def test_issues_catalogue_in_the_store(target: str, stores: Open) -> None:
    stores()  # the store's migrations create the catalogue's table
    catalogue = Catalogue.open(target)
    try:
        catalogue.save([_issue("iss_a", 100.0), _issue("iss_b", 10.0)])
        catalogue.save([_issue("iss_a", 200.0)])  # an update keeps one row
        assert {s.issue_id: s.last_seen for s in catalogue.load("tfidf")} == {
            "iss_a": 200.0, "iss_b": 10.0}
        for at in (1.0, 2.0, 3.0):
            catalogue.record_shares(at, {"iss_a": at / 10, "iss_b": 0.0})
        assert catalogue.history(["iss_a", "iss_b", "iss_c"]) == {
            "iss_a": [(1.0, 0.1), (2.0, 0.2), (3.0, 0.3)],
            "iss_b": [(1.0, 0.0), (2.0, 0.0), (3.0, 0.0)]}
        assert catalogue.age_out(now=150.0, age_out_s=100.0) == ["iss_b"]
        assert catalogue.ids() == {"iss_a"}
        assert list(catalogue.history(["iss_a", "iss_b"])) == ["iss_a"]  # b's went with it
    finally:
        catalogue.close()
    reopened = Catalogue.open(target)
    try:
        assert [s.centroid for s in reopened.load("tfidf")] == [{"loop": 1.0}]
        # an issue the judge is still to name is marked (migration 14), across a reopen
        (stored,) = reopened.load("tfidf")
        assert not stored.unnamed
        stored.unnamed = True
        reopened.save([stored])
    finally:
        reopened.close()
    again = Catalogue.open(target)
    try:
        assert [s.unnamed for s in again.load("tfidf")] == [True]
    finally:
        again.close()


def test_the_catalogue_keeps_its_most_recently_seen_issues_past_max_issues(
        target: str, stores: Open) -> None:
    stores()
    catalogue = Catalogue.open(target)
    try:
        catalogue.save([_issue("iss_c", 30.0), _issue("iss_b", 20.0), _issue("iss_a", 20.0),
                        _issue("iss_d", 10.0)])
        catalogue.record_shares(1.0, dict.fromkeys(("iss_a", "iss_b", "iss_c", "iss_d"), 0.1))
        # ties of last_seen: the smaller id stays
        assert sorted(catalogue.age_out(now=40.0, age_out_s=100.0, max_issues=2)) == [
            "iss_b", "iss_d"]
        assert catalogue.ids() == {"iss_a", "iss_c"}
        assert set(catalogue.history(["iss_a", "iss_b", "iss_c", "iss_d"])) == {"iss_a",
                                                                               "iss_c"}
    finally:
        catalogue.close()


def test_one_catalogue_at_a_time_leads_the_issues_job(target: str, stores: Open) -> None:
    """PostgreSQL: an advisory lock; the first to ask keeps it until it closes. A SQLite
    catalogue is one process's own: it always leads."""
    stores()
    first, second = Catalogue.open(target), Catalogue.open(target)
    try:
        assert first.lead()
        assert first.lead()  # held: still the leader
        shared = target.startswith("postgresql://")
        assert second.lead() is not shared
        first.close()
        assert second.lead()
    finally:
        second.close()


def test_issues_jobs_whose_sessions_the_server_ended_hand_over_without_errors(
        postgresql_url: str) -> None:
    """PostgreSQL only: the server ends every session (a restart, a failover, an idle kill):
    the leader's advisory lock went with its session. The next job to ask reconnects and
    takes the lock; the former leader reconnects and finds it taken: a skipped run. Before,
    the follower's run failed on its dead connection and the former leader, still taking
    itself for the leader, failed its run too: each counted an error, and the one left
    following had only errors and skips for 30 minutes (OtelEvalIssuesJobStale fired on it,
    although the fleet's job ran)."""
    import psycopg

    from otel_eval.outputs.issues.config import IssuesConfig
    from otel_eval.outputs.issues.job import IssuesJob

    open_store(postgresql_url).close()
    registries = CollectorRegistry(), CollectorRegistry()
    leader, follower = (IssuesJob(IssuesConfig(), postgresql_url, lambda ns: Window([], False), r,
                                  lambda: T0 / 1e9) for r in registries)

    def runs(registry: CollectorRegistry) -> dict[str, float]:
        return {s: registry.get_sample_value("otel_eval_issues_runs_total", {"status": s})
                or 0.0 for s in ("ok", "skipped", "error")}
    try:
        assert leader.run_once() is not None and follower.run_once() is None
        with psycopg.connect(postgresql_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                          "WHERE application_name = 'otel-eval'")
        assert follower.run_once() is not None  # the lock is free: it leads now
        assert leader.run_once() is None  # taken: it follows
        assert runs(registries[0]) == {"ok": 1, "skipped": 1, "error": 0}
        assert runs(registries[1]) == {"ok": 1, "skipped": 1, "error": 0}
    finally:
        leader.close(5.0)
        follower.close(5.0)


def test_a_leader_whose_session_the_server_ended_closes_quietly(postgresql_url: str) -> None:
    """PostgreSQL only: the server ended the leader's session (psycopg learns it at the next
    statement); the lock went with it, so closing has nothing to release. Before, close ran
    the unlock on the dead connection and raised (logged at shutdown as "issues failed to
    shut down") and left the connection open."""
    import psycopg

    open_store(postgresql_url).close()
    leader = Catalogue.open(postgresql_url)
    assert leader.lead()
    with psycopg.connect(postgresql_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                      "WHERE application_name = 'otel-eval'")
    leader.close()  # quiet
    assert leader._conn.closed
    successor = Catalogue.open(postgresql_url)
    try:
        assert successor.lead()
    finally:
        successor.close()


def _sql(target: str, sql: str) -> list[tuple[Any, ...]]:
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            cur = conn.execute(sql)
            return cur.fetchall() if cur.description else []
    db = sqlite3.connect(target, isolation_level=None)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def test_a_lost_connection_is_reopened(postgresql_url: str) -> None:
    """PostgreSQL only: the server ends the session (restart, failover, idle kill); the next
    batch is retried on a new connection, and reads reconnect."""
    import psycopg

    from otel_eval.store.postgresql import PostgresStore

    pauses: list[float] = []
    store = PostgresStore(postgresql_url, sleep=pauses.append).open()
    try:
        store.put_many([_ev(1)])
        with psycopg.connect(postgresql_url, autocommit=True) as admin:
            ended = admin.execute("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                                  "WHERE application_name = 'otel-eval'").fetchall()
        assert ended == [(True,)]
        assert store.put_many([_ev(2)]) == [False]
        assert pauses == []  # retried at once, on a new connection
        assert _ids(store.latest(5)) == [2, 1]
        with psycopg.connect(postgresql_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                          "WHERE application_name = 'otel-eval'")
        with pytest.raises(psycopg.OperationalError):  # a read fails once (the API's 500) ...
            store.count()
        assert store.count() == 2  # ... and the next one reconnects
    finally:
        store.close()


def test_a_commit_whose_answer_was_lost_is_not_counted_as_superseding(
        postgresql_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL only: the server committed the batch, then the connection was lost before
    its answer came back (a restart or failover at the commit). ``put_many`` tries it again
    on a new connection and finds its own rows: that is the same evaluation written again,
    not a newer one replacing a stored run. Before, every trace of the batch came back
    superseded: counted only in ``traces_superseded``, never as completed, failed or
    alerting (the run lost from the metrics)."""
    import psycopg

    from otel_eval.store import postgresql

    store = postgresql.PostgresStore(postgresql_url).open()
    real, calls = postgresql._upsert, []

    def upsert(conn: Any, rows: list[tuple[Any, ...]]) -> list[bool]:
        done = real(conn, rows)  # committed on the server
        calls.append(len(rows))
        if len(calls) == 1:  # ... and the answer lost with the connection
            conn.close()
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return done

    monkeypatch.setattr(postgresql, "_upsert", upsert)
    try:
        turn = _turn(1, "conv", T0)
        assert store.put_many([turn, _ev(2)]) == [False, False]
        assert calls == [2, 2]  # tried again on a new connection
        assert store.put_many([_ev(2, revision=1)]) == [True]  # a newer evaluation still is
        assert _sql(postgresql_url, "SELECT turns FROM sessions") == [(1,)]
    finally:
        store.close()


def test_a_completion_whose_answer_was_lost_is_stored_and_said_so(
        postgresql_url: str) -> None:
    """PostgreSQL only: the server committed a session's completion, then the connection
    was lost before its answer came back (a restart or failover at the commit). The row is
    complete with this record, so ``complete_session`` says it stored it, and the job counts
    the session in its metrics and judges it. Before, it raised: the session, complete in
    the store and never due again, was never counted in the session metrics nor judged."""
    import psycopg

    from otel_eval.store import postgresql

    store = postgresql.PostgresStore(postgresql_url).open()
    try:
        store.put_many([_turn(1, "lost", T0 + 1)])
        assert store.claim_session(_key("lost"), T0 + 1, "job:1", T0 + 10, 0)
        real, complete = store._session_exec, store._session_sql["complete"]

        def lossy(statement: str, args: Any) -> tuple[list[Any], int]:
            done = real(statement, args)  # committed on the server
            if statement == complete:  # ... and the answer lost with the connection
                assert store._conn is not None
                store._conn.close()
                raise psycopg.OperationalError("server closed the connection unexpectedly")
            return done

        store._session_exec = lossy  # type: ignore[method-assign]
        record = {"session_id": "lost", "turns": 1, "verdict": {"passed": True}}
        assert store.complete_session(_key("lost"), "job:1", record, T0 + 11)
        kept = store.session_record(_key("lost"))
        assert kept is not None and (kept.state, kept.completions) == ("complete", 1)
    finally:
        store.close()


def _answer_lost_once(store: Any, name: str) -> None:
    """The next statement ``name`` of ``store``'s session SQL is committed on the server and
    its answer lost with the connection (a restart or failover at the commit), once."""
    import psycopg

    real, sql = store._session_exec, store._session_sql[name]

    def lossy(statement: str, args: Any) -> tuple[list[Any], int]:
        done = real(statement, args)  # committed on the server
        if statement == sql:  # ... and the answer lost with the connection
            store._session_exec = real
            assert store._conn is not None
            store._conn.close()
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return done

    store._session_exec = lossy


def _end_sessions(url: str) -> None:
    """The server ends every otel-eval session (a restart, a failover, an idle kill)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                      "WHERE application_name = 'otel-eval'")


def test_the_urls_connect_timeout_and_application_name_apply(
        postgresql_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL only: docs/store.md says the URL's libpq parameters apply, connect_timeout
    named among them (and so do the PG* variables). Before, the store's own 10 s and
    ``otel-eval`` replaced what the URL or PGCONNECT_TIMEOUT said; they are now the
    defaults, when neither sets them."""
    from otel_eval.store.postgresql import CONNECT_TIMEOUT_S, connect

    def said(conn: Any) -> tuple[str, str]:
        with conn:
            return (conn.info.get_parameters().get("connect_timeout", ""),
                    str(conn.execute("SHOW application_name").fetchone()[0]))

    assert said(connect(postgresql_url)) == (str(CONNECT_TIMEOUT_S), "otel-eval")
    assert said(connect(f"{postgresql_url}?connect_timeout=3&application_name=pod-7")) == (
        "3", "pod-7")
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "4")
    assert said(connect(postgresql_url))[0] == "4"


def test_the_server_probes_every_session_so_a_dead_leaders_lock_goes(
        postgresql_url: str) -> None:
    """PostgreSQL only: the issues job's leader holds a session advisory lock while its
    connection lives. A leader whose host disappears (no FIN, no RST) left its session idle
    on the server, which probed it only after the OS's keepalive time (Linux: 7200 s, then 9
    probes 75 s apart): for 2 h 11 min no worker ran the job, and no instance paged. Every
    session of otel-eval's (the store's, the catalogue's) now asks the server to probe it
    after a minute idle (``tcp_keepalives_*``, ``tcp_user_timeout``), unless the operator
    set them (here: the URL's ``options``; or the server's configuration, a role's)."""
    from otel_eval.store.postgresql import KEEPALIVES, connect

    def said(conn: Any) -> dict[str, str]:
        rows = conn.execute("SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
                            ([name for name, _ in KEEPALIVES],)).fetchall()
        return {str(name): str(value) for name, value in rows}

    ours = {name: str(value) for name, value in KEEPALIVES}
    assert ours["tcp_keepalives_idle"] == "60"  # the figure docs/store.md gives
    with connect(postgresql_url) as conn:
        assert said(conn) == ours
    catalogue = Catalogue.open(postgresql_url)  # the lock's session
    try:
        assert catalogue.lead() and said(catalogue._conn) == ours
    finally:
        catalogue.close()
    with connect(f"{postgresql_url}?options=-c%20tcp_keepalives_idle%3D300") as conn:
        assert said(conn) == {**ours, "tcp_keepalives_idle": "300"}  # the operator's


def test_the_engines_stamp_and_agent_recall_are_tried_again_on_a_new_connection(
        postgresql_url: str) -> None:
    """PostgreSQL only: the engine's reads are tried again at once on a new connection
    after the server ended the session, as ``put_many`` and its other reads are. Before,
    ``recall_agent`` raised on the dead connection and the run was stored with its agent
    unknown (never inferred again), and ``stamp`` (a dead worker's own commits) refused
    the whole batch."""
    from otel_eval.store.postgresql import PostgresStore

    store = PostgresStore(postgresql_url).open()
    try:
        store.put_many([_ev(1)])
        store.remember_agents([("shop", "planner", ("steps:s", "service"))])
        _end_sessions(postgresql_url)
        assert store.recall_agent("shop", ["steps:s", "service"]) == "planner"
        _end_sessions(postgresql_url)
        assert store.stamp(f"{1:032x}") == (0, T0 + 10**9)
    finally:
        store.close()


def test_the_stored_evaluation_a_replay_goes_on_with_is_read_on_a_new_connection(
        postgresql_url: str) -> None:
    """PostgreSQL only: a replay the store already holds goes to the delivering sinks with
    the stored evaluation (``get_stamped``, read by the engine when the batch is finished:
    with worker processes, on the serving process's own connection, idle while the workers
    store). After the server ended that session, it is read again on a new connection.
    Before, it raised: pass-through forwarded the run's spans without their stamps and its
    evaluation events were not sent again."""
    from otel_eval.store.postgresql import PostgresStore

    store = PostgresStore(postgresql_url).open()
    try:
        store.put_many([_ev(1)])
        _end_sessions(postgresql_url)
        assert store.get_stamped(f"{1:032x}") == (_ev(1).to_json(), T0 + 10**9)
    finally:
        store.close()


def test_session_events_are_leased_and_cleared_across_a_lost_connection(
        postgresql_url: str) -> None:
    """PostgreSQL only: the server ended the session before a call (a restart, a failover,
    an idle kill), or the server committed a lease and the connection was lost before its
    answer came back. ``session_events_sent`` (idempotent) is tried again on a new
    connection, and a lease whose answer was lost is found held with this very lease: both
    say so. Before, both raised: the delivered event was still owed and sent again after
    the lease (twice), and the leased one, held by nobody, waited another lease (late)."""

    from otel_eval.store import postgresql

    store = postgresql.PostgresStore(postgresql_url).open()
    try:
        for n, name in enumerate(("sent", "leased", "dropped"), 1):
            store.put_many([_turn(n, name, T0 + n)])
            assert store.claim_session(_key(name), T0 + n, "job:1", T0 + 10, 0)
            assert store.complete_session(_key(name), "job:1", {"n": n}, T0 + 11, T0 + 100)
        _end_sessions(postgresql_url)
        store.session_events_sent([(_key("sent"), 1)])  # delivered: no longer owed
        assert [r[0] for r in store.session_events_due(T0 + 101, 10)] == [
            _key("leased"), _key("dropped")]
        _end_sessions(postgresql_url)
        assert store.lease_session_events(_key("dropped"), 1, T0 + 100, T0 + 500)
        _answer_lost_once(store, "events_lease")
        assert store.lease_session_events(_key("leased"), 1, T0 + 100, T0 + 500)
        assert store.session_events_due(T0 + 499, 10) == []  # both held until T0 + 500
        assert not store.lease_session_events(_key("leased"), 1, T0 + 100, T0 + 600)
    finally:
        store.close()


def test_a_session_claim_whose_answer_was_lost_is_held_and_said_so(
        postgresql_url: str) -> None:
    """PostgreSQL only: the server ended the session before a claim, or committed a claim
    and the connection was lost before its answer came back (a restart or failover). The
    claim is tried again on a new connection, and one committed is found held by this very
    token: both say so (True), and the job completes the session now. Before, both raised:
    the session, claimed by nobody, was completed only once the claim had timed out
    (``sessions.claim_timeout_s``, 5 minutes)."""

    from otel_eval.store import postgresql

    store = postgresql.PostgresStore(postgresql_url).open()
    try:
        store.put_many([_turn(1, "dropped", T0 + 1), _turn(2, "lost", T0 + 2)])
        _end_sessions(postgresql_url)
        assert store.claim_session(_key("dropped"), T0 + 1, "job:1", T0 + 10, 0)
        _answer_lost_once(store, "claim")
        assert store.claim_session(_key("lost"), T0 + 2, "job:2", T0 + 10, 0)
        assert not store.claim_session(_key("lost"), T0 + 2, "job:3", T0 + 10, 0)
        assert store.complete_session(_key("lost"), "job:2", {"n": 2}, T0 + 11)
        assert store.complete_session(_key("dropped"), "job:1", {"n": 1}, T0 + 11)
    finally:
        store.close()


def test_a_completion_on_a_connection_the_server_ended_is_stored_on_a_new_one(
        postgresql_url: str) -> None:
    """PostgreSQL only: the server ended the session while the job evaluated a session it
    had claimed (a restart or failover). The completion is tried again on a new connection
    and stored. Before, it raised (not committed: the claim left to time out), and the
    session was completed only after ``sessions.claim_timeout_s`` (5 minutes), by a second
    evaluation; a turn that came meanwhile still makes it store nothing (False)."""
    from otel_eval.store import postgresql

    store = postgresql.PostgresStore(postgresql_url).open()
    try:
        store.put_many([_turn(1, "ended", T0 + 1), _turn(2, "resumed", T0 + 2)])
        for name, at in (("ended", T0 + 1), ("resumed", T0 + 2)):
            assert store.claim_session(_key(name), at, "job:1", T0 + 10, 0)
        _end_sessions(postgresql_url)
        assert store.complete_session(_key("ended"), "job:1", {"n": 1}, T0 + 11)
        kept = store.session_record(_key("ended"))
        assert kept is not None and (kept.state, kept.record) == ("complete", {"n": 1})
        store.put_many([_turn(3, "resumed", T0 + 12)])  # a turn while it was evaluated
        _end_sessions(postgresql_url)
        assert not store.complete_session(_key("resumed"), "job:1", {"n": 2}, T0 + 13)
    finally:
        store.close()


def _read_only(url: str, on: bool) -> None:
    """The database of ``url`` read-only (``default_transaction_read_only``, which a session
    takes when it starts) or writable again: a failover's read-only window."""
    import psycopg

    db = url.rsplit("/", 1)[1].split("?")[0]
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SET default_transaction_read_only = off")  # this session may write
        admin.execute(f"ALTER DATABASE {db} SET default_transaction_read_only = "
                      f"{'on' if on else 'off'}")


def test_an_up_to_date_store_opens_while_the_server_is_read_only(postgresql_url: str) -> None:
    """PostgreSQL only: a serve, or an evaluation worker restarted after a crash, opening the
    store during a failover's read-only window (a replica not yet promoted). The schema is
    up to date, so opening it only reads, as SQLite's open does. Before, the migration's
    ``CREATE TABLE IF NOT EXISTS schema_version`` was refused in the read-only transaction:
    serve would not start and the worker not restart until the window was over."""
    open_store(postgresql_url).close()  # migrated while writable
    _read_only(postgresql_url, True)
    store = open_store(postgresql_url)
    try:
        assert store.count() == 0
    finally:
        store.close()
        _read_only(postgresql_url, False)


def test_a_session_opened_while_the_server_was_read_only_is_not_kept(
        postgresql_url: str) -> None:
    """PostgreSQL only: a session opened in a failover's read-only window stays read-only
    after it (here it took the database's ``default_transaction_read_only`` when it
    started; a proxy's session to a server that stays a replica is the same). The store
    kept that session after its write was refused ``read_only``, so every later write was
    refused too, the receivers throttled, until serve gave up (or never, with
    ``store.write_retry_max_elapsed_s: 0``). A write refused as read-only now drops the
    session: the next attempt opens one on what the URL reaches now."""
    import psycopg

    from otel_eval.store.failures import write_failure

    open_store(postgresql_url).close()  # migrated while writable
    _read_only(postgresql_url, True)
    store = open_store(postgresql_url)
    try:
        with pytest.raises(psycopg.Error) as refused:
            store.put_many([_ev(1)])
        assert write_failure(refused.value) == "read_only"
        _read_only(postgresql_url, False)  # the window is over
        assert store.put_many([_ev(1)]) == [False]
        assert _ids(store.latest(5)) == [1]
    finally:
        store.close()
        _read_only(postgresql_url, False)


def _turn(i: int, session: str | None, at: int, service: str = "shop") -> Evaluation:
    ev = _ev(i, at=at, service=service)
    ev.trajectory.session_id = session
    return ev


def test_sessions_are_read_from_the_turns_stored_by_any_writer(stores: Open) -> None:
    """Turns of one conversation stored by two writers (two workers) make one session;
    sessions list newest first by their last turn, with a keyset cursor."""
    first, second = stores(), stores()
    first.put_many([_turn(1, "a", T0 + 1), _turn(3, "b", T0 + 3), _turn(5, None, T0 + 5)])
    second.put_many([_turn(2, "a", T0 + 2), _turn(4, "a", T0 + 4),
                     _turn(6, "c", T0 + 6, service="other")])
    reader = stores()
    from otel_eval.store.sessions import SessionCursor, SessionQuery
    q = SessionQuery()
    assert reader.session_ids(q, None, 10) == [(_key("c", "other"), T0 + 6),
                                               (_key("a"), T0 + 4), (_key("b"), T0 + 3)]
    assert reader.session_ids(q, SessionCursor(T0 + 4, _key("a")), 10) == [(_key("b"), T0 + 3)]
    assert reader.session_ids(SessionQuery(service="shop"), None, 1) == [(_key("a"), T0 + 4)]
    assert reader.session_ids(SessionQuery(since_ns=T0 + 4, until_ns=T0 + 6), None, 9) == [
        (_key("a"), T0 + 4)]
    bodies, total, last_ns, _ = reader.session_turns(_key("a"), 2)
    assert ([int(b["trace_id"], 16) for b in bodies], total, last_ns) == ([4, 2], 3, T0 + 4)
    assert bodies[0]["session_id"] == "a"
    assert reader.session_turns(_key("nope"), 5) == ([], 0, 0, 0)
    assert reader.session_turns(_key("a", "other"), 5) == ([], 0, 0, 0)


def test_a_session_listed_by_an_agent_keeps_its_other_turns(store: EvaluationStore) -> None:
    """``agent``: a turn of the session has it. The session's last turn (what ``since`` /
    ``until`` and the order read) is still its last turn of any agent: session a's "planner"
    turn at T0 + 1 and its last turn, another agent's, at T0 + 9; session b's at T0 + 5. Before,
    the filter chose the rows before they were grouped: a's last turn read as T0 + 1 (a
    ``since`` past it dropped a; b listed before a)."""
    from otel_eval.store.sessions import SessionQuery
    turns = [_turn(1, "a", T0 + 1), _turn(2, "a", T0 + 9), _turn(3, "b", T0 + 5)]
    turns[1].trajectory.agent = "writer"
    store.put_many(turns)
    assert store.session_ids(SessionQuery(agent="planner"), None, 9) == [
        (_key("a"), T0 + 9), (_key("b"), T0 + 5)]
    assert store.session_ids(SessionQuery(agent="planner", since_ns=T0 + 6), None, 9) == [
        (_key("a"), T0 + 9)]
    assert store.session_ids(SessionQuery(agent="writer", until_ns=T0 + 9), None, 9) == []
    assert store.session_ids(SessionQuery(agent="nobody"), None, 9) == []


def test_session_turns_are_cut_to_a_size(stores: Open) -> None:
    store = stores()
    store.put_many([_turn(i, "big", T0 + i) for i in range(1, 5)])
    size = len(json.dumps(store.get(f"{4:032x}")))  # every turn's JSON is this long
    bodies, total, _, chars = store.session_turns(_key("big"), 10,
                                                  max_chars=2 * size + size // 2)
    assert ([int(b["trace_id"], 16) for b in bodies], total, chars) == ([4, 3], 4, 2 * size)
    bodies, _, _, _ = store.session_turns(_key("big"), 10, max_chars=1)  # the newest one always
    assert [int(b["trace_id"], 16) for b in bodies] == [4]


def test_a_turn_whose_conversation_changed_moves_to_its_new_session(stores: Open) -> None:
    """A re-opened trace re-evaluated under another conversation id (its late spans carried
    it) leaves the old session, which is opened again to be completed without it, or is gone
    with its last turn. Before, the old session kept counting it and its stored record (or
    its listing) still named the trace."""
    store = stores()
    store.put_many([_turn(1, "a", T0 + 1), _turn(2, "a", T0 + 2), _turn(3, "b", T0 + 3)])
    assert store.claim_session(_key("a"), T0 + 2, "job:1", T0 + 10, 0)
    assert store.complete_session(_key("a"), "job:1", {"session_id": "a", "turns": 2}, T0 + 11)
    moved = _ev(2, revision=1, at=T0 + 20)
    moved.trajectory.session_id = "b"
    assert store.put_many([moved]) == [True]  # it superseded its first evaluation
    a, b = store.session_record(_key("a")), store.session_record(_key("b"))
    assert a is not None and (a.state, a.turns) == ("open", 1)  # to be completed again
    assert b is not None and (b.state, b.turns) == ("open", 2)
    assert [int(t["trace_id"], 16) for t in store.session_turns(_key("a"), 9)[0]] == [1]
    assert sorted(int(t["trace_id"], 16) for t in store.session_turns(_key("b"), 9)[0]) == [
        2, 3]
    alone = _ev(1, revision=1, at=T0 + 21)  # its last turn now in no conversation
    store.put_many([alone])
    assert store.session_record(_key("a")) is None
    from otel_eval.store.sessions import SessionQuery
    assert [sid for sid, _ in store.session_ids(SessionQuery(), None, 9)] == [_key("b")]
    # a trace twice in one batch: the second replaces the first, in its conversation only
    first, second = _turn(4, "c", T0 + 30), _ev(4, revision=1, at=T0 + 31)
    second.trajectory.session_id = "d"
    assert store.put_many([first, second]) == [False, True]
    assert store.session_record(_key("c")) is None
    d = store.session_record(_key("d"))
    assert d is not None and d.turns == 1


class _FeedbackWhileEvaluating(Evaluator):
    """Runs ``between()`` once, in the first evaluation: after the engine read the stored
    outcomes and before it stores (where feedback on another connection may commit)."""

    def __init__(self, between: Callable[[], object]) -> None:
        super().__init__(Config())
        self._between: Callable[[], object] | None = between

    def evaluate(self, *args: Any, **kwargs: Any) -> Any:
        between, self._between = self._between, None
        if between is not None:
            between()
        return super().evaluate(*args, **kwargs)


def test_feedback_recorded_while_the_engine_re_evaluates_is_in_the_verdict_it_stores(
        stores: Open) -> None:
    """Feedback commits between the engine's read of the stored outcomes and its write of
    the trace's next revision: it wrote onto the revision it read, the one being replaced.
    Before, the new revision's verdict said no outcome while the feedback table said
    failure, until the trace's next evaluation; now the engine evaluates it again with it."""
    engine, api = stores(), stores()
    tid = f"{7:032x}"
    evaluate_and_store(Evaluator(Config()), engine, [model.Trace(tid, [], "complete")])
    feedback = _feedback(api, Evaluator(Config()))
    evaluator = _FeedbackWhileEvaluating(lambda: feedback.record(tid, "failure"))
    [outcome] = evaluate_and_store(evaluator, engine,
                                   [model.Trace(tid, [], "complete", revision=1)])
    stored = api.get(tid)
    assert stored is not None and stored["revision"] == 1
    assert stored["verdict"]["outcome"] == "failure"
    assert api.feedback(tid) == "failure"
    assert outcome.evaluation is not None  # what the sinks export says it too
    assert outcome.evaluation.verdict is not None
    assert outcome.evaluation.verdict.outcome == "failure"


def test_a_completions_event_is_owed_until_sent_and_leased_by_one(stores: Open) -> None:
    """Migration 10: a completion stored with ``events_due_ns`` owes its event; past that
    lease one process of the fleet takes it (compare and set); sent, it is owed no more, and
    the sending of an older completion's event leaves a later completion's mark."""
    one, two = stores(), stores()
    turns = [_ev(i, at=T0 + i) for i in range(2)]
    for ev in turns:
        ev.trajectory.session_id = "conv"
    one.put_many(turns)
    key = _key("conv")
    assert one.claim_session(key, T0 + 1, "me", T0 + 10, 0)
    assert one.complete_session(key, "me", {"session_id": "conv"}, T0 + 11, T0 + 100)
    assert one.session_events_due(T0 + 100, 10) == []  # the completer's lease runs
    assert two.session_events_due(T0 + 101, 10) == [(key, 1, T0 + 100)]
    assert two.lease_session_events(key, 1, T0 + 100, T0 + 500)
    assert not one.lease_session_events(key, 1, T0 + 100, T0 + 600)  # taken: once
    assert one.session_events_due(T0 + 400, 10) == []
    # re-opened and completed again: the new completion's mark replaces the old one
    one.put_many([_ev(5, at=T0 + 20)])
    extra = _ev(6, at=T0 + 21)
    extra.trajectory.session_id = "conv"
    one.put_many([extra])
    assert one.claim_session(key, T0 + 21, "me", T0 + 30, 0)
    assert one.complete_session(key, "me", {"session_id": "conv"}, T0 + 31, T0 + 200)
    two.session_events_sent([(key, 1)])  # the first completion's event, delivered late
    assert one.session_events_due(T0 + 201, 10) == [(key, 2, T0 + 200)]
    one.session_events_sent([(key, 2)])
    assert one.session_events_due(1 << 62, 10) == []
    # with events off nothing is owed
    other = _ev(7, at=T0 + 40)
    other.trajectory.session_id = "quiet"
    one.put_many([other])
    assert one.claim_session(_key("quiet"), T0 + 40, "me", T0 + 50, 0)
    assert one.complete_session(_key("quiet"), "me", {"session_id": "quiet"}, T0 + 51)
    assert one.session_events_due(1 << 62, 10) == []


def test_the_longest_session_key_of_any_text_is_stored(stores: Open) -> None:
    """A conversation id of 256 characters and a service.name of 1,024 (what a key holds),
    both of characters UTF-8 spells in 4 bytes that compress badly (span content chooses
    them): the turn is stored and its session found, on PostgreSQL (whose b-tree refuses an
    index entry past 2,704 bytes) as on SQLite."""
    import random
    rnd = random.Random(7)

    def text(n: int) -> str:
        return "".join(chr(rnd.randrange(0x20000, 0x2A6DF)) for _ in range(n))

    service, conversation = text(1024), text(256)
    store = stores()
    store.put_many([_turn(1, conversation, T0 + 1, service=service)])
    assert store.session_keys(conversation, 9) == [_key(conversation, service)]
    kept = store.session_record(_key(conversation, service))
    assert kept is not None and kept.turns == 1
    assert [int(b["trace_id"], 16) for b in
            store.session_turns(_key(conversation, service), 9)[0]] == [1]


def test_migration_11_cuts_the_keys_of_long_services(target: str, stores: Open) -> None:
    """Keys written by a version before 11 held 1,024 characters of the service: migration 11
    keys those turns as a new turn is keyed, so the session goes on; a session of a short
    service keeps its row (state, completions) as it was."""
    store = stores()
    long = "s" * 1500
    store.put_many([_turn(1, "long", T0 + 1, service=long), _turn(2, "long", T0 + 2,
                                                                  service=long),
                    _turn(3, "short", T0 + 3)])
    assert store.claim_session(_key("short"), T0 + 3, "me", T0 + 10, 0)
    assert store.complete_session(_key("short"), "me", {"session_id": "short"}, T0 + 11)
    old = "long\x1f" + long[:1024]  # the key of version 10
    _sql(target, f"UPDATE evaluations SET session_id = '{old}' WHERE service = '{long}'")
    _sql(target, f"UPDATE sessions SET session_id = '{old}' WHERE session_id LIKE 'long%'")
    _sql(target, "DELETE FROM schema_version WHERE version >= 11")
    again = stores()
    assert again.session_keys("long", 9) == [_key("long", long)]
    kept = again.session_record(_key("long", long))
    assert kept is not None and (kept.state, kept.turns, kept.last_turn_ns) == (
        "open", 2, T0 + 2)
    again.put_many([_turn(4, "long", T0 + 4, service=long)])
    kept = again.session_record(_key("long", long))
    assert kept is not None and kept.turns == 3
    short = again.session_record(_key("short"))
    assert short is not None and (short.state, short.completions) == ("complete", 1)
    assert again.session_record(old) is None


def test_the_issues_catalogue_session_carries_the_store_s_limits(postgresql_url: str) -> None:
    """PostgreSQL only: every otel-eval session carries store.lock_timeout_s and
    statement_timeout_s, the issues job's catalogue connection too. Before, it had none:
    another client's lock on the catalogue held the leader's run (and the fleet's issues
    lock) until that client let go; now the run fails, counted, and the next one tries
    again. The lock holder ends its own transaction after 10 s, so the test never hangs."""
    import psycopg

    from otel_eval.outputs.deps import Deps
    from otel_eval.outputs.issues import job as issues_job
    from otel_eval.outputs.issues.config import IssuesConfig
    from otel_eval.store.base import SessionLimits

    store = open_store(postgresql_url)
    registry = CollectorRegistry()
    deps = Deps(Metrics(registry), registry, store, ":memory:", postgresql_url, None,
                store_session=SessionLimits(statement_timeout_s=30.0, lock_timeout_s=0.05))
    job = issues_job.build(IssuesConfig(), deps)
    assert job is not None
    try:
        with psycopg.connect(postgresql_url, autocommit=True) as admin:
            admin.execute("SET idle_in_transaction_session_timeout = '10s'")
            with admin.transaction():
                admin.execute("LOCK TABLE issues_catalogue IN ACCESS EXCLUSIVE MODE")
                assert job.run_once() is None
        assert registry.get_sample_value("otel_eval_issues_runs_total",
                                         {"status": "error"}) == 1.0
        assert job.run_once() is not None  # the lock is gone: the next run goes through
    finally:
        job.close(5.0)
        store.close()


def test_an_outcome_recorded_by_another_process_refreshes_the_calibration_report(
        stores: Open) -> None:
    """A fleet (several processes or replicas on one store): recording an outcome made the
    cached calibration report stale only in the process that took it; the others served the
    report without it for up to 5 minutes (guide.md: computed again after an outcome is
    recorded). The report is kept only while the store's feedback is unchanged."""
    from types import SimpleNamespace
    from typing import cast

    from otel_eval.evaluate.calibration import build
    from otel_eval.evaluate.judge.config import JudgeConfig
    from otel_eval.outputs.deps import Deps
    from otel_eval.telemetry.calibration import CalibrationMetrics
    from otel_eval.telemetry.declare import Declarer
    from otel_eval.telemetry.labels import SeriesCap

    taking, other = stores(), stores()
    stored = [_ev(1), _ev(2)]
    for ev in stored:
        ev.prediction = {"p_success": 0.5, "model": "m"}
    taking.put_many(stored)
    d = Declarer(CollectorRegistry())
    gauges = CalibrationMetrics(d, SeriesCap(d, 250, 10_000), clock=lambda: 0.0)
    served = build(JudgeConfig(), cast(Deps, SimpleNamespace(
        metrics=SimpleNamespace(calibration=gauges), store=other)))
    assert served()["labelled_runs"] == 0
    feedback = Feedback(taking, Evaluator(Config()), Metrics(CollectorRegistry()).prediction)
    assert feedback.record(stored[0].trace_id, "success") is not None
    assert served()["labelled_runs"] == 1
    assert served()["labelled_runs"] == 1
    feedback.record(stored[0].trace_id, "failure")  # the same run, another outcome
    assert [g["failures"] for g in served()["groups"] if g["agent"] == "*"] == [1]
    taking.put_feedback(stored[1].trace_id, "success", T0)  # an older time than the last
    assert served()["labelled_runs"] == 2


def test_a_counted_window_selects_sessions_by_their_completion(store: EvaluationStore) -> None:
    """``counted_since``/``counted_until`` read the time a session's completion was stored
    (the instant the session metrics count it), with the other filters and the cursor, the
    same on both stores; a session never completed is in no window."""
    store.put_many([_turn(1, "a", T0 + 1), _turn(2, "b", T0 + 2), _turn(3, "open", T0 + 3),
                    _turn(4, "c", T0 + 4, service="desk")])
    for n, (key, last) in enumerate(((_key("a"), T0 + 1), (_key("b"), T0 + 2),
                                     (_key("c", "desk"), T0 + 4))):
        assert store.claim_session(key, last, f"job:{n}", T0 + 10, 0)
        assert store.complete_session(key, f"job:{n}", {}, T0 + 100 + n)
    window = SessionQuery(counted_since_ns=T0 + 101, counted_until_ns=T0 + 103)
    assert [k for k, _ in store.session_ids(window, None, 10)] == [_key("c", "desk"),
                                                                  _key("b")]
    assert [k for k, _ in store.session_ids(SessionQuery(service="shop", counted_since_ns=T0),
                                            None, 10)] == [_key("b"), _key("a")]
    ((key, at),) = store.session_ids(window, None, 1)
    from otel_eval.store.sessions import SessionCursor
    assert [k for k, _ in store.session_ids(window, SessionCursor(at, key), 10)] == [_key("b")]


def test_a_counted_window_holds_a_session_at_its_first_completion(target: str,
                                                                  stores: Open) -> None:
    """The session metrics count a conversation at its first completion (a late turn's
    re-completion counts only as re-opened): the counted window selects that one
    (migration 18), not the last. Before, a conversation whose user came back after the idle
    timeout left the window of the alert its first completion fired, and stood in a later
    one that counted nothing of it. A store of version 17 backfills the sessions completed
    once; one completed more than once is in no window (its first completion unknown)."""
    store = stores()
    store.put_many([_turn(1, "back", T0 + 1), _turn(2, "twice", T0 + 2)])
    for key, last in ((_key("back"), T0 + 1), (_key("twice"), T0 + 2)):
        assert store.claim_session(key, last, "job:1", T0 + 10, 0)
        assert store.complete_session(key, "job:1", {}, T0 + 100)
    store.put_many([_turn(3, "back", T0 + 500)])  # the user came back: re-opened
    assert store.claim_session(_key("back"), T0 + 500, "job:2", T0 + 900, 0)
    assert store.complete_session(_key("back"), "job:2", {}, T0 + 1000)

    def counted(since: int, until: int) -> list[str]:
        q = SessionQuery(counted_since_ns=since, counted_until_ns=until)
        return [k for k, _ in stores().session_ids(q, None, 10)]

    assert counted(T0 + 100, T0 + 101) == [_key("back"), _key("twice")]
    assert counted(T0 + 101, T0 + 2000) == []
    # as a store of version 17 was, "twice" completed twice, "back" once
    _sql(target, "ALTER TABLE sessions DROP COLUMN first_completed_at_ns")
    _sql(target, "DELETE FROM schema_version WHERE version >= 18")
    _sql(target, f"UPDATE sessions SET completions = 2 WHERE session_id = '{_key('twice')}'")
    _sql(target, f"UPDATE sessions SET completions = 1 WHERE session_id = '{_key('back')}'")
    assert counted(T0 + 1000, T0 + 1001) == [_key("back")]
    assert counted(0, 1 << 62) == [_key("back")]


def test_a_counted_window_holds_a_run_at_its_first_evaluation(target: str,
                                                               stores: Open) -> None:
    """The run metrics count a run at its first evaluation (a re-evaluation after late spans
    counts only in traces_superseded), and the alerts' and panels' links select the window
    they count (``counted_since``/``counted_until``, migration 19): before, they selected
    the stored evaluation time, which the re-evaluation moved, so a run near the window's
    edge was missing from the list of the alert its loop fired and stood in a later window
    that counted nothing of it. A store of version 18 backfills the runs of revision 0; one
    re-evaluated before it is in no counted window (its first evaluation unknown)."""
    store = stores()
    store.put_many([_ev(1, at=T0 + 100), _ev(2, at=T0 + 200)])
    store.put_many([_ev(1, revision=1, at=T0 + 400)])  # late spans: re-evaluated

    def counted(**bounds: str) -> list[str]:
        q = EvaluationQuery.from_params({k: [v] for k, v in bounds.items()})
        return [b["trace_id"] for b in stores().query(q).evaluations]

    def s(ns: int) -> str:
        return f"{ns // 10**9}.{ns % 10**9:09d}"

    assert counted(counted_since=s(T0 + 100), counted_until=s(T0 + 101)) == [f"{1:032x}"]
    assert counted(counted_since=s(T0 + 101), counted_until=s(T0 + 1000)) == [f"{2:032x}"]
    assert counted(counted_until=s(T0 + 150), counted_window="1s") == [f"{1:032x}"]
    assert counted(since=s(T0 + 101)) == [f"{1:032x}", f"{2:032x}"]  # evaluation time
    # as a store of version 18 was
    _sql(target, "ALTER TABLE evaluations DROP COLUMN first_evaluated_at_ns")
    _sql(target, "DELETE FROM schema_version WHERE version >= 19")
    assert counted(counted_since="0") == [f"{2:032x}"]
    stores().put_many([_ev(2, revision=1, at=T0 + 500)])  # re-evaluated: still counted once
    assert counted(counted_since=s(T0 + 200), counted_until=s(T0 + 201)) == [f"{2:032x}"]


def test_a_session_an_earlier_release_completed_in_a_rolling_upgrade_is_counted(
        target: str, stores: Open) -> None:
    """A rolling upgrade of a fleet on one store (Helm's default): a worker of the release
    before migration 18, still running after a new one migrated, completes a conversation
    with its own statement, which sets no ``first_completed_at_ns``; its metrics count it.
    Before, that session was in no counted window, ever (NULL), nor after a late turn's
    re-completion by an upgraded worker: the alert's link listed nothing of it. A session
    completed once is counted at that completion, whoever stored it."""
    store = stores()
    store.put_many([_turn(1, "old", T0 + 1), _turn(2, "back", T0 + 2)])
    for n, (key, last) in enumerate(((_key("old"), T0 + 1), (_key("back"), T0 + 2))):
        assert store.claim_session(key, last, f"old:{n}", T0 + 10, 0)
        # the earlier release's "complete" (3920b6c4 session_rows.py), as it ran
        _sql(target, f"UPDATE sessions SET state = 'complete', claim = NULL, body = '{{}}', "
                     f"passed = NULL, completed_at_ns = {T0 + 100 + n}, "
                     f"completions = completions + 1, events_due_ns = NULL "
                     f"WHERE session_id = '{key}' AND state = 'claimed' AND claim = 'old:{n}'")
    store.put_many([_turn(3, "back", T0 + 500)])  # re-opened, completed by an upgraded worker
    assert store.claim_session(_key("back"), T0 + 500, "new:1", T0 + 900, 0)
    assert store.complete_session(_key("back"), "new:1", {}, T0 + 1000)

    def counted(since: int, until: int) -> list[str]:
        q = SessionQuery(counted_since_ns=since, counted_until_ns=until)
        return [k for k, _ in stores().session_ids(q, None, 10)]

    assert counted(T0 + 100, T0 + 101) == [_key("old")]
    assert counted(T0 + 101, T0 + 102) == [_key("back")]
    assert counted(T0 + 102, T0 + 2000) == []


def test_a_run_an_earlier_release_evaluated_in_a_rolling_upgrade_is_counted(
        target: str, stores: Open) -> None:
    """A rolling upgrade of a fleet on one store (Helm's default): a worker of the release
    before migration 19, still running after a new one migrated, stores a run's first
    evaluation with its own statement, which sets no ``first_evaluated_at_ns``; its metrics
    count it. Before, that run was in no counted window, ever (NULL), nor after late spans'
    re-evaluation by an upgraded worker: the alert's link listed nothing of it. A run stored
    at revision 0 without the column is counted at that evaluation, whoever stored it."""
    store = stores()
    store.put_many([_ev(9, at=T0)])  # the store opened (migrated) by an upgraded worker
    for i, at in ((1, T0 + 100), (2, T0 + 200)):
        # the earlier release's write of a first evaluation (3920b6c4), as it ran
        _sql(target, f"INSERT INTO evaluations (trace_id, revision, evaluated_at_ns, service, "
                     f"agent, task_id, status, passed, body) VALUES ('{i:032x}', 0, {at}, "
                     f"'shop', 'planner', 'task-{i}', 'complete', NULL, "
                     f"'{{\"trace_id\": \"{i:032x}\"}}')")
    store.put_many([_ev(2, revision=1, at=T0 + 500)])  # late spans, an upgraded worker

    def counted(**bounds: str) -> list[str]:
        q = EvaluationQuery.from_params({k: [v] for k, v in bounds.items()})
        return [b["trace_id"] for b in stores().query(q).evaluations]

    def s(ns: int) -> str:
        return f"{ns // 10**9}.{ns % 10**9:09d}"

    assert counted(counted_since=s(T0 + 100), counted_until=s(T0 + 101)) == [f"{1:032x}"]
    assert counted(counted_since=s(T0 + 200), counted_until=s(T0 + 201)) == [f"{2:032x}"]
    assert counted(counted_since=s(T0 + 201), counted_until=s(T0 + 2000)) == []


def test_each_write_of_an_evaluation_counts_in_its_row_version(store: EvaluationStore) -> None:
    """Migration 20: ``get_versioned`` reads, with the row, the writes made to its evaluation
    (0 as ``put_many`` stored it, one more per judge or feedback write; a new evaluation
    starts again at 0): the ``otel_eval.row_version`` of a results-topic record, which orders
    the records that processes of a fleet publish of one key (``outputs.kafka``)."""
    ev = _ev(61)
    tid, at = ev.trace_id, ev.evaluated_at_ns
    store.put_many([ev])
    assert store.get_versioned(tid) == (store.get(tid), at, 0)
    assert store.put_judge(tid, 0, JUDGE, at)
    assert store.get_versioned(tid) == (store.get(tid), at, 1)
    assert store.put_feedback_and_verdict(tid, 0, "failure", 1, [],
                                          {"passed": False, "reasons": []}, at)
    assert store.get_versioned(tid) == (store.get(tid), at, 2)
    assert not store.put_judge(tid, 1, JUDGE)  # not the stored revision: nothing written
    assert store.get_versioned(tid) == (store.get(tid), at, 2)
    store.put_many([_ev(61, revision=1, at=at + 1)])  # re-opened: a new evaluation
    assert store.get_versioned(tid) == (store.get(tid), at + 1, 0)
    assert store.get_versioned("ab" * 16) is None
