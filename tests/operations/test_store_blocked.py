"""A store that blocks is a store that fails (issue 33, findings 15 and 16).

Another client holds ``ACCESS EXCLUSIVE`` on ``evaluations``. Before, serve kept
acknowledging (617 acked, /readyz 200, 0 failures counted), results API calls hung, and
SIGTERM waited for the lock. Now the store's sessions carry ``lock_timeout`` and
``statement_timeout`` (``store.lock_timeout_s``, ``store.statement_timeout_s``): a write
past them is a refused write (``timeout``: kept, retried, receivers throttled, /readyz 503),
a read answers 503 with the reason, and shutdown gives up on a blocked write at its deadline
(the spool keeps the batch). A store that is down answers reads 503 too, not 500.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support.harness import running_service
from support.poll import poll

from otel_eval.app.config import Config, replace
from otel_eval.app.service import Service
from otel_eval.base.model import Span
from otel_eval.decode import encode
from otel_eval.store.base import SessionLimits
from otel_eval.store.postgresql import PostgresStore

WAIT_S = 60.0  # a bound on waiting for a condition on a loaded machine, not a timing


def _request(trace: str) -> bytes:
    root = Span(trace, "01" * 8, None, "invoke_agent planner", 1, 9,
                attributes={"gen_ai.operation.name": "invoke_agent",
                            "gen_ai.agent.name": "planner"})
    tool = Span(trace, "02" * 8, "01" * 8, "execute_tool search", 2, 8,
                attributes={"gen_ai.operation.name": "execute_tool",
                            "gen_ai.tool.name": "search"})
    return encode.encode_spans([root, tool]).SerializeToString()


def _http(url: str, body: bytes | None = None) -> tuple[int, dict[str, str], Any]:
    req = urllib.request.Request(url, data=body, method="POST" if body else "GET",
                                 headers={"Content-Type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


@contextmanager
def _locked(url: str) -> Iterator[psycopg.Connection[Any]]:
    """Another client holding ACCESS EXCLUSIVE on evaluations until the block ends."""
    with psycopg.connect(url) as other:
        other.execute("LOCK TABLE evaluations IN ACCESS EXCLUSIVE MODE")
        try:
            yield other
        finally:
            other.rollback()


def test_a_lock_held_by_another_client_is_a_refused_write_and_a_503_read(
        postgresql_url: str, tmp_path: Path) -> None:
    trace = "e1" * 16
    with running_service(tmp_path, **{"store.url": postgresql_url,
                                      "store.lock_timeout_s": 0.3,
                                      "store.statement_timeout_s": 5.0,
                                      "store.write_retry_max_elapsed_s": 0}) as h:
        with _locked(postgresql_url):
            assert _http(h.http_url, _request(trace))[0] == 200  # acknowledged: spooled
            h.release()
            assert h.sample("otel_eval_store_write_failures_total", reason="timeout") == 1
            assert h.svc.engine.pending_spans() == 2  # kept, not dropped, not an error row
            code, _, body = _http(f"{h.admin_url}/readyz")
            assert code == 503 and "timeout" in json.loads(body)["reason"]
            code, headers, _ = _http(h.http_url, _request("e2" * 16))
            assert code == 429 and "Retry-After" in headers  # the receivers throttle
            for path in ("/v1/evaluations", f"/v1/evaluations/{trace}", "/ui/"):
                code, headers, body = _http(f"{h.admin_url}{path}")
                assert code == 503, (path, code, body[:200])
                assert b"timeout" in body and b"Traceback" not in body
                assert headers["Retry-After"] == "5"
        h.release(after_s=60)  # the lock is gone: the kept batch is written
        stored = h.svc.store.get(trace)
        assert stored is not None and stored["findings"] == []
        assert _http(f"{h.admin_url}/readyz")[0] == 200
        assert h.sample("otel_eval_spool_requests") == 0


def test_reads_answer_503_while_the_store_is_down(postgresql_url: str,
                                                  tmp_path: Path) -> None:
    """Finding 16: the database refuses connections (down, out of connections): the results
    API and the web view answer 503 with the reason, not 500 with a traceback."""
    admin_url, name = postgresql_url.rsplit("/", 1)[0] + "/postgres", postgresql_url.rsplit(
        "/", 1)[1]
    with (running_service(tmp_path, **{"store.url": postgresql_url}) as h,
          psycopg.connect(admin_url, autocommit=True) as admin):
        admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                      "datname = %s AND pid <> pg_backend_pid()", (name,))
        try:
            for path in ("/v1/evaluations", f"/v1/evaluations/{'e3' * 16}", "/ui/"):
                code, _, body = _http(f"{h.admin_url}{path}")
                assert code == 503, (path, code, body[:300])
                assert b"unavailable" in body and b"Traceback" not in body
        finally:
            admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")


def _waiting_for_a_lock(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                        "'otel-eval' AND wait_event_type = 'Lock'").fetchone()
    return bool(row and row[0])


def test_shutdown_gives_up_on_a_blocked_write_and_the_spool_keeps_it(
        postgresql_url: str, tmp_path: Path) -> None:
    """With no lock limit (0), a write waits on the lock for ever: SIGTERM must not."""
    cfg = replace(Config(), **{
        "receiver.grpc_endpoint": "127.0.0.1:0", "receiver.http_endpoint": "127.0.0.1:0",
        "admin.endpoint": "127.0.0.1:0", "store.path": str(tmp_path / "otel-eval.db"),
        "store.url": postgresql_url, "store.lock_timeout_s": 0, "store.statement_timeout_s": 0,
        "evaluation.workers": 1, "assembly.grace_s": 0.05})
    trace = "f1" * 16
    PostgresStore(postgresql_url).open().close()  # the schema, before another client locks
    with _locked(postgresql_url):
        svc = Service(cfg)
        svc.start()
        try:
            port = svc.http.port if svc.http is not None else 0
            assert _http(f"http://127.0.0.1:{port}/v1/traces", _request(trace))[0] == 200
            poll(lambda: _waiting_for_a_lock(postgresql_url), "the engine to reach the lock",
                 timeout_s=WAIT_S)
        finally:
            stopper = threading.Thread(target=svc.shutdown, args=(2.0,))
            stopper.start()
            stopper.join(WAIT_S)
        # the stop returned, and ``stopped`` is only set when the engine's thread ended within
        # the deadline: it gave up on the blocked write (a stop that waited for the store would
        # still be running). The store's close then cancels that write, so the thread ends
        # soon after; whether it has yet when this line runs is a race, and not asserted.
        assert not stopper.is_alive() and not svc.engine.stopped
        thread = svc.engine._thread
        poll(lambda: thread is None or not thread.is_alive(), "the cancelled write to end",
             timeout_s=WAIT_S)
    again = Service(replace(cfg, **{"store.lock_timeout_s": 5.0}))
    again.start(worker=False)
    try:
        again.engine.tick(time.monotonic() + 3600)
        again.engine.process()
        assert again.store.get(trace) is not None  # replayed from the spool, stored
    finally:
        again.shutdown(5.0)


def _our_connections(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                        "'otel-eval' AND datname = current_database()").fetchone()
    return int(row[0]) if row else 0


def test_close_cancels_a_call_blocked_by_another_clients_lock(postgresql_url: str) -> None:
    """The cancelled call closes the connection when it ends, and no later call reopens one
    (before: the connection stayed open, and a call after close connected again)."""
    store = PostgresStore(postgresql_url, session=SessionLimits(0, 0)).open()
    errors: list[BaseException] = []

    def count() -> None:
        try:
            store.count()
        except BaseException as e:
            errors.append(e)
    with _locked(postgresql_url):
        reader = threading.Thread(target=count)
        reader.start()
        poll(lambda: _waiting_for_a_lock(postgresql_url), "the reader to wait for the lock",
             timeout_s=WAIT_S)
        store.close()  # before: waited for the lock for ever
        reader.join(WAIT_S)
        assert not reader.is_alive()
    assert errors and type(errors[0]).__name__ == "QueryCanceled"
    assert _our_connections(postgresql_url) == 0
    with pytest.raises(psycopg.InterfaceError, match="closed"):
        store.count()
    assert _our_connections(postgresql_url) == 0
