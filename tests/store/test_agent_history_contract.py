"""The agent history's contract, on both stores (SQLite file, PostgreSQL on the real server
the suite starts): what ``recall_agent`` answers after ``remember_agents``, that the history
is shared by every connection to the store (a fleet's), and that it stays bounded whatever
the span content (per service, in all, by age)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.clock import ManualClock

from otel_eval.store import EvaluationStore, SqliteStore, is_postgresql_url
from otel_eval.store import base as store_base
from otel_eval.store import sqlite as sqlite_store

T0 = 1_764_547_200 * 10**9


Open = Callable[[], EvaluationStore]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def stores(target: str, clock: ManualClock) -> Iterator[Open]:
    opened: list[EvaluationStore] = []

    def open_one() -> EvaluationStore:
        if is_postgresql_url(target):
            from otel_eval.store.postgresql import PostgresStore
            opened.append(PostgresStore(target, clock_ns=clock).open())
        else:
            opened.append(SqliteStore(target, clock_ns=clock).open())
        return opened[-1]

    yield open_one
    for s in opened:
        s.close()


def _rows(store: EvaluationStore, service: str | None = None) -> int:
    """Rows of the history (of one service), counted through a recall-independent query."""
    if isinstance(store, SqliteStore):
        db = store._db
        sql, args = "SELECT COUNT(*) FROM agent_history", ()
        if service is not None:
            sql, args = sql + " WHERE service = ?", (service,)
        return int(db.execute(sql, args).fetchone()[0])
    sql = "SELECT COUNT(*) FROM agent_history"
    params: tuple[str, ...] = ()
    if service is not None:
        sql, params = sql + " WHERE service = %s", (service,)
    return int(store._rows(sql, params)[0][0])  # type: ignore[attr-defined]


def test_recall_answers_the_agent_of_the_strongest_unambiguous_fingerprint(
        stores: Open) -> None:
    store = stores()
    assert store.recall_agent("shop", ["system:a", "service"]) is None  # nothing seen yet
    store.remember_agents([("shop", "planner", ("system:p", "tools:t", "service"))])
    assert store.recall_agent("shop", ["system:x", "service"]) == "planner"  # one agent
    assert store.recall_agent("other", ["system:p", "service"]) is None  # another service
    store.remember_agents([("shop", "coder", ("system:c", "tools:t", "service"))])
    assert store.recall_agent("shop", ["system:p", "service"]) == "planner"
    assert store.recall_agent("shop", ["system:c", "tools:t", "service"]) == "coder"
    # tools:t was shown by both, the service by both: nothing tells them apart
    assert store.recall_agent("shop", ["tools:t", "service"]) is None
    assert store.recall_agent("shop", ["steps:s", "service"]) is None
    assert store.recall_agent("shop", []) is None


def test_the_history_is_shared_by_every_connection_to_the_store(stores: Open) -> None:
    writer, reader = stores(), stores()  # two workers of one fleet
    writer.remember_agents([("shop", "planner", ("steps:s", "service"))])
    assert reader.recall_agent("shop", ["steps:s", "service"]) == "planner"


def test_hostile_names_are_cut_and_stored_as_text(stores: Open) -> None:
    store = stores()
    service = "sh\x00op'; DROP TABLE agent_history; --" * 1000
    agent = "a\u2028" + "x" * 10_000
    store.remember_agents([(service, agent, ("service",))])
    got = store.recall_agent(service, ["service"])
    assert got is not None and len(got) == store_base.AGENT_HISTORY_NAME_CHARS
    assert got.startswith("a\u2028x")
    assert _rows(store) == 1


def test_each_service_keeps_its_most_recently_seen_rows(stores: Open, clock: ManualClock) -> None:
    store = stores()
    cap = store_base.AGENT_HISTORY_PER_SERVICE
    store.remember_agents([("shop", "old", ("system:old",))])
    evicted = 0
    for i in range(cap + 20):
        clock.now += 10**9
        evicted += store.remember_agents([("shop", "planner", (f"steps:{i}",))]).get(
            "max_service_rows", 0)
    store.remember_agents([("quiet", "solo", ("service",))])
    assert _rows(store, "shop") == cap
    assert evicted == 21  # each counted (otel_eval_agent_history_evicted_total)
    assert store.recall_agent("shop", [f"steps:{cap + 19}"]) == "planner"  # newest kept
    assert store.recall_agent("shop", ["system:old"]) is None  # least recently seen: gone
    assert store.recall_agent("quiet", ["service"]) == "solo"  # other services untouched


def test_a_busy_agent_does_not_make_its_service_look_single_agent(
        stores: Open, clock: ManualClock) -> None:
    """A service of two agents: a rare one (refunds) and a busy one whose runs each show a
    new system prompt (a date, a user's name in it). The busy agent's fingerprints fill the
    service's rows; the service fingerprint must still say two agents. Before, refunds' rows
    went first, its service row with them, so the service read as the planner's alone and a
    hung refunds run (no agent span, its own fingerprints pruned) was named planner: judged
    with the planner's budgets and counted, and paged, as the planner."""
    store = stores()
    store.remember_agents([("shop", "refunds", ("system:r", "tools:r", "steps:r", "service"))])
    for i in range(store_base.AGENT_HISTORY_PER_SERVICE):
        clock.now += 10**9
        store.remember_agents([("shop", "planner", (f"system:p{i}", "tools:p", "steps:p",
                                                    "service"))])
    assert _rows(store, "shop") == store_base.AGENT_HISTORY_PER_SERVICE
    assert store.recall_agent("shop", ["tools:r", "service"]) is None
    assert store.recall_agent("shop", ["tools:p", "service"]) == "planner"


def test_the_whole_history_is_bounded_and_forgets_old_rows(
        stores: Open, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    from otel_eval.store import postgresql

    for module in (sqlite_store, postgresql):
        monkeypatch.setattr(module, "AGENT_HISTORY_ROWS", 50)
        monkeypatch.setattr(module, "AGENT_HISTORY_PRUNE_EVERY", 1)
    store = stores()
    for i in range(200):  # hostile: a new service name per run
        clock.now += 10**9
        store.remember_agents([(f"svc-{i}", "a", ("service",))])
    assert _rows(store) == 50
    assert store.recall_agent("svc-199", ["service"]) == "a"
    assert store.recall_agent("svc-0", ["service"]) is None
    # a month later: not recalled, and deleted at the next prune
    clock.now += store_base.AGENT_HISTORY_MAX_AGE_S * 10**9 + 1
    assert store.recall_agent("svc-199", ["service"]) is None
    assert store.remember_agents([("new", "b", ("service",))]) == {"max_age": 50}
    assert _rows(store) == 1


def test_a_row_seen_again_with_an_older_time_keeps_its_last_seen(
        stores: Open, clock: ManualClock) -> None:
    """Two writers of one store (``serve --workers`` processes, a fleet) take ``now`` before
    they wait for the write lock, so a batch can commit after a newer one with an older time.
    The row keeps the last time it was seen, on SQLite as on PostgreSQL: SQLite wrote the
    older time over it, and forgot (recalled nothing for) a run PostgreSQL still recalled."""
    first, late = stores(), stores()
    clock.now = T0 + 20 * 86_400 * 10**9
    first.remember_agents([("shop", "planner", ("system:p",))])
    clock.now = T0  # the delayed batch: its time taken before the other's
    late.remember_agents([("shop", "planner", ("system:p",))])
    clock.now = T0 + (store_base.AGENT_HISTORY_MAX_AGE_S + 86_400) * 10**9
    assert first.recall_agent("shop", ["system:p"]) == "planner"


def test_past_the_whole_bound_the_service_holding_the_most_rows_gives_way(
        stores: Open, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Five quiet services, seen long ago, four rows each; then five busy services, twenty
    rows each: past the 50 rows in all, the busy ones give way (each down to what the next
    holds, its least recently seen first) and every quiet service is still recalled. Before,
    the least recently seen rows went first, whosever they were: the quiet services' history
    was deleted (their runs without an agent name read as unknown) and nothing counted it."""
    from otel_eval.store import postgresql

    for module in (sqlite_store, postgresql):
        monkeypatch.setattr(module, "AGENT_HISTORY_ROWS", 50)
        monkeypatch.setattr(module, "AGENT_HISTORY_PRUNE_EVERY", 1)
    store = stores()
    evicted: dict[str, int] = {}

    def remember(runs: list[tuple[str, str, tuple[str, ...]]]) -> None:
        clock.now += 10**9
        for reason, n in store.remember_agents(runs).items():
            evicted[reason] = evicted.get(reason, 0) + n

    for q in range(5):
        remember([(f"quiet-{q}", "solo", ("system:q", "tools:q", "steps:q", "service"))])
    for i in range(20):
        remember([(f"busy-{b}", "agent", (f"steps:{i}",)) for b in range(5)])
    assert _rows(store) == 50
    assert [_rows(store, f"quiet-{q}") for q in range(5)] == [4] * 5
    assert [_rows(store, f"busy-{b}") for b in range(5)] == [6] * 5
    for q in range(5):
        assert store.recall_agent(f"quiet-{q}", ["system:q", "service"]) == "solo"
    assert store.recall_agent("busy-0", ["steps:19"]) == "agent"  # newest kept
    assert store.recall_agent("busy-0", ["steps:13"]) is None  # least recently seen: gone
    assert evicted == {"max_rows": 70}  # 120 remembered, 50 kept


def test_a_flood_of_service_names_does_not_make_a_service_look_single_agent(
        stores: Open, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the rows in all, the services holding the most give way down to what the next
    holds: a flood of new one-row service names levels a quiet two-agent service down to
    one row, its last-seen agent's service row. The service then read as that agent's
    alone, and a hung run of its other agent (no agent span, its own fingerprints pruned)
    was named after the wrong agent, as the per-service bound had done before it kept the
    service rows. A service that keeps only some of its service rows now keeps none: its
    runs without an agent name read as unknown."""
    from otel_eval.store import postgresql

    for module in (sqlite_store, postgresql):
        monkeypatch.setattr(module, "AGENT_HISTORY_ROWS", 50)
        monkeypatch.setattr(module, "AGENT_HISTORY_PRUNE_EVERY", 1)
    store = stores()
    store.remember_agents([("shop", "refunds", ("system:r", "tools:r", "service"))])
    clock.now += 10**9
    store.remember_agents([("shop", "planner", ("system:p", "tools:p", "service"))])
    evicted = 0
    for i in range(49):  # hostile: a new service name per run
        clock.now += 10**9
        evicted += store.remember_agents([(f"svc-{i}", "a", ("service",))]).get("max_rows", 0)
    assert _rows(store) <= 50
    assert store.recall_agent("shop", ["system:r", "tools:r", "service"]) is None  # not planner
    assert store.recall_agent("svc-48", ["service"]) == "a"
    assert evicted == 6 - _rows(store, "shop")  # every row deleted counted


def test_a_quiet_one_agent_service_is_recalled_until_the_services_outnumber_the_rows(
        stores: Open, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """What docs/store.md says of a flood of new service names: it takes a quiet service's
    rows down to what each of them holds, the row naming its one agent last; only once the
    services outnumber the rows in all does the least recently seen one lose that too."""
    from otel_eval.store import postgresql

    for module in (sqlite_store, postgresql):
        monkeypatch.setattr(module, "AGENT_HISTORY_ROWS", 50)
        monkeypatch.setattr(module, "AGENT_HISTORY_PRUNE_EVERY", 1)
    store = stores()
    store.remember_agents([("quiet", "solo", ("system:q", "tools:q", "service"))])
    for i in range(50):
        clock.now += 10**9
        store.remember_agents([(f"svc-{i}", "a", ("service",))])
        if i == 48:  # 50 services, 50 rows
            assert _rows(store, "quiet") == 1
            assert store.recall_agent("quiet", ["system:q", "service"]) == "solo"
    assert _rows(store) == 50 and _rows(store, "quiet") == 0  # 51 services
    assert store.recall_agent("quiet", ["system:q", "service"]) is None


class _Undone(Exception):
    """The remembering transaction rolled back (a test's)."""


@pytest.mark.postgres
def test_evictions_whose_answer_was_lost_are_counted_once(
        postgresql_url: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL only: the server committed a ``remember_agents`` transaction that deleted
    rows, then the connection was lost before its answer came back (a restart or failover at
    the commit). Tried again on a new connection, it deletes nothing more; the first
    attempt's deletions are still the ones counted. Before, it answered {} and
    ``otel_eval_agent_history_evicted_total`` missed them. One the server did not commit
    (rolled back, then the connection lost) is done and counted once, not twice."""
    import psycopg

    from otel_eval.store import postgresql

    monkeypatch.setattr(postgresql, "AGENT_HISTORY_PRUNE_EVERY", 1)
    real = postgresql._remember

    def committed_then_lost(conn: Any, *args: Any) -> dict[str, int]:
        monkeypatch.setattr(postgresql, "_remember", real)  # once
        real(conn, *args)  # committed on the server
        conn.close()  # ... and the answer lost with the connection
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    def undone_then_lost(conn: Any, *args: Any) -> dict[str, int]:
        monkeypatch.setattr(postgresql, "_remember", real)  # once
        try:
            with conn.transaction():  # the remembering transaction inside this one
                real(conn, *args)
                raise _Undone
        except _Undone:
            pass  # rolled back: nothing deleted
        conn.close()
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    store = postgresql.PostgresStore(postgresql_url, clock_ns=clock).open()
    try:
        for lost, old in ((committed_then_lost, 3), (undone_then_lost, 2)):
            store.remember_agents([("old", "a", tuple(f"steps:{i}" for i in range(old)))])
            clock.now += store_base.AGENT_HISTORY_MAX_AGE_S * 10**9 + 1
            monkeypatch.setattr(postgresql, "_remember", lost)
            assert store.remember_agents([("new", "b", ("service",))]) == {"max_age": old}
            assert _rows(store, "old") == 0
    finally:
        store.close()
