"""A PostgreSQL store whose login is refused while serving (a password rotated, the role's
LOGIN revoked: SQLSTATE class 28) or whose database is gone (3D000) is the store being
unusable, not one trace's fault: the batch is kept and retried as ``unavailable`` (one
line per retry, /readyz and the write-failure metric say it), never stored trace by trace
as ``error``. psycopg raises these at connect as ``OperationalError`` without a SQLSTATE;
this pins that the real server's refusals land there."""

from __future__ import annotations

import psycopg
from support.postgresql_server import PostgresServer

from otel_eval.app.config import Config
from otel_eval.base.model import Span, Trace
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.stage import evaluate_and_store
from otel_eval.store import open_store

AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"}


def _traces() -> list[Trace]:
    return [Trace(f"{i:032x}", [Span(f"{i:032x}", "01" * 8, None, "agent", 1, 9,
                                     attributes=dict(AGENT))], "complete") for i in (1, 2)]


def _refused_after(server: PostgresServer, role: str, database: str, refuse: str) -> list[str]:
    """Open a store as ``role``, end its sessions (its next call connects again), run
    ``refuse`` as the superuser, then store two traces: their outcomes' reasons."""
    with psycopg.connect(server.url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"CREATE DATABASE {database} OWNER {role}")
    url = f"postgresql://{role}@127.0.0.1:{server.port}/{database}"
    store = open_store(url)
    try:
        with psycopg.connect(server.url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                          "WHERE usename = %s", (role,))
            admin.execute(refuse)
        outcomes = evaluate_and_store(Evaluator(Config()), store, _traces())
    finally:
        store.close()
    assert all(o.evaluation is None for o in outcomes)
    return [f"{o.unstored} {o.error}" for o in outcomes]


def test_a_login_refused_mid_run_is_unavailable(postgresql_server: PostgresServer) -> None:
    got = _refused_after(postgresql_server, "rotated", "login_refused",
                         "ALTER ROLE rotated NOLOGIN")  # 28000, as a wrong password's 28P01
    assert len(got) == 2 and all(g.startswith("unavailable OperationalError") for g in got)
    assert "not permitted to log in" in got[0]


def test_a_database_gone_mid_run_is_unavailable(postgresql_server: PostgresServer) -> None:
    got = _refused_after(postgresql_server, "owner3d", "gone",
                         "ALTER DATABASE gone RENAME TO gone_elsewhere")  # 3D000 at connect
    assert len(got) == 2 and all(g.startswith("unavailable OperationalError") for g in got)
    assert 'database "gone" does not exist' in got[0]
