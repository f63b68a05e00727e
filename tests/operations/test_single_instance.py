"""Issue 21 (one instance per store): a second serve cannot share a store, a spool or a port.

Before, a second serve on the same store replayed the first one's pending spool entries,
stored them as fragments and deleted them (after the first was killed, a trace held 1 of its
3 acknowledged spans), even when it then failed to bind its ports: it replayed before
binding. Now serve takes an exclusive flock on ``<store>.lock`` and ``<spool>.lock`` before
opening either, and binds every listener before it replays.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support.harness import Harness, running_service

from otel_eval.app.config import Config, replace
from otel_eval.app.service import Service
from otel_eval.base.configcheck import StartupError
from otel_eval.base.model import Span
from otel_eval.decode import encode

ROOT = Path(__file__).resolve().parents[2]
TRACE = "a1" * 16


def _serve(*args: str, timeout_s: float = 60,
           cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``otel-eval serve`` in a fresh interpreter, on free ports unless told otherwise, in
    ``cwd`` (where default paths, the spool's beside a PostgreSQL store, are made); it is
    expected to fail at startup (a refusal), so it never serves."""
    ports = {"--grpc-endpoint": "127.0.0.1:0", "--http-endpoint": "127.0.0.1:0",
             "--admin-endpoint": "127.0.0.1:0"}
    given = dict(zip(args[::2], args[1::2], strict=False))
    argv = [a for k, v in {**ports, **given}.items() for a in (k, v)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "otel_eval", "serve", *argv], env=env,
                          capture_output=True, text=True, timeout=timeout_s, cwd=cwd)


def one_line_failure(proc: subprocess.CompletedProcess[str]) -> str:
    """The failure's one line: exit 2, no traceback, no other error line."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    said = [line for line in proc.stderr.splitlines()
            if line.startswith("otel-eval:") or " ERROR " in line]
    assert len(said) == 1, proc.stderr
    return said[0]


def _export_partial(h: Harness) -> None:
    """One of a trace's spans (its root not ended): acknowledged, spooled, held open."""
    from test_grpc_floods import _export_body_to
    _export_body_to(h, encode.encode_spans([Span(TRACE, f"{2:016x}", f"{1:016x}", "chat",
                                              1, 2)]).SerializeToString())


def _spooled(db: Path) -> int:
    with sqlite3.connect(f"{db}-spool") as c:
        return int(c.execute("SELECT count(*) FROM spool_requests").fetchone()[0])


def test_a_second_serve_on_the_same_store_is_refused_naming_the_holder(tmp_path: Path) -> None:
    with running_service(tmp_path) as first:
        _export_partial(first)
        db = Path(first.svc.config.store.path)
        assert _spooled(db) == 1
        line = one_line_failure(_serve("--store", str(db)))
        assert f"store {db} is in use by another otel-eval serve (pid {os.getpid()}" in line
        assert _spooled(db) == 1  # the first one's pending request, untouched
        assert first.svc.engine.open_traces() == 1
    assert _spooled(db) == 1  # its root has not ended: a stop is no verdict, the next start
    # resumes it (before: judged at the first's shutdown, the run's first child as the run)


def test_a_second_serve_on_the_same_store_through_a_symlink_is_refused(tmp_path: Path) -> None:
    """Before, the lock file was named after the path as spelt: a symlink to the store got a
    second lock (and a second spool beside it), and two serves owned one store."""
    with running_service(tmp_path) as first:
        db = Path(first.svc.config.store.path)
        alias = tmp_path / "alias" / "store.db"
        alias.parent.mkdir()
        alias.symlink_to(db)
        line = one_line_failure(_serve("--store", str(alias)))
        assert f"store {alias} is in use by another otel-eval serve (pid {os.getpid()}" in line
        assert not Path(f"{alias}-spool").exists()


@pytest.mark.parametrize("spool", [{"store.spool": False},
                                   {"store.spool_path": "{tmp}/own-spool"}],
                         ids=["spool off", "spool elsewhere"])
