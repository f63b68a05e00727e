"""``session_turns`` on both stores (SQLite file, PostgreSQL): what it reads of a session is
one consistent view (the turns and their count), whatever other writers commit meanwhile."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_eval.base.results import Evaluation, Verdict
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.reader import SessionReader
from otel_eval.store import EvaluationStore, open_store
from otel_eval.store.sessions import session_key

T0 = 1_764_547_200 * 10**9


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    return str(request.getfixturevalue("postgresql_url"))


@pytest.fixture
def stores(target: str) -> Iterator[Callable[[], EvaluationStore]]:
    """Stores on one target, each its own connection (as separate processes)."""
    opened: list[EvaluationStore] = []

    def open_one() -> EvaluationStore:
        opened.append(open_store(target))
        return opened[-1]

    yield open_one
    for s in opened:
        s.close()


def _turn(i: int, session: str, at: int, pad: int = 0) -> Evaluation:
    traj = Trajectory(f"{i:032x}", "otlp", "complete", [], service="shop", agent="planner",
                      task_id="x" * pad, session_id=session)
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
    # the next read sees the commit: two turns of two
    record = SessionReader(store, SessionsConfig()).record(key)
    assert record is not None and record["counts"]["turns_cut"] == 0
    assert record["counts"]["turns"] == 2
