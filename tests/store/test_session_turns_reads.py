"""``session_turns`` on both stores (SQLite file, PostgreSQL): what it reads of a session is
one consistent view (the turns and their count), whatever other writers commit meanwhile."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from otel_eval.base.results import Evaluation, Verdict
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.reader import SessionReader
from otel_eval.store import EvaluationStore, open_store
from otel_eval.store.sessions import session_key

T0 = 1_764_547_200 * 10**9


def _turn(i: int, session: str, at: int, pad: int = 0, start: int = 0) -> Evaluation:
    traj = Trajectory(f"{i:032x}", "otlp", "complete", [], service="shop", agent="planner",
                      task_id="x" * pad, session_id=session, start_ns=start)
    return Evaluation(traj, [], Verdict(True, []), evaluated_at_ns=at)


class _Done:
    """A statement's result, read before the interleaved commit."""

    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def fetchall(self) -> list[Any]:
        rows, self._rows = self._rows, []
        return rows

    def fetchone(self) -> Any:
        return self._rows.pop(0) if self._rows else None


class _Interleaved:
    """A connection whose first statement reading a session's turns runs ``between`` (another
    process's commit) as soon as it is done."""

    def __init__(self, inner: Any, between: Callable[[], None]) -> None:
        self._inner = inner
        self._between: Callable[[], None] | None = between

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def execute(self, sql: Any, *args: Any, **kwargs: Any) -> Any:
        cur = self._inner.execute(sql, *args, **kwargs)
        if self._between is None or "session_id = " not in str(sql):
            return cur
        rows = cur.fetchall()
        between, self._between = self._between, None
        between()
        return _Done(rows)


def _interleave(store: EvaluationStore, between: Callable[[], None]) -> None:
    if hasattr(store, "_db"):  # SQLite: the writer's connection, which reads a session
        store._db = _Interleaved(store._db, between)  # type: ignore[attr-defined]
    else:  # PostgreSQL: its one connection
        with store._lock:  # type: ignore[attr-defined]
            conn = store._connection()  # type: ignore[attr-defined]
        store._conn = _Interleaved(conn, between)  # type: ignore[attr-defined]


def test_a_sessions_turns_and_their_count_are_one_read(
        stores: Callable[[], EvaluationStore]) -> None:
    """Retention (another worker's) deletes the oldest turn while the session is read. The
    turns and their count are read as of one moment: three turns of three, none cut. Before,
    PostgreSQL read them in two statements (and SQLite, whose file the ``--workers`` share,
    too): three turns of two, ``turns_cut`` -1, and a session completed then stored a
    ``cut_by`` and its metric raised on the negative count."""
    store, other = stores(), stores()
    store.put_many([_turn(i, "conv", T0 + i) for i in (1, 2, 3)])
    key = session_key("shop", "conv")
    _interleave(store, lambda: other.delete_older_than(T0 + 2))
    bodies, total, _, _ = store.session_turns(key, 10)
    assert (len(bodies), total) == (3, 3)
    # the next read sees the commit: two turns kept of the three the session counted, the
    # one retention deleted counted as cut
    record = SessionReader(store, SessionsConfig()).record(key)
    assert record is not None and record["counts"]["turns_cut"] == 1
    assert record["counts"]["turns"] == 3