def test_a_second_serve_on_the_same_judge_journal_is_refused(
        tmp_path: Path, spool: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """With PostgreSQL, ``store.path`` holds the judge's pending-work journal (and rubric
    cache); only the spool was locked, so with the spool off or elsewhere nothing locked it,
    and a second serve on the same path marked the first one's queued judge work skipped
    ``restart`` and sent its events again. The journal's file is locked as the store's is:
    the second is refused at start, naming the file and the holder."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # the judge's check passes: the lock
    path = str(tmp_path / "local.db")
    changes = {k: v.format(tmp=tmp_path) if isinstance(v, str) else v for k, v in spool.items()}
    # never reached: the lock is taken before the store is opened
    cfg = replace(Config(), **{"store.url": "postgresql://otel_eval@127.0.0.1:9/none",
                               "store.path": path, "judge.model": "openai/gpt-4o-mini",
                               **changes})
    first = Service(cfg, registry=CollectorRegistry())
    first._take_locks()  # serve's first step, as a running one holds it
    try:
        second = Service(replace(cfg, **{"store.spool_path": str(tmp_path / "second-spool")})
                         if "store.spool_path" in changes else cfg,
                         registry=CollectorRegistry())
        with pytest.raises(StartupError) as refused:
            second.start(worker=False)
        assert (f"judge journal {path} is in use by another otel-eval serve "
                f"(pid {os.getpid()}") in str(refused.value)
    finally:
        first._release_locks()


def test_the_lock_is_released_at_shutdown(tmp_path: Path) -> None:
    with running_service(tmp_path):
        pass
    with running_service(tmp_path) as again:  # same store, same process: free again
        assert again.svc.store.get(TRACE) is None


def test_a_serve_that_cannot_bind_its_port_replays_nothing(tmp_path: Path) -> None:
    with running_service(tmp_path) as first:
        _export_partial(first)
        first.svc._release_locks()  # as if the first had died, its ports still taken
        assert first.svc.grpc is not None
        taken = f"127.0.0.1:{first.svc.grpc.port}"
        cfg = replace(first.svc.config, **{"receiver.grpc_endpoint": taken})
        second = Service(cfg, registry=CollectorRegistry())
        with pytest.raises(StartupError, match=f"cannot listen on {taken}"):
            second.start(worker=False)
        # nothing replayed, so nothing stored as a fragment and no spool entry deleted
        assert first.svc.store.get(TRACE) is None
        assert _spooled(Path(cfg.store.path)) == 1
        assert second.metrics.registry.get_sample_value(
            "otel_eval_spool_spans_replayed_total") == 0


@pytest.mark.parametrize("listener", ["--grpc-endpoint", "--http-endpoint",
                                      "--admin-endpoint"])
def test_a_port_in_use_is_one_line_naming_the_endpoint(tmp_path: Path, listener: str) -> None:
    with running_service(tmp_path / "first") as first:
        assert first.svc.grpc is not None and first.svc.http is not None
        port = {"--grpc-endpoint": first.svc.grpc.port, "--http-endpoint": first.svc.http.port,
                "--admin-endpoint": first.svc.admin.port}[listener]
        line = one_line_failure(_serve(listener, f"127.0.0.1:{port}",
                                       "--store", str(tmp_path / "second.db")))
        assert f"cannot listen on 127.0.0.1:{port}" in line


def test_default_config_is_still_valid() -> None:
    assert Config().store.spool_file() == "otel-eval.db-spool"


def test_a_store_serve_cannot_open_is_refused_in_one_line(tmp_path: Path) -> None:
    """A store newer than this otel-eval (a downgrade, a worker left behind in a rolling
    upgrade) and a PostgreSQL server that cannot be reached (down, a wrong password) stopped
    serve with a Python traceback, where a SQLite file that is no database is refused in one
    line naming it (calibrate and show say the same in one line)."""
    import socket

    from otel_eval.store import SqliteStore

    newer = tmp_path / "newer.db"
    SqliteStore(str(newer)).open().close()
    with sqlite3.connect(newer) as c:
        c.execute("INSERT INTO schema_version VALUES (999, 'a newer otel-eval', 0)")
    line = one_line_failure(_serve("--store", str(newer)))
    assert f"store {newer}: store schema version 999 is newer" in line
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"postgresql://otel:s3cret@127.0.0.1:{s.getsockname()[1]}/db?connect_timeout=5"
        line = one_line_failure(_serve("--store", url, cwd=tmp_path))  # its default spool
    assert "store postgresql://otel:***@127.0.0.1:" in line and "s3cret" not in line


def test_a_store_under_a_file_is_refused_naming_what_is_no_directory(tmp_path: Path) -> None:
    """``--store`` under a regular file (a typo, a volume mounted as a file): the refusal
    said "cannot create its lock file ...: File exists", which reads as a stale lock."""
    (tmp_path / "data").write_text("")
    line = one_line_failure(_serve("--store", str(tmp_path / "data" / "otel-eval.db")))
    assert line.endswith(f": {tmp_path / 'data'} is not a directory"), line


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_lock_whose_pid_cannot_be_written_still_locks_and_serve_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A full disk at start (serve restarted by its supervisor after giving up on a full
    store, a new volume that filled): writing the pid into the lock file fails with ENOSPC
    (here: the lock file is /dev/full). Before, that OSError left ``acquire`` with the lock
    file open and flocked, and serve stopped with a traceback. The pid only names the holder
    in a second serve's refusal: the lock is held without it, and serve goes on (a store
    that refuses writes is throttled and retried until space returns)."""
    from otel_eval.store.lock import InstanceLock

    store = tmp_path / "otel-eval.db"
    (tmp_path / "otel-eval.db.lock").symlink_to("/dev/full")
    first = InstanceLock(str(store), "store")
    first.acquire()  # held, its pid unwritten
    assert "cannot write its pid" in caplog.text
    with pytest.raises(StartupError, match=r"is in use by another otel-eval serve"):
        InstanceLock(str(store), "store").acquire()
    first.release()
    second = InstanceLock(str(store), "store")
    second.acquire()  # released: free again
    second.release()


def test_a_second_serve_on_the_same_issue_catalogue_is_refused(tmp_path: Path) -> None:
    """``issues.store_path`` is a SQLite catalogue of its own: a SQLite catalogue always
    leads, so two serves given one file (a volume shared by two sidecars, each with its own
    store) both ran the issues job over it, their runs overlapping and each window's shares
    replacing the other's. The catalogue's file is locked as the store's is: the second
    serve is refused at start, naming the file and the holder."""
    catalogue = str(tmp_path / "issues.db")
    cfg = replace(Config(), **{"store.path": str(tmp_path / "first.db"),
                               "issues.store_path": catalogue})
    first = Service(cfg, registry=CollectorRegistry())
    first._take_locks()  # serve's first step, as a running one holds it
    try:
        second = Service(replace(cfg, **{"store.path": str(tmp_path / "second.db"),
                                         "receiver.grpc_endpoint": "127.0.0.1:0",
                                         "receiver.http_endpoint": "127.0.0.1:0",
                                         "admin.endpoint": "127.0.0.1:0"}),
                         registry=CollectorRegistry())
        try:
            second.start(worker=False)
        except StartupError as e:
            refused = str(e)
        else:
            second.shutdown(deadline_s=5)
            refused = ""
        assert (f"issues catalogue {catalogue} is in use by another otel-eval serve "
                f"(pid {os.getpid()}") in refused
        assert refused.endswith("give this one its own issues.store_path")
    finally:
        first._release_locks()
