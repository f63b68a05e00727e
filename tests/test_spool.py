"""The spool: what an engine acknowledged survives the loss of the process; time by hand.

A "crash" here is dropping an engine and its spool without shutdown (nothing released,
nothing flushed), then opening the same files again: exactly what SQLite sees after kill -9.
The kill -9 of a real ``otel-eval serve`` is tests/load/test_kill9.py.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from otel_eval.app.config import Config, replace
from otel_eval.assemble.engine import Engine
from otel_eval.assemble.spool import CORRUPT_KEPT, SCHEMA_VERSION, Spool
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.base.component import Held, settle
from otel_eval.base.model import Span
from otel_eval.decode import otlp
from otel_eval.decode.encode import encode_spans
from otel_eval.decode.otlp_json import request_to_json
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.stage import InProcess
from otel_eval.receive.ingest import Ingest
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics

T1, T2, T3 = "a" * 32, "b" * 32, "c" * 32
GRACE = 10.0


def span(trace: str, sid: int, parent: int | None = 1) -> Span:
    return Span(trace, f"{sid:016x}", f"{parent:016x}" if parent is not None else None,
                "invoke_agent" if parent is None else "chat", 1, 2,
                attributes={"gen_ai.operation.name": "chat" if parent else "invoke_agent"})


def body(spans: list[Span]) -> bytes:
    return encode_spans(spans).SerializeToString()


class Node:
    """One process's engine, store and spool on the files in ``tmp``."""

    def __init__(self, tmp: Path, max_bytes: int = 1 << 30, sinks: Sequence[Any] = (),
                 **assembly: Any) -> None:
        self.now = 0.0
        self.metrics = Metrics(CollectorRegistry())
        cfg = replace(Config(), **{"assembly.grace_s": GRACE,
                                   **{f"assembly.{k}": v for k, v in assembly.items()}})
        self.store = Store(str(tmp / "store.db"))
        self.spool = Spool(str(tmp / "store.db-spool"), max_bytes, self.metrics.spool).open()
        self.engine = Engine(InProcess(Evaluator(cfg), self.store),
                             StoreHealth(self.store.location, clock=lambda: self.now),
                             self.metrics, assembly=cfg.assembly, clock=lambda: self.now,
                             spool=self.spool, sinks=sinks)
        self.replayed = self.engine.replay()

    def send(self, spans: list[Span]) -> str | None:
        """Submit as the receivers do; the throttle reason, or None when acknowledged."""
        return self.engine.submit(spans, request=body(spans)).throttled

    def release(self) -> int:
        self.now += GRACE + 1
        self.engine.tick()
        return self.engine.process()

    def stored_spans(self) -> dict[str, int]:
        return {b["trace_id"]: b["counts"]["spans"] for b in self.store.latest(1000)}

    def sample(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0

    def crash(self) -> None:
        """Lose the process: connections closed, nothing released or flushed."""
        self.store.close()
        self.spool.close()


def test_acknowledged_spans_are_replayed_after_a_crash(tmp_path: Path) -> None:
    a = Node(tmp_path)
    assert a.send([span(T1, 1, None), span(T1, 2), span(T2, 3, None)]) is None
    assert a.send([span(T1, 4)]) is None
    assert a.spool.held()[0] == 2
    a.crash()  # acknowledged, never evaluated

    b = Node(tmp_path)
    assert b.replayed == (2, 4, 0)
    assert b.sample("otel_eval_spool_spans_replayed_total") == 4
    assert b.sample("otel_eval_receiver_spans_accepted_total", protocol="grpc") == 0
    assert b.release() == 2
    assert b.stored_spans() == {T1: 3, T2: 1}
    assert b.spool.held() == (0, 0)  # evaluated traces leave the spool


def test_a_request_stays_until_every_trace_it_fed_is_stored_and_replays_only_those(
        tmp_path: Path) -> None:
    a = Node(tmp_path)
    a.send([span(T1, 1, None), span(T1, 2)])  # T1 complete
    a.send([span(T1, 3), span(T2, 4, parent=9)])  # T2 has no root yet: waits for idle timeout
    assert a.release() == 1  # T1 stored; the second request still feeds T2
    assert a.stored_spans() == {T1: 3}
    assert a.spool.held()[0] == 1
    a.crash()

    b = Node(tmp_path)
    assert b.replayed == (1, 1, 0)  # T2's span only: T1's tail does not come back
    b.now += Config().assembly.idle_timeout_s  # T2's root is recognised once it goes idle
    b.release()
    assert b.stored_spans() == {T1: 3, T2: 1}
    assert b.spool.held() == (0, 0)


def test_a_reopened_trace_replays_whole(tmp_path: Path) -> None:
    a = Node(tmp_path)
    a.send([span(T1, 1, None), span(T1, 2), span(T1, 3)])
    a.release()
    assert a.spool.held() == (0, 0)
    a.send([span(T1, 4)])  # late: re-opens T1 (revision 1) with its held spans
    a.crash()

    b = Node(tmp_path)
    b.release()
    assert b.stored_spans() == {T1: 4}  # not a one-span fragment replacing the whole trace
    assert b.spool.held() == (0, 0)


def test_revision_0_stored_after_a_reopen_keeps_the_reopened_spans(tmp_path: Path) -> None:
    a = Node(tmp_path)
    a.send([span(T1, 1, None), span(T1, 2)])
    a.now += GRACE + 1
    a.engine.tick()  # released, queued, not stored yet
    a.send([span(T1, 3)])  # re-opens revision 1 while revision 0 waits in the queue
    a.engine.process()  # revision 0 stored: only its own pairs leave
    assert a.stored_spans() == {T1: 2}
    a.crash()

    b = Node(tmp_path)
    b.release()
    assert b.stored_spans() == {T1: 3}


def test_crash_between_store_and_spool_delete_replays_and_is_not_evaluated_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = Node(tmp_path)
    a.send([span(T1, 1, None), span(T1, 2)])

    def fail(*_: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(a.spool, "_delete", fail)
    a.release()  # stored; deleting its spool rows fails: counted, the worker goes on
    assert a.sample("otel_eval_spool_failures_total", operation="delete") == 1
    assert a.stored_spans() == {T1: 2}
    stamp = a.store.stamp(T1)
    a.crash()
    monkeypatch.undo()

    b = Node(tmp_path)
    assert b.replayed == (1, 2, 0)
    assert b.release() == 1  # released again, the same content: its evaluation is stored
    assert b.sample("otel_eval_evaluation_skipped_total", reason="already_evaluated") == 1
    assert b.store.stamp(T1) == stamp  # the row a wrote, not a second evaluation
    counted = [s.name for m in b.metrics.registry.collect() for s in m.samples
               if s.name in ("otel_eval_traces_completed_total",
                             "otel_eval_traces_superseded_total")]
    assert counted == []  # no second count of the trace
    assert b.spool.held() == (0, 0)  # done all the same: its rows leave


def test_a_replay_with_more_than_was_stored_is_evaluated_again(tmp_path: Path) -> None:
    a = Node(tmp_path)
    a.send([span(T1, 1, None), span(T1, 2)])
    a.release()
    a.send([span(T1, 3)])  # late: re-opens T1, then the crash
    a.crash()

    b = Node(tmp_path)
    b.release()
    assert b.sample("otel_eval_evaluation_skipped_total", reason="already_evaluated") == 0
    assert b.stored_spans() == {T1: 3}


def test_requests_that_feed_nothing_leave_no_row(tmp_path: Path) -> None:
    a = Node(tmp_path)
    spans = [span(T1, 1, None), span(T1, 2)]
    a.send(spans)
    a.send(spans)  # a retry whose first answer was lost: all duplicates
    assert a.spool.held()[0] == 1


def test_past_max_bytes_the_receivers_throttle_with_a_reason(tmp_path: Path) -> None:
    first = [span(T1, i) for i in range(1, 40)]
    a = Node(tmp_path, max_bytes=len(body(first)) + 10)
    assert a.send(first) is None  # an empty spool takes one request, however large
    assert a.send([span(T2, 1)]) == "spool_full"  # refused: nothing taken
    assert a.engine.pending_spans() == 39
    a.engine.submit([span(T3, 1)])  # no request bytes (Kafka): not spooled, not bounded
    a.engine.shutdown(0)
    assert a.send([span(T2, 1)]) == "shutting_down"
    assert a.spool.held() == (1, len(body(first)))  # T1's run never ended: kept, unjudged


def test_a_failed_spool_write_refuses_the_request(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = Node(tmp_path)

    def fail(*_: object, **__: object) -> int:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(a.spool, "append", fail)
    assert a.send([span(T1, 1, None)]) == "spool_error"
    assert a.engine.pending_spans() == 0  # nothing taken: the exporter retries
    assert a.sample("otel_eval_spool_failures_total", operation="append") == 1


def test_a_reopen_the_spool_cannot_hold_is_refused_not_acknowledged(tmp_path: Path) -> None:
    """Late spans re-open a stored run: the run's spans are spooled again with them, or a
    crash would replay the late spans alone (refused ``late``: the stored run stands, the
    late spans lost). Before, when that write failed (a full disk) after the request's own
    row was written, the request was acknowledged all the same. Now the run and the request
    are written together or not at all: a spool that cannot hold them refuses the request
    (``spool_error``, nothing taken: the exporter retries), and the retry, once there is
    room, survives a crash whole."""
    a = Node(tmp_path)
    big = [span(T1, 1, None), span(T1, 2), span(T1, 3)]
    for s in big:
        s.attributes["payload"] = "x" * 300_000  # the run's re-spooled row: pages of its own
    assert a.send(big) is None
    a.release()
    assert a.spool.held() == (0, 0)
    a.spool._db.execute("VACUUM")  # the run's freed pages: no longer room for it
    pages = a.spool._db.execute("PRAGMA page_count").fetchone()[0]
    a.spool._db.execute(f"PRAGMA max_page_count={pages + 2}")  # room for the late span only
    late = [span(T1, 4)]
    assert a.send(late) == "spool_error"
    assert a.sample("otel_eval_spool_failures_total", operation="append") == 1
    assert a.engine.pending_spans() == 0  # T1 not re-opened: nothing taken
    a.spool._db.execute("PRAGMA max_page_count=1073741823")  # room again: the retry
    assert a.send(late) is None
    a.crash()

    b = Node(tmp_path)
    b.release()
    assert b.stored_spans() == {T1: 4}  # the acknowledged late span, in its run
    assert b.sample("otel_eval_evaluation_skipped_total", reason="late") == 0


def test_service_spools_beside_the_store_unless_off(tmp_path: Path) -> None:
    cfg = replace(Config(), **{"store.path": str(tmp_path / "e.db")})
    assert cfg.store.spool_file() == str(tmp_path / "e.db-spool")
    assert replace(cfg, **{"store.spool": False}).store.spool_file() is None
    assert replace(cfg, **{"store.path": ":memory:"}).store.spool_file() is None


def test_fsync_asks_sqlite_for_a_full_sync(tmp_path: Path) -> None:
    metrics = Metrics(CollectorRegistry()).spool
    for fsync, level in ((False, 0), (True, 2)):  # OFF survives kill -9, FULL power loss
        spool = Spool(str(tmp_path / f"s{fsync}"), 1 << 20, metrics, fsync=fsync).open()
        assert spool._db.execute("PRAGMA synchronous").fetchone()[0] == level
        spool.close()


def test_with_fsync_the_sqlite_store_commits_durably_too(tmp_path: Path) -> None:
    """A spool row is deleted once its trace's evaluation is committed to the store. With
    ``store.spool_fsync`` the delete is flushed to disk, so the store's commit must be too:
    at ``synchronous=NORMAL`` (WAL) a commit is flushed only at the next checkpoint, and a
    power loss before it lost the evaluation while the spool's flushed delete had already
    dropped the request: an acknowledged trace gone, where the setting promises power loss
    is survived. The serving process's store and the worker processes' (opened from the
    same session settings) commit at FULL; without the setting, NORMAL as before."""
    from otel_eval.store import SqliteStore, store_at

    for fsync, level in ((False, 1), (True, 2)):
        cfg = replace(Config(), **{"store.path": str(tmp_path / f"e{fsync}.db"),
                                   "store.spool_fsync": fsync})
        store = store_at(cfg.store.target, cfg.store.session)  # as serve and its workers do
        assert isinstance(store, SqliteStore)
        store.open()
        try:
            assert store._db.execute("PRAGMA synchronous").fetchone()[0] == level
        finally:
            store.close()


def test_an_unreadable_spool_is_set_aside_and_a_new_one_begun(tmp_path: Path) -> None:
    path = tmp_path / "store.db-spool"
    path.write_bytes(b"not a database, as after a power loss without fsync " * 100)
    metrics = Metrics(CollectorRegistry())
    spool = Spool(str(path), 1 << 20, metrics.spool).open()
    assert spool.held() == (0, 0)
    assert metrics.registry.get_sample_value("otel_eval_spool_failures_total",
                                             {"operation": "open"}) == 1
    [aside] = tmp_path.glob("store.db-spool.corrupt-*")
    assert aside.read_bytes().startswith(b"not a database")
    spool.append(b"x", ["a" * 32])
    spool.close()


def test_spools_set_aside_after_power_losses_are_bounded_the_newest_kept(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Each start that finds the spool unreadable sets it aside. Before, the files set aside
    were never deleted: power loss after power loss piled them up (each up to
    ``spool_max_bytes``) without bound. The newest ``CORRUPT_KEPT`` are kept, for a
    post-mortem; an older one is deleted, its WAL and shared-memory files with it, and
    logged."""
    path = tmp_path / "store.db-spool"
    metrics = Metrics(CollectorRegistry())
    for loss in range(CORRUPT_KEPT + 2):
        path.write_bytes(f"power loss {loss} ".encode() * 500)
        Path(f"{path}-wal").write_bytes(b"wal")
        Spool(str(path), 1 << 20, metrics.spool).open().close()
    kept = sorted(tmp_path.glob("store.db-spool.corrupt-*"))
    assert len([p for p in kept if not p.name.endswith(("-wal", "-shm"))]) == CORRUPT_KEPT
    assert len([p for p in kept if p.name.endswith("-wal")]) == CORRUPT_KEPT
    bodies = {p.read_bytes().split(b" ")[2] for p in kept
              if not p.name.endswith(("-wal", "-shm"))}
    assert bodies == {str(n).encode() for n in range(2, CORRUPT_KEPT + 2)}
    assert "deleted" in caplog.text
    assert metrics.registry.get_sample_value("otel_eval_spool_failures_total",
                                             {"operation": "open"}) == CORRUPT_KEPT + 2


def test_a_spool_that_cannot_be_read_now_is_kept_not_set_aside(tmp_path: Path) -> None:
    """Only a damaged file is set aside. One another connection holds locked (as a full disk
    or an I/O error, a state of the moment) failed its open, was moved aside as "unreadable"
    and an empty spool begun: the acknowledged requests it held were never replayed. Now the
    start fails naming the file, and the next start replays them."""
    from otel_eval.base.configcheck import StartupError

    path = str(tmp_path / "store.db-spool")
    metrics = Metrics(CollectorRegistry()).spool
    first = Spool(path, 1 << 20, metrics).open()
    first.append(body([span(T1, 1, None)]), [T1])
    first.close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("DELETE FROM spool_traces WHERE 0")  # takes the lock
    # the open waits out SQLite's busy timeout, then fails naming the file
    with pytest.raises(StartupError, match=r"store\.db-spool: database is locked"):
        Spool(path, 1 << 20, metrics).open()
    holder.close()
    assert not list(tmp_path.glob("*.corrupt-*"))
    again = Spool(path, 1 << 20, metrics).open()
    assert again.held()[0] == 1
    again.close()


def test_otlp_json_requests_are_spooled_as_protobuf_and_replayed(tmp_path: Path) -> None:
    a = Node(tmp_path)
    spans = [span(T1, 1, None), span(T1, 2)]
    body = json.dumps(request_to_json(encode_spans(spans))).encode()
    res = Ingest(a.engine, a.metrics).handle_json(body, "http")
    assert (res.outcome, res.accepted) == ("ok", 2)
    a.crash()

    b = Node(tmp_path)
    assert b.replayed == (1, 2, 0)
    b.release()
    assert b.stored_spans() == {T1: 2}


def test_spans_this_version_refuses_at_replay_are_counted_and_logged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A span an earlier version acknowledged (spooled) that today's decoder refuses was
    dropped at replay with the decoder's reasons unread: gone, counted nowhere. Now it is
    counted (spool_spans_rejected_total{reason}) and logged; a span of a trace the spool
    does not replay (refused when received, counted then) is not counted again."""
    late = Span(T1, f"{2:016x}", f"{1:016x}", "chat", 10, 20,
                attributes={"gen_ai.operation.name": "chat"})
    other = Span(T2, f"{3:016x}", None, "invoke_agent", 10, 20)
    a = Node(tmp_path)
    good = [span(T1, 1, None), late]
    assert a.engine.submit(good, request=body([*good, other])).throttled is None
    a.crash()

    monkeypatch.setattr("otel_eval.decode.otlp.MAX_TIME_NS", 5)  # a stricter decoder
    with caplog.at_level(logging.WARNING, logger="otel_eval.assemble.spool"):
        b = Node(tmp_path)
    assert b.replayed == (1, 1, 0)
    assert b.sample("otel_eval_spool_spans_rejected_total", reason="invalid_timestamp") == 1
    assert "1 span(s)" in caplog.text and "1 invalid_timestamp" in caplog.text


def test_a_request_whose_spans_are_all_refused_at_replay_leaves_the_spool(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace none of whose spooled spans today's decoder takes never reached assembly,
    so nothing ever released it: its row stayed in the spool for good, counted against
    store.spool_max_bytes, replayed and its spans counted refused again at every start.
    Now its pair goes at the replay (counted once); the request with it when no pair is
    left."""
    refused = [Span(T1, f"{1:016x}", None, "invoke_agent", 10, 20),
               Span(T1, f"{2:016x}", f"{1:016x}", "chat", 10, 20)]
    a = Node(tmp_path)
    assert a.send(refused) is None
    a.crash()

    monkeypatch.setattr("otel_eval.decode.otlp.MAX_TIME_NS", 5)  # a stricter decoder
    b = Node(tmp_path)
    assert b.replayed == (1, 0, 0)
    assert b.sample("otel_eval_spool_spans_rejected_total", reason="invalid_timestamp") == 2
    assert b.spool.held() == (0, 0)
    b.crash()
    c = Node(tmp_path)
    assert c.replayed == (0, 0, 0)  # not replayed, nor counted, again


def test_spans_assembly_refuses_at_replay_are_counted_and_logged(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A span acknowledged before assembly.max_spans_per_trace was lowered is refused by
    assembly at replay (trace_too_large): it was dropped uncounted, while the decoder's
    refusals are counted. Now it is counted (spool_spans_rejected_total{reason}) and
    logged, the spans kept evaluated."""
    a = Node(tmp_path)
    assert a.send([span(T1, 1, None), span(T1, 2), span(T1, 3)]) is None
    a.crash()

    with caplog.at_level(logging.WARNING, logger="otel_eval.assemble.spool"):
        b = Node(tmp_path, max_spans_per_trace=2)
    assert b.replayed == (1, 2, 0)
    assert b.sample("otel_eval_spool_spans_rejected_total", reason="trace_too_large") == 1
    assert "1 span(s)" in caplog.text and "by assembly" in caplog.text
    b.release()
    assert b.stored_spans() == {T1: 2}


class _FullDisk:
    """The spool's connection while its disk is full: every DELETE fails as SQLite's does
    (the WAL cannot grow); everything else goes through. ``full = False``: space is back."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db, self.full = db, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)

    def cursor(self) -> Any:
        cur, disk = self.db.cursor(), self

        class Cursor:
            def __getattr__(self, name: str) -> Any:
                return getattr(cur, name)

            def execute(self, sql: str, *args: Any) -> Any:
                self._check(sql)
                return cur.execute(sql, *args)

            def executemany(self, sql: str, *args: Any) -> Any:
                self._check(sql)
                return cur.executemany(sql, *args)

            @staticmethod
            def _check(sql: str) -> None:
                if disk.full and sql.startswith("DELETE"):
                    raise sqlite3.OperationalError("database or disk is full")
        return Cursor()


@pytest.mark.parametrize("room", [10, 1 << 20])  # full with them, or room left
def test_rows_a_failed_delete_left_go_once_space_returns(tmp_path: Path, room: int) -> None:
    """A delete that failed (a full disk) left its request on disk and counted in the
    spool's bytes for the life of the process: nothing tried it again, so every full-disk
    episode (a PostgreSQL store keeps committing while the spool's disk is full) added to
    the bytes held until the receivers throttled ``spool_full`` for good. Now the next
    delete takes the rows left with its own."""
    first = [span(T1, 1, None), span(T1, 2)]
    a = Node(tmp_path, max_bytes=len(body(first)) + room)
    assert a.send(first) is None
    disk = _FullDisk(a.spool._db)
    a.spool._db = disk  # type: ignore[assignment]
    assert a.release() == 1  # stored; its spool rows cannot be deleted now: counted
    assert a.sample("otel_eval_spool_failures_total", operation="delete") == 1
    disk.full = False  # space is back
    assert a.send([span(T2, 1, None)]) is None
    assert a.release() == 1
    assert a.spool.held() == (0, 0)  # T1's rows went (refused for them, or with T2's)
    assert a.send([span(T3, 1, None), span(T3, 2)]) is None  # not spool_full
    rows = a.spool._db.execute("SELECT COUNT(*) FROM spool_requests").fetchone()[0]
    assert rows == 1  # T3's alone


def test_a_rows_bytes_are_its_services_whose_traces_still_hold_it(tmp_path: Path) -> None:
    """A row stays until its last trace is done: a gateway's batch kept by one service's
    long run is that service's in the spool's share (``max_service_share``), not the
    others', whose runs in it are done."""
    metrics = Metrics(CollectorRegistry())
    spool = Spool(str(tmp_path / "s.db-spool"), 1 << 20, metrics.spool).open()
    quiet = [Span("a" * 32, "1" * 16, None, "r", 1, 2, resource={"service.name": "quiet"},
                  nbytes=300)]
    long = [Span("b" * 32, "1" * 16, None, "r", 1, 0, resource={"service.name": "long"},
                 nbytes=100)]
    raw = body(quiet + long)
    rid = spool.append(raw, ["a" * 32, "b" * 32], items=quiet + long)
    spool.settle(rid, ["a" * 32, "b" * 32], {"a" * 32: 0, "b" * 32: 0}, {})
    assert spool.held_by("quiet") + spool.held_by("long") == len(raw)
    assert spool.held_by("quiet") > spool.held_by("long")
    spool.evaluated([("a" * 32, 0)])  # the quiet run is done; the long one holds the row
    assert spool.held_by("quiet") == 0
    assert spool.held_by("long") == len(raw)
    spool.evaluated([("b" * 32, 0)])
    assert spool.held() == (0, 0) and spool.held_by("long") == 0
    spool.close()


def _of(service: str, spans: list[Span]) -> list[Span]:
    for s in spans:
        s.resource = {"service.name": service}
    return spans


def test_a_run_cut_for_a_share_is_still_cut_after_a_crash(tmp_path: Path) -> None:
    """A gateway's batch held a called service's span of run T3 while that service was
    past its share: rejected for good, and the run its root opened later misses it. That
    mark was kept in memory only: a crash before the run's release replayed it unmarked,
    judged ``complete`` as if whole. It is kept with the run's rows, so the replay releases
    it ``truncated`` (reason ``service_share``) as the live process would have."""
    share = {"max_open_traces": 10, "max_service_share": 0.5}
    a = Node(tmp_path, **share)
    noisy = [f"{i + 1:032x}" for i in range(5)]
    assert a.send(_of("noisy", [span(t, 1, None) for t in noisy])) is None
    batch = _of("noisy", [span(T3, 9)]) + _of("quiet", [span(T2, 1, None)])
    adm = a.engine.submit(batch, request=body(batch))
    assert adm.rejected["service_share"] == 1  # T3's callee span, for good
    assert a.send(_of("quiet", [span(T3, 1, None)])) is None  # T3's root opens the run
    a.crash()

    b = Node(tmp_path, **share)
    assert b.release() == 7
    stored = {e["trace_id"]: e for e in b.store.latest(1000)}
    assert stored[T3]["status"] == "truncated"
    assert stored[T2]["status"] == "complete"
    assert b.sample("otel_eval_assembly_traces_released_total", status="truncated",
                    reason="service_share") == 1
    b.crash()


def test_a_version_4_spool_is_migrated_its_pairs_not_known_to_be_cut(tmp_path: Path) -> None:
    """An upgrade keeps the spool: pairs written before the ``cut`` column replay as they
    did (a whole run's), and the spool is at the new version."""
    a = Node(tmp_path)
    assert a.send([span(T1, 1, None), span(T1, 2)]) is None
    a.crash()
    with sqlite3.connect(tmp_path / "store.db-spool") as db:  # as version 4 left it
        db.execute("ALTER TABLE spool_traces DROP COLUMN cut")
        db.execute("PRAGMA user_version = 4")
    db.close()

    b = Node(tmp_path)
    assert b.replayed == (1, 2, 0)
    assert b.spool._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert b.release() == 1
    assert [e["status"] for e in b.store.latest(10)] == ["complete"]
    b.crash()


def test_rows_a_previous_process_left_count_in_their_services_share(tmp_path: Path) -> None:
    """The spool's share (``max_service_share`` of ``max_bytes``) is charged per row to its
    services (``RowLoad``), but rows replayed at start were charged to none: after a
    restart a service whose open runs held its whole share of the spool opened new runs
    again, until it and the others were refused ``spool_full``. A replayed row is charged
    as a live one is."""
    share = {"max_service_share": 0.5}

    def big(trace: str) -> list[Span]:
        return _of("noisy", [Span(trace, f"{1:016x}", None, "invoke_agent", 1, 0,
                                  attributes={"p": "x" * 20_000})])  # a run still going

    a = Node(tmp_path, max_bytes=200_000, **share)
    for i in range(5):
        assert a.send(big(f"{i + 1:032x}")) is None
    assert a.send(big(f"{9:032x}")) == "service_share"
    held = a.spool.held_by("noisy")
    a.crash()

    b = Node(tmp_path, max_bytes=200_000, **share)
    assert b.replayed[:2] == (5, 5)
    assert b.spool.held_by("noisy") == held > 0
    assert b.send(big(f"{9:032x}")) == "service_share"  # as before the restart
    assert b.send(_of("quiet", [span(T1, 1, None)])) is None
    b.crash()


def test_a_run_cut_before_it_opened_is_still_cut_after_a_crash(tmp_path: Path) -> None:
    """A called service's span of run T3 is refused for its share before the run's root
    came: nothing of T3 is in the spool to carry the mark. A crash before the root arrives
    must not let the next process open T3 unmarked and judge it complete as if whole."""
    share = {"max_open_traces": 10, "max_service_share": 0.5}
    a = Node(tmp_path, **share)
    noisy = [f"{i + 1:032x}" for i in range(5)]
    assert a.send(_of("noisy", [span(t, 1, None) for t in noisy])) is None
    batch = _of("noisy", [span(T3, 9)]) + _of("quiet", [span(T2, 1, None)])
    adm = a.engine.submit(batch, request=body(batch))
    assert adm.rejected["service_share"] == 1  # T3's callee span, for good
    a.crash()  # before T3's root came

    b = Node(tmp_path, **share)
    assert b.send(_of("quiet", [span(T3, 1, None)])) is None  # T3's root opens the run
    assert b.release() == 7
    stored = {e["trace_id"]: e for e in b.store.latest(1000)}
    assert stored[T3]["status"] == "truncated"
    assert stored[T2]["status"] == "complete"
    b.crash()


class _FailingMarks:
    """A connection whose UPDATEs of pair marks fail (a full disk), all else passed on."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def cursor(self) -> Any:
        return _FailingCursor(self._db.cursor())


class _FailingCursor:
    def __init__(self, cur: sqlite3.Cursor) -> None:
        self._cur = cur

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)

    def executemany(self, sql: str, rows: Any) -> Any:
        if sql.startswith("UPDATE"):
            raise sqlite3.OperationalError("database or disk is full")
        return self._cur.executemany(sql, rows)

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.startswith("UPDATE"):
            raise sqlite3.OperationalError("database or disk is full")
        return self._cur.execute(sql, *args)


def test_an_acknowledged_request_of_a_cut_run_is_never_without_its_mark(
        tmp_path: Path) -> None:
    """The cut mark was written after the request's row was committed: a failed write (a
    full disk) was counted and logged, and the request acknowledged without it, so a crash
    replayed the run unmarked and judged it complete. Acknowledged means durable: the mark
    is written with the request (or the request is refused)."""
    share = {"max_open_traces": 10, "max_service_share": 0.5}
    a = Node(tmp_path, **share)
    noisy = [f"{i + 1:032x}" for i in range(5)]
    assert a.send(_of("noisy", [span(t, 1, None) for t in noisy])) is None
    batch = _of("noisy", [span(T3, 9)]) + _of("quiet", [span(T2, 1, None)])
    assert a.engine.submit(batch, request=body(batch)).rejected["service_share"] == 1
    a.spool._db = _FailingMarks(a.spool._db)  # type: ignore[assignment]
    throttled = a.send(_of("quiet", [span(T3, 1, None)]))  # T3's root opens the run, cut
    a.spool._db = a.spool._db._db  # type: ignore[attr-defined]
    a.crash()

    b = Node(tmp_path, **share)
    if throttled is None:  # acknowledged: replayed as it was, cut
        assert b.release() == 7
        stored = {e["trace_id"]: e for e in b.store.latest(1000)}
        assert stored[T3]["status"] == "truncated"
    else:
        assert throttled == "spool_error"
    b.crash()


def test_the_traces_refused_before_their_runs_opened_are_kept_bounded(tmp_path: Path) -> None:
    """The spool keeps the newest ``max_refused`` of them (assembly's ``max_tombstones``),
    as assembly remembers them, not every trace id ever refused."""
    metrics = Metrics(CollectorRegistry())
    spool = Spool(str(tmp_path / "s.db-spool"), 1 << 20, metrics.spool, max_refused=2).open()
    for i in range(1, 4):
        spans = [span(f"{i:032x}", 1, None)]
        spool.append(body(spans), [f"{i:032x}"], items=spans, refused=[f"{i + 10:032x}"])
    spool.close()
    again = Spool(str(tmp_path / "s.db-spool"), 1 << 20, metrics.spool, max_refused=2).open()
    assert again.cut == {f"{12:032x}", f"{13:032x}"}
    again.close()


def _short_run(trace: str, n: int) -> list[Span]:
    spans = [span(trace, 1, None)] + [span(trace, i) for i in range(2, n + 2)]
    for s in spans:
        s.attributes["gen_ai.output.messages"] = "x" * 2000
    return spans


def test_a_long_run_does_not_pin_the_other_runs_of_its_requests(tmp_path: Path) -> None:
    """A long run with a span in every batch kept every such request on disk whole, its
    other runs' evaluated spans with it, until the long run ended (up to
    max_trace_duration_s): the spool filled and every sender was throttled spool_full. A
    row whose other runs are done keeps only what its pending runs hold, still replayed
    after a crash, in the order received."""
    long_run = "d" * 32
    first = _short_run("e" * 32, 20)
    size = len(body([*first, span(long_run, 100, parent=9)]))
    a = Node(tmp_path, max_bytes=4 * size)
    for k in range(12):
        batch = [*_short_run(f"{k + 1:032x}", 20), span(long_run, 100 + k, parent=9)]
        assert a.send(batch) is None, k
        assert a.release() == 1  # the short run; the long one stays open
    assert a.spool.held()[1] < size
    a.crash()

    b = Node(tmp_path)
    assert b.replayed[1] == 12  # the long run's spans, each kept
    b.now += 10_000
    b.engine.tick()
    b.engine.process()
    assert b.stored_spans()[long_run] == 12
    b.crash()


def test_a_request_is_not_refused_while_thinning_would_make_room(tmp_path: Path) -> None:
    """Rows were thinned only after an evaluation was stored, and only down to a quarter of
    max_bytes: a row whose other runs were done, left whole below that, stayed whole while
    new runs filled the spool, and a request thinning would have made room for was refused
    spool_full. The refusal thins such rows first (as many as make room, no more)."""
    long_run = "d" * 32
    first = [*_short_run("e" * 32, 20), span(long_run, 100, parent=9)]
    size = len(body(first))
    a = Node(tmp_path, max_bytes=5 * size)
    assert a.send(first) is None
    assert a.release() == 1  # the short run; its row is kept by the long run alone
    assert a.spool.held()[1] == size  # below a quarter of max_bytes: not thinned yet
    for k in range(4):  # other runs, none of them done yet
        assert a.send(_short_run(f"{k + 1:032x}", 20)[1:]) is None, k
    assert a.spool.held()[1] > 4 * size
    assert a.send(_short_run("f" * 32, 20)[1:]) is None  # thinning the first row made room
    assert a.spool.held()[1] <= 5 * size
    a.crash()


def test_rows_a_previous_process_left_whole_are_thinned_after_the_restart(
        tmp_path: Path) -> None:
    """Rows an earlier release left (it never thinned), or that a process left before it
    thinned them (under a quarter of its max_bytes, or a crash first), each held a long
    run's span and a short run evaluated since. Before, a replayed row counted as fed only
    by its pending traces, so it was thinned only once half of those were done: never, for
    the long run's, and the spool stayed as full as the upgrade found it, every sender
    throttled spool_full until the long run ended. A replayed row is thinned as a live one."""
    long_run = "d" * 32
    size = len(body([*_short_run("e" * 32, 20), span(long_run, 100, parent=9)]))
    a = Node(tmp_path)  # never past a quarter of its max_bytes: nothing thinned
    for k in range(12):
        batch = [*_short_run(f"{k + 1:032x}", 20), span(long_run, 100 + k, parent=9)]
        assert a.send(batch) is None, k
        assert a.release() == 1  # the short run; the long one stays open
    assert a.spool.held()[1] > 11 * size
    a.crash()

    b = Node(tmp_path, max_bytes=12 * size)
    assert b.replayed[1] == 12  # the long run's spans, each kept
    assert b.spool.held()[1] * 4 <= 12 * size  # thinned down to a quarter of max_bytes
    assert b.send(_short_run("f" * 32, 20)) is None  # not spool_full
    b.now += 10_000
    b.engine.tick()
    b.engine.process()
    assert b.stored_spans()[long_run] == 12
    b.crash()


def _with_invalid_utf8(spans: list[Span], bad: Span) -> bytes:
    """The request of ``spans`` and ``bad``, whose attribute holds invalid UTF-8 (a buggy
    SDK cutting a string mid-character): the receivers drop ``bad`` alone (``invalid_utf8``)
    and spool the request as received."""
    bad.attributes["note"] = "MARK" * 4
    raw = body([*spans, bad])
    assert raw.count(b"MARK" * 4) == 1
    return raw.replace(b"MARK" * 4, b"\xff\xfe" * 8)


def test_a_request_with_invalid_utf8_is_thinned_as_any_other(tmp_path: Path) -> None:
    """A row whose body held invalid UTF-8 anywhere (a span the receivers dropped,
    another service's in a gateway's batch) was never thinned: protobuf refused the whole
    body, so a long run with a span in every such batch kept every one whole until it
    ended, and the spool filled (everyone throttled spool_full) as if there were no
    thinning. Such a row is thinned as any other, the spans it keeps as received."""
    long_run = "d" * 32
    size = len(body([*_short_run("e" * 32, 20), span(long_run, 100, parent=9)]))
    a = Node(tmp_path, max_bytes=4 * size)
    for k in range(12):
        batch = [*_short_run(f"{k + 1:032x}", 20), span(long_run, 100 + k, parent=9)]
        raw = _with_invalid_utf8(batch, span(f"{k + 100:032x}", 1, None))
        assert a.engine.submit(batch, request=raw).throttled is None, k
        assert a.release() == 1  # the short run; the long one stays open
    assert a.spool.held()[1] < size
    a.crash()

    b = Node(tmp_path)
    assert b.replayed[1] == 12  # the long run's spans, each kept
    b.now += 10_000
    b.engine.tick()
    b.engine.process()
    assert b.stored_spans()[long_run] == 12
    b.crash()


def test_a_refusal_thins_rows_in_proportion_to_the_request(tmp_path: Path) -> None:
    """Before a request is refused spool_full, rows waiting to be thinned are thinned on
    the receiver's thread, under the engine lock (every receiver and the engine wait). It
    thinned every such row until room was made: a quarter of max_bytes (128 MiB at the
    defaults, seconds of work) read, parsed and written again for a small request, when
    the traces done in those rows held little (then refused all the same). A refusal reads
    about twice the request's bytes of them (at least one row); the next stored evaluation
    thins the rest, off the lock."""
    metrics = Metrics(CollectorRegistry())
    max_bytes = 1 << 20
    spool = Spool(str(tmp_path / "s.db-spool"), max_bytes, metrics.spool).open()

    def row(spans: list[Span]) -> int:
        rid = spool.append(body(spans), list(dict.fromkeys(s.trace_id for s in spans)),
                           items=spans)
        spool.settle(rid, [s.trace_id for s in spans], {s.trace_id: 0 for s in spans}, {})
        return len(body(spans))

    largest = 0
    for i in range(50):  # a long run's big span, a short run's small one: done, little to thin
        big = span(f"{i + 1:032x}", 1, None)
        big.attributes["gen_ai.output.messages"] = "x" * 4000
        largest = max(largest, row([big, span(f"{i + 1000:032x}", 2, None)]))
        spool.evaluated([(f"{i + 1000:032x}", 0)])
    assert spool.held()[1] < max_bytes // 4  # not thinned yet
    k = 0
    while spool.held()[1] + 20_000 < max_bytes:  # runs still open fill the spool
        k += 1
        row(_short_run(f"{k + 5000:032x}", 8))
    read = 0
    bodies = spool.body

    def counted(rid: int) -> bytes | None:
        nonlocal read
        raw = bodies(rid)
        read += len(raw or b"")
        return raw

    spool.body = counted  # type: ignore[method-assign]
    nbytes = 25_000
    assert spool.refusal(nbytes) == "spool_full"
    assert read <= 2 * nbytes + largest
    spool.evaluated([(f"{k + 5000:032x}", 0)])  # the engine worker, off the engine lock
    assert read >= 50 * (largest - 200)  # every such row thinned now
    spool.close()


def test_thinning_never_writes_over_a_request_that_took_the_rows_id(tmp_path: Path) -> None:
    """A row is thinned off the spool's lock (its body read, then parsed) on the thread
    that stores an evaluation, while other threads delete rows and receivers append them.
    SQLite gives a new row the id of the newest row when that was deleted: a row deleted
    while it was being thinned and a request spooled meanwhile under its id had the new
    request's body written over with the old row's, thinned. Acknowledged, the request's
    spans were gone after a crash. Thinning writes only over the row it read."""
    metrics = Metrics(CollectorRegistry())
    path = str(tmp_path / "s.db-spool")
    first = [*_short_run(T1, 4), *_short_run(T2, 4)]
    spool = Spool(path, 2 * len(body(first)), metrics.spool).open()  # past a quarter: thinned

    def row(spans: list[Span]) -> int:
        tids = list(dict.fromkeys(s.trace_id for s in spans))
        rid = spool.append(body(spans), tids, items=spans)
        spool.settle(rid, tids, dict.fromkeys(tids, 0), {})
        return rid

    old = row(first)
    bodies, new, taken = spool.body, [span(T3, 1, None)], []

    def meanwhile(rid: int) -> bytes | None:  # other threads, while the row is read
        raw = bodies(rid)
        if not taken:
            spool.evaluated([(T2, 0)])  # its last trace stored: the row goes
            taken.append(row(new))  # a request takes its id
        return raw

    spool.body = meanwhile  # type: ignore[method-assign]
    spool.evaluated([(T1, 0)])  # half its traces done: thinned, on this thread
    assert taken == [old]
    spool.close()

    again = Spool(path, 1 << 30, metrics.spool).open()
    assert again.body(old) == body(new)
    again.close()


def test_a_replay_counts_refused_spans_in_work_linear_in_the_request(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replayed request holding a span of a pending run that the decoder refuses (a
    zero span id: refused when received, spooled with the request as received) had each of
    the run's spans decoded again alone, with a copy of its resource: a sender's request
    of n spans under a resource of r bytes cost n * r at the next start (a 1 MB resource and
    10,000 spans: 10 GB of copying before the receivers open). The refused spans are counted
    from one decode of the spans alone."""
    resource = {"service.name": "svc", **{f"k{i}": "v" * 100 for i in range(1000)}}
    spans = [span(T1, 1, None), *(span(T1, i) for i in range(2, 300))]
    bad = span(T1, 0)  # a zero span id: invalid_span_id
    for s in [*spans, bad]:
        s.resource = resource
    raw = body([*spans, bad])
    a = Node(tmp_path)
    assert a.engine.submit(spans, request=raw).throttled is None
    a.crash()

    decoded = 0
    decode = otlp.decode_request

    def counted(req: Any) -> Any:
        nonlocal decoded
        decoded += req.ByteSize()
        return decode(req)

    monkeypatch.setattr(otlp, "decode_request", counted)
    b = Node(tmp_path)
    assert b.replayed[1] == len(spans)
    assert b.sample("otel_eval_spool_spans_rejected_total", reason="invalid_span_id") == 1
    assert decoded <= 3 * len(raw)
    b.crash()


def _decoded(spans: list[Span]) -> list[Span]:
    """``spans`` as the receivers hand them on: decoded from their request (sizes known)."""
    return otlp.decode_request(otlp.parse_request(body(spans))[0]).spans


def test_a_request_reopening_runs_is_refused_past_max_bytes(tmp_path: Path) -> None:
    """A late span re-opens a stored run, whose spans are spooled again with the request.
    The spool's bound counted the request's bytes only: a request of a few late spans
    (one per run a sender had stored within reopen_window_s, up to max_released_traces)
    wrote all those runs to the spool past spool_max_bytes, in one transaction. What a
    request re-opens counts against the bound: past it, the request is refused spool_full
    (the exporter retries) and nothing is taken."""
    run = [span(T1, 1, None), span(T1, 2), span(T1, 3)]
    for s in run:
        s.attributes["payload"] = "x" * 100_000
    size = len(body(run))
    a = Node(tmp_path, max_bytes=2 * size)
    assert a.engine.submit(_decoded(run), request=body(run)).throttled is None
    assert a.release() == 1
    assert a.spool.held() == (0, 0)
    other = [span(T2, i) for i in range(2, 5)]  # a run still open, its root to come
    for s in other:
        s.attributes["payload"] = "y" * 100_000
    assert a.send(other) is None
    late = _decoded([span(T1, 4)])
    assert a.engine.submit(late, request=body(late)).throttled == "spool_full"
    assert a.spool.held()[1] <= 2 * size
    assert a.engine.open_traces() == 1  # T1 not re-opened
    a.crash()


def test_runs_a_request_reopens_count_in_its_services_share(tmp_path: Path) -> None:
    """A late span re-opens a stored run, whose spans are spooled again with the request
    and charged to its service (``RowLoad``). The share check (``max_service_share`` of
    ``max_bytes``) counted the request's own bytes only: a few late spans of one service
    re-opened its stored runs past its share at once, and the other services' exports
    were then refused ``spool_full``. What a request re-opens counts in its share: the
    request is refused ``service_share`` (the exporter retries), nothing taken."""
    share = {"max_service_share": 0.5}
    runs = [f"{i + 1:032x}" for i in range(6)]

    def run(trace: str) -> list[Span]:
        spans = _of("noisy", [span(trace, 1, None), span(trace, 2)])
        for s in spans:
            s.attributes["payload"] = "x" * 10_000
        return _decoded(spans)

    size = len(body(run(runs[0])))
    a = Node(tmp_path, max_bytes=10 * size, **share)
    for t in runs:  # stored one by one: the spool holds none of them
        assert a.engine.submit(run(t), request=body(run(t))).throttled is None
        assert a.release() == 1
    assert a.spool.held() == (0, 0)
    opening = _decoded(_of("noisy", [span(T1, 1, None)]))  # a run of it still open
    assert a.engine.submit(opening, request=body(opening)).throttled is None
    late = _decoded(_of("noisy", [span(t, 3) for t in runs]))  # re-opens the 6 runs
    assert a.engine.submit(late, request=body(late)).throttled == "service_share"
    assert a.spool.held_by("noisy") <= 0.5 * 10 * size
    assert a.engine.open_traces() == 1  # nothing re-opened
    a.crash()


class _Holding:
    """A delivering sink (pass-through, the evaluation events) whose sender has not
    delivered yet: it holds each trace's ``Held`` until the test settles it."""

    delivers = True
    name = "events"

    def __init__(self) -> None:
        self.held: list[Held] = []

    def items(self, trace: Any, evaluation: Any) -> int:
        return len(trace.spans)

    def export(self, trace: Any, evaluation: Any, held: Held | None = None) -> None:
        self.pass_on(trace, held)

    def pass_on(self, trace: Any, held: Held | None = None) -> None:
        if held is not None:
            held.take()
            self.held.append(held)


def test_rows_are_thinned_on_the_engine_worker_not_a_senders_thread(tmp_path: Path) -> None:
    """With a delivering sink, a trace's spool rows leave when its sender has delivered it,
    on that sender's thread. The thinning that followed (every row waiting to be thinned,
    down to a quarter of max_bytes: up to 128 MiB read, parsed and written again at the
    defaults, seconds) ran there too, and pass-through's or the events' sending waited for
    it while their queues filled. The sender's thread deletes only; the engine's worker
    thins, at its next pass."""
    long_run = "d" * 32
    size = len(body([*_short_run(f"{1:032x}", 20), span(long_run, 100, parent=9)]))
    sink = _Holding()
    a = Node(tmp_path, max_bytes=4 * size, sinks=[sink])
    for k in range(2):  # each batch: a short run and a span of a long run still going
        assert a.send([*_short_run(f"{k + 1:032x}", 20), span(long_run, 100 + k, parent=9)]
                      ) is None
        assert a.release() == 1
    assert len(sink.held) == 2 and a.spool.held() == (2, 2 * size)  # past a quarter
    bodies, readers = a.spool.body, []

    def read(rid: int) -> bytes | None:
        readers.append(threading.current_thread().name)
        return bodies(rid)

    a.spool.body = read  # type: ignore[method-assign]
    sender = threading.Thread(target=settle, args=(sink.held,), name="otel-eval-events")
    sender.start()
    sender.join()
    assert readers == []  # delivered: the short runs' pairs left, no row thinned here
    assert a.spool.held()[0] == 2
    a.engine.process()  # the engine worker's next pass
    assert readers and "otel-eval-events" not in readers
    assert a.spool.held()[1] <= size
    a.crash()


def test_the_refused_ids_are_handed_to_assembly_not_kept_twice(tmp_path: Path) -> None:
    """The ids a previous process refused for a share (up to ``max_tombstones``: ~180 bytes
    each) go to assembly at replay, which remembers them; the spool keeps no second copy for
    the life of the process (a million of them held twice was ~130 MB more)."""
    metrics = Metrics(CollectorRegistry())
    spool = Spool(str(tmp_path / "store.db-spool"), 1 << 20, metrics.spool).open()
    spans = [span(T1, 1, None)]
    spool.append(body(spans), [T1], items=spans, refused=[T3])
    spool.close()

    b = Node(tmp_path)
    assert b.spool.cut == set() and b.spool.carried == set()
    assert b.send([span(T3, 1, None)]) is None  # the run opened for it misses spans: cut
    assert b.release() == 2
    stored = {e["trace_id"]: e for e in b.store.latest(1000)}
    assert stored[T3]["status"] == "truncated" and stored[T1]["status"] == "complete"
    b.crash()