class _Measured:
    """A PostgreSQL connection whose statements reading evaluations run in a transaction of
    their own, the blocks they fetch of ``evaluations``' TOAST table (where a large body is
    kept) added to ``blocks``."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.blocks = 0
        self._toast = inner.execute("SELECT reltoastrelid FROM pg_class WHERE relname = "
                                    "'evaluations'").fetchone()[0]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def execute(self, sql: Any, *args: Any, **kwargs: Any) -> Any:
        if "FROM evaluations" not in str(sql):
            return self._inner.execute(sql, *args, **kwargs)
        fetched = "SELECT pg_stat_get_xact_blocks_fetched(%s)"
        with self._inner.transaction():  # the counts not flushed yet: read before and after
            before = self._inner.execute(fetched, (self._toast,)).fetchone()[0]
            rows = self._inner.execute(sql, *args, **kwargs).fetchall()
            self.blocks += self._inner.execute(fetched, (self._toast,)).fetchone()[0] - before
        return _Done(rows)


def _big_turns(n: int, pad: int) -> list[Evaluation]:
    import random
    rng = random.Random(7)  # text that does not compress: each body stays its size
    turns = [_turn(i, "big", T0 + i) for i in range(1, n + 1)]
    for ev in turns:
        ev.trajectory.task_id = "".join(rng.choices("0123456789abcdef", k=pad))
    return turns


def test_reading_a_session_reads_the_turns_the_bounds_let_through_not_all(
        stores: Callable[[], EvaluationStore]) -> None:
    """A conversation id with many large turns (span content: anyone can send them): a read
    cut by ``max_turns_chars`` to two turns measures and fetches the bodies of those two and
    of the one that goes past, not every stored one. Before, the running sum took the length
    of all 40 bodies at every read and completion (PostgreSQL fetched each from TOAST)."""
    store = stores()
    store.put_many(_big_turns(40, 20_000))
    key = session_key("shop", "big")
    size = len(str(store.get(f"{40:032x}")))  # about each turn's stored JSON
    if hasattr(store, "_db"):  # SQLite: the characters LENGTH measures, counted
        measured = [0]

        def length(text: Any) -> int | None:
            if text is None:
                return None
            measured[0] += len(text)
            return len(text)
        store._db.create_function("length", 1, length)  # type: ignore[attr-defined]
        bodies, total, _, _ = store.session_turns(key, 500, int(2.5 * size))
        assert (len(bodies), total) == (2, 40)
        assert measured[0] <= 6 * size, measured[0] / size  # 3 bodies, at most twice each
    else:  # PostgreSQL: the TOAST blocks the read fetched, against one body's
        with store._lock:  # type: ignore[attr-defined]
            conn = _Measured(store._connection())  # type: ignore[attr-defined]
        store._conn = conn  # type: ignore[attr-defined]
        assert store.get(f"{39:032x}") is not None  # one turn's blocks
        one, conn.blocks = conn.blocks, 0
        assert one > 0
        bodies, total, _, _ = store.session_turns(key, 500, int(2.5 * size))
        assert (len(bodies), total) == (2, 40)
        assert conn.blocks <= 10 * one, conn.blocks / one  # a few bodies' worth, not 40


def test_turns_of_one_start_time_are_read_in_trace_id_order(
        stores: Callable[[], EvaluationStore]) -> None:
    """Turns that began at one time (or of unknown start, 0) are read newest first, then by
    trace id from the last (the reverse of the turn order, ``in_turn_order``), one after the
    other however many share the time."""
    store = stores()
    store.put_many([_turn(i, "conv", T0 + (i > 4), start=T0 + (i > 4)) for i in range(1, 7)])
    bodies, total, last_ns, _ = store.session_turns(session_key("shop", "conv"), 4)
    assert [int(b["trace_id"], 16) for b in bodies] == [6, 5, 4, 3]
    assert (total, last_ns) == (6, T0 + 1)


def test_a_session_is_read_by_its_newest_turns_by_start_not_by_evaluation(
        stores: Callable[[], EvaluationStore]) -> None:
    """Past ``sessions.max_turns`` a session is evaluated on its newest turns, in start order
    (docs/sessions.md). Its oldest turn, re-evaluated last (late spans re-opened it), was
    read as the newest, in place of a newer one: the session job and the API read turns 1,
    3 and 4 of four, turn 2 left out. The turns are read newest by when each began."""
    store = stores()
    store.put_many([_turn(i, "conv", T0 + i, start=T0 - 100 + i) for i in (1, 2, 3, 4)])
    store.put_many([_turn(1, "conv", T0 + 10, start=T0 - 99)])  # turn 1 re-evaluated
    bodies, total, last_ns, _ = store.session_turns(session_key("shop", "conv"), 3)
    assert [int(b["trace_id"], 16) for b in bodies] == [4, 3, 2]
    assert (total, last_ns) == (4, T0 + 10)  # the newest evaluation, turn 1's


def test_counting_open_sessions_reads_the_open_ones_not_the_completed(tmp_path: Path) -> None:
    """The session job counts the open (and claimed) sessions at every check. Completed ones
    stay in the table until retention, as many as conversation ids were sent (span
    content): the count's work is the same with 1,000 or 2,000 of them. Before, ``state <>
    'complete'`` scanned every row of the state index, completed ones included, at every
    check (SQLite; PostgreSQL cannot take ``<>`` as an index range either)."""
    store = open_store(str(tmp_path / "store.db"))
    try:
        store.put_many([_turn(1, "a", T0 + 1), _turn(2, "b", T0 + 2)])
        db = store._db  # type: ignore[attr-defined]
        steps = [0]

        def step() -> int:
            steps[0] += 1
            return 0

        def completed(first: int, n: int) -> None:  # rows as the job leaves them
            db.executemany("INSERT INTO sessions (session_id, state, first_turn_ns, "
                           "last_turn_ns, turns, bytes, completions) VALUES "
                           "(?, 'complete', 1, 1, 1, 1, 1)",
                           [(f"done-{i}",) for i in range(first, first + n)])

        def counted() -> tuple[int, int]:
            steps[0] = 0
            db.set_progress_handler(step, 1)  # a call per VM instruction
            try:
                return store.open_session_count(), steps[0]
            finally:
                db.set_progress_handler(None, 1)
        completed(0, 1000)
        open_n, work = counted()
        completed(1000, 1000)
        assert counted() == (open_n, work) and open_n == 2
    finally:
        store.close()
