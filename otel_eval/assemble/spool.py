"""Stage: spool. Acknowledged means durable: OTLP requests stay on disk until evaluated.

    Ingest -> Engine.submit (traces or logs) -> Durability -> Spool.append (request bytes, its
        signal, the trace ids it feeds) -> answer
    Engine: Store.put_many commits evaluations -> Spool.evaluated(trace ids, revisions)
    start: Spool.replay -> parse + decode (traces or logs) -> Engine.submit

Promises:
- a request is acknowledged only after its row is committed: one SQLite transaction per
  request, not per span, in WAL mode. By default nothing is fsynced (``synchronous=OFF``): a
  committed row is in the kernel's page cache, which survives a crash of the process (kill -9,
  an OOM kill), and neither the receivers nor the engine ever wait for a disk flush (with
  the store's ``NORMAL``, checkpoint fsyncs made the spool cost ~35 %, bench/README.md). ``fsync``
  (``synchronous=FULL``) also survives power loss. A spool file found unreadable at start
  (power loss without ``fsync``: not a database, a corrupt page) is moved aside, logged and
  counted, and a new one begun (the newest ``CORRUPT_KEPT`` set aside are kept, older ones
  deleted and logged); one that cannot be read at the moment (locked, a full disk)
  stops the start with its file kept, so the next start replays it;
- the request bytes are kept as received (never re-encoded), so a replay takes the normal
  decode path (a span or log record of a replayed trace that this version's decoder refuses,
  or its assembly does: past ``max_spans_per_trace`` or ``max_log_records_per_trace``
  lowered since, a duplicate, is counted, ``spool_spans_rejected_total{reason}`` or
  ``spool_log_records_rejected_total{reason}``, and logged; the pair of a trace the decoder
  keeps nothing of goes then, as nothing will release it); with them one (request, trace)
  pair per trace that took spans from it.
  OTLP log requests (GenAI events carrying the content of spans) are kept the same way, with
  one pair per trace that took records (``signal`` says which decode path replays a row);
  a log request that fed no trace (no GenAI event of a span) leaves no row. Replays follow
  the order rows were written in, traces and logs interleaved (assembly takes either first);
- a pair is deleted once that trace's evaluation (of the revision the request fed, or a later
  one) is committed, a request once no pair is left; a revision released with only spans
  to pass on (another sender's, for a released run: ``TraceAssembler``) holds nothing of
  the earlier ones, and lets only its own pairs go (``alone``). Deletion follows the
  store's commit, one transaction per engine batch: a crash between the two replays the
  trace, and finishing finds its evaluation in the store by content digest and does not
  evaluate it again
  (``already_evaluated``; a replay with late spans is evaluated and supersedes the row).
  Records of a trace no span ever joined are dropped by assembly (nothing to evaluate), and
  their pairs with them (``evaluated``, from the engine's tick). A deleted request's bytes are
  not overwritten on disk (``secure_delete=FAST``): its pages go to the file's freelist, where
  the next requests' bodies take them. A delete that failed (a full disk) is tried again
  with the next one, or before a request is refused ``spool_full``: its rows are not held
  until a restart;
- replays are whole traces: only pending pairs are replayed, so a stored trace never comes
  back as its tail. A trace re-opened by late spans lost its first requests with its first
  evaluation, so its spans (and the log records it holds) are spooled again (re-encoded, a
  row per signal) when it re-opens: in the transaction of the request that re-opens it, so
  a spool that cannot hold them refuses that request (acknowledged, its late spans alone
  would be replayed and refused ``late``); a re-open ``append`` could not foresee (the
  run's sender joining a passing trace) is spooled again after;
- bounded: ``refusal`` says ``spool_full`` while ``max_bytes`` (span and log requests alike)
  are held, so receivers throttle both (a request counts with the stored runs it re-opens,
  spooled again with it: ``Durability.spool_bytes``); a row half of whose traces are done
  is thinned to what the others hold (``_thin_rows``: their items as received, the same row) once a
  quarter of ``max_bytes`` is held (and before a request is refused, as many as make room
  for it, within about twice its bytes: the rest off the engine lock, after the next
  evaluation), so a long run with a span in every batch does not keep everyone's batches whole
  until it ends (a row a previous process left, whatever it was fed, after the replay);
  ``held_by``: the bytes per service.name
  (``service_load.RowLoad``: a row is charged to the services of the traces it still
  feeds; a row a previous process left, when its replay decodes it), for admission's
  ``max_service_share`` of ``max_bytes``;
- versioned: ``PRAGMA user_version`` is the schema's version; an older spool is migrated in
  place at open, one from a newer version refused with a clear error (``spool_file``);
- a restart resumes what was left as it was: its timers, its stragglers, what was passed on,
  what was cut, or refused for a share before its run opened (``spool_backlog``).

Kafka ingest is not spooled: the topic is the log, and offsets are committed only once the
traces are stored (``kafka/offsets.py``), the same idea one level up.

Parts: the file (schema and migrations, pragmas, an unreadable one set aside, the statements
over its tables) is ``spool_file``; a row's body read back for a replay, written for a
re-opened trace, or thinned, is ``spool_rows``; what a previous process left, read at open
and replayed at start, is ``spool_backlog``; what leaves it (pairs of stored evaluations
deleted, rows thinned) is ``spool_leaving``; this module holds what the file holds and the
rows' life.

Threads: ``append`` and ``settle`` run on receiver threads under the engine lock (so a trace
cannot be evaluated before its pair exists), ``evaluated`` on the engine worker, ``replay``
before the receivers start. One connection, guarded by the spool's own lock (taken after
the engine lock, never before it).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path

from otel_eval.assemble import spool_backlog, spool_file
from otel_eval.assemble.service_load import RowLoad
from otel_eval.assemble.spool_backlog import Backlog
from otel_eval.assemble.spool_file import (
    CORRUPT_KEPT,
    SCHEMA_VERSION,
    SIGNALS,
    SpoolVersionError,
    damaged,
    transaction,
)
from otel_eval.assemble.spool_leaving import Leaving, Request
from otel_eval.assemble.spool_rows import Held, Replay, encoded, items_of
from otel_eval.base.configcheck import StartupError
from otel_eval.base.model import Span
from otel_eval.decode.otlp_logs import HeldRecord
from otel_eval.telemetry.spool import SpoolMetrics

# The spool's public names, wherever defined (``spool_file``, ``spool_rows``): imported from here.
__all__ = ["CORRUPT_KEPT", "SCHEMA_VERSION", "SIGNALS", "Held", "Replay", "Spool",
           "SpoolVersionError"]

log = logging.getLogger(__name__)


class Spool(Leaving):
    """The constructor only constructs: ``open()`` opens the file and reads its backlog."""

    _db: sqlite3.Connection  # from open()
    _backlog: Backlog  # from open()

    def __init__(self, path: str, max_bytes: int, metrics: SpoolMetrics, *,
                 fsync: bool = False, wall: Callable[[], float] = time.time,
                 max_refused: int = 1_000_000) -> None:
        self.path = path
        self._wall = wall  # the receive times kept: wall-clock seconds (a monotonic clock
        # starts again with the process)
        self.max_bytes = max_bytes
        # trace ids refused for a share before their runs opened, kept (``spool_refused``):
        # as many as assembly remembers (``assembly.max_tombstones``)
        self.max_refused = max_refused
        self.metrics = metrics
        self._fsync = fsync
        self._lock = threading.Lock()
        self._requests: dict[int, Request] = {}
        self._traces: dict[str, list[tuple[int, int]]] = {}  # trace -> [(request, revision)]
        # the traces left to replay with a stored revision's content, and those cut
        # (``Backlog.carried``, ``Backlog.cut``), taken by ``Durability`` after the replay
        self.carried: set[str] = set()
        self.cut: set[str] = set()
        # (request, trace) pairs whose delete failed (a full disk): deleted with the next ones
        self._undeleted: list[tuple[int, str]] = []
        # runs written with a request (``append``'s ``runs``), until its ``settle``: request
        # -> trace -> (their rows, span ids, log records)
        self._runs: dict[int, dict[str, tuple[list[int], frozenset[str], int]]] = {}
        # the marks ``append`` wrote with a request, until its ``settle``: request -> (cut,
        # foreign) trace ids
        self._marked: dict[int, tuple[Collection[str], Collection[str]]] = {}
        # rows half of whose traces are done since their bodies were written, oldest first:
        # thinned to what the others hold once the spool holds a quarter of ``max_bytes``
        self._thin: dict[int, None] = {}
        self.bytes = 0
        self.load = RowLoad()  # the bytes per service (its share: ``max_service_share``)
        self._opened = False

    def open(self) -> Spool:
        """Open the file and read what it holds (a damaged file is set aside for an empty
        one; one a newer release wrote is a ``SpoolVersionError``; one that cannot be read
        now, locked or on a full disk, a ``StartupError``, the file left as it is);
        idempotent."""
        if self._opened:
            return self
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = self._open()
            self._backlog = self._load()
        except sqlite3.DatabaseError as e:
            if not damaged(e):  # locked, a full disk, an I/O error: kept for the next start
                with contextlib.suppress(AttributeError, sqlite3.Error):
                    self._db.close()
                raise StartupError(f"spool {self.path}: {e} (not damaged: what it holds is "
                                   "kept, and replayed by the next start)") from None
            self._set_aside()
            self._db = self._open()
            self._backlog = self._load()
        self._opened = True
        self.metrics.bound(self.max_bytes)
        return self

    def _open(self) -> sqlite3.Connection:
        db = spool_file.connect(self.path, self._fsync)
        self._db = db
        spool_file.migrate(db)
        return db

    def _set_aside(self) -> None:
        """An unreadable spool (power loss without fsync): keep it for a post-mortem, start
        a new one. What it held is lost, and said so."""
        with contextlib.suppress(AttributeError, sqlite3.Error):
            self._db.close()
        spool_file.set_aside(self.path)
        self.metrics.failed("open")
        self._requests.clear()
        self._traces.clear()
        self.carried.clear()
        self.cut.clear()
        self.bytes = 0
        self.load.clear()

    # --- what a previous process left -------------------------------------------------------

    def _load(self) -> Backlog:
        """What a previous process left (``spool_backlog.read``), held from now on."""
        backlog = spool_backlog.read(self._db)
        self.carried, self.cut = backlog.carried, backlog.cut
        for rid, tids in backlog.pending.items():
            self._requests[rid] = Request(backlog.sizes[rid], set(tids),
                                           backlog.signals.get(rid, "traces"), len(tids))
            # what else it was fed is not known (an earlier release never thinned; a process
            # may stop before it thinned): thinned once, if it holds more (``_thin_rows``)
            self._thin[rid] = None
            self.bytes += backlog.sizes[rid]
            for tid in tids:
                self._traces.setdefault(tid, []).append((rid, 0))
        self._report()
        return backlog

    def replay(self, submit: Replay) -> tuple[int, int, int]:
        """Hand every pending trace's spans and log records to ``submit``, oldest request
        first (``Backlog.replay``). Returns (requests, spans, records) replayed."""
        backlog, self._backlog = self._backlog, Backlog()
        replayed = backlog.replay(self, submit, self._wall)
        self._thin_rows(self.max_bytes // 4)  # rows left whole, as the spool found them
        return replayed

    def body(self, rid: int) -> bytes | None:
        """Request ``rid``'s bytes; None when it is gone."""
        with self._lock:
            return spool_file.body(self._db, rid)

    def delete(self, pairs: list[tuple[int, str]]) -> None:
        """Delete (request, trace) pairs (``_delete``), for a replay."""
        self._delete(pairs)

    def charge(self, rid: int, items: Collection[Span | HeldRecord]) -> None:
        """A replayed row's bytes, charged to the services of what it holds of its pending
        traces, as ``append`` charges a live one (``RowLoad``): a service's share of the spool
        (``max_service_share``) holds across a restart."""
        with self._lock:
            if rid in self._requests:
                self.load.add(rid, self._requests[rid].nbytes, items)

    # --- ingest (receiver threads, under the engine lock) --------------------------------------

    def refusal(self, nbytes: int) -> str | None:
        """``spool_full`` when a request of ``nbytes`` would pass the bound (one request is
        always taken into an empty spool, however large). Rows a failed delete left are
        tried again first: with the spool full of them, no evaluation would come to; then
        rows waiting to be thinned (``_thin_rows``) are, as many as make room, reading
        about twice ``nbytes`` of them at most (this runs under the engine lock: the rest
        are thinned by the next stored evaluation, off it)."""
        if self._undeleted and self.bytes + nbytes > self.max_bytes:
            try:
                self._delete([])
            except (sqlite3.Error, OSError) as e:  # still failing: counted, refused below
                log.warning("spool: deleting rows of evaluated traces failed again: %s", e)
                self.metrics.failed("delete")
            self._report()
        if self._thin and self.bytes + nbytes > self.max_bytes:
            self._thin_rows(self.max_bytes - nbytes, budget=max(2 * nbytes, 1))
            self._report()
        return "spool_full" if self.bytes and self.bytes + nbytes > self.max_bytes else None

    def append(self, body: bytes, trace_ids: Collection[str], signal: str = "traces",
               carried: Collection[str] = (), runs: Held | None = None,
               runs_stored: Collection[str] = (),
               items: Collection[Span | HeldRecord] = (), cut: Collection[str] = (),
               foreign: Collection[str] = (), refused: Collection[str] = ()) -> int:
        """Write a request (``signal``: traces | logs) and the traces it feeds, in one
        transaction; returns its row id. ``carried``: the traces whose pairs hold what a
        stored revision of them held (a re-open's re-spooled spans). ``runs``: the released
        runs the request re-opens (``TraceAssembler.reopens``), what they hold written in the
        same transaction (a row per signal; ``carried`` for ``runs_stored``), so the request
        is never acknowledged without them (a crash would replay its spans alone, refused
        ``late``); ``settle`` keeps them for the traces that re-opened so. ``items``: what the
        request holds, its row charged to their services (``RowLoad``). ``cut`` and
        ``foreign``: its pairs marked so (``settle``), with the request, never after it;
        ``refused``: trace ids refused for a share whose runs are not open (nothing of them
        here to carry the mark), kept so a restart opens their runs cut. Raises
        ``sqlite3.Error`` / ``OSError`` when it could not be written (then none is)."""
        assert signal in SIGNALS, signal
        rows = [(body, list(trace_ids), signal, carried)]
        held = [items]
        if runs:
            rows += [(b, tids, sig, runs_stored) for sig, tids, b in encoded(runs, list(runs))]
            held += [items_of(runs, tids, sig) for _, tids, sig, _ in rows[1:]]
        written: list[int] = []
        with self._lock, transaction(self._db) as cur:
            for raw, tids, sig, marked in rows:
                written.append(spool_file.insert(self._db, cur, raw, tids, sig, marked,
                                                 self._wall()))
            spool_file.mark(cur, [(int(t in cut), int(t in foreign), written[0], t)
                                  for t in {*cut, *foreign}])
            if refused:
                spool_file.keep_refused(cur, refused, self.max_refused)
        with self._lock:
            self._marked[written[0]] = cut, foreign
            for rid, (raw, tids, sig, _), its in zip(written, rows, held, strict=True):
                self._requests[rid] = Request(len(raw), set(tids), sig, len(tids))
                self.bytes += len(raw)
                self.load.add(rid, len(raw), its)
            if runs:
                self._runs[written[0]] = {
                    tid: ([rid for rid, row in zip(written[1:], rows[1:], strict=True)
                           if tid in row[1]],
                          frozenset(sp.span_id for sp in spans), len(logs))
                    for tid, (spans, logs) in runs.items()}
        return written[0]

    def runs_written(self, rid: int) -> dict[str, tuple[frozenset[str], int]]:
        """The runs ``append`` wrote with request ``rid``: trace -> (span ids, records)."""
        with self._lock:
            return {tid: (ids, n) for tid, (_, ids, n) in self._runs.get(rid, {}).items()}

    def reopened(self, accepted: dict[str, int]) -> list[str]:
        """The traces of ``accepted`` (trace id -> revision) seen at a new revision: re-opened
        since their requests were spooled, so ``settle`` needs what they hold."""
        with self._lock:
            return [tid for tid, rev in accepted.items()
                    if rev > 0 and all(r != rev for _, r in self._traces.get(tid, ()))]

    def settle(self, rid: int, written: Collection[str], accepted: dict[str, int],
               held: Held, carried: Collection[str] = (),
               foreign: Collection[str] = (), runs_kept: Collection[str] = (),
               cut: Collection[str] = ()) -> None:
        """After assembly took the request: ``accepted`` maps each trace that took spans (or
        records) to its revision. Traces that took none (late, duplicates) lose their pair; a
        re-opened trace (``reopened``, asked under the same engine lock) has what it held
        before spooled again: ``held[trace]``, a copy taken by the caller, marked ``carried``
        for the traces of ``carried`` (what it held is a stored revision's, not a straggler's
        skipped as late). ``foreign``: the traces whose spans in the request were taken only
        to pass on (another sender's for a released run): their pairs are marked so, and a
        replay passes those spans on, never evaluating them into the run (a re-open by the
        run's own sender may have joined them since). ``runs_kept``: the traces re-opened
        with what ``append`` wrote of them (their rows join the new revision; the others'
        leave). ``cut``: the traces whose runs miss spans refused for a service's share
        (``TraceAssembler.cut``): their pairs are marked so, and a replay cuts them again.
        Both marks are written by ``append``, with the request, as foreseen
        (``TraceAssembler.marks``); one that came out otherwise is set here."""
        reopened = [tid for tid in accepted if tid in held]
        unused: list[tuple[int, str]] = []
        with self._lock:
            was_cut, was_foreign = self._marked.pop(rid, ((), ()))
            # marks ``append`` did not foresee as they came out: set now (a failure counted)
            marks = [(int(tid in cut), int(tid in foreign), rid, tid) for tid in accepted
                     if (tid in cut, tid in foreign) != (tid in was_cut, tid in was_foreign)]
            for tid, rev in accepted.items():
                self._traces.setdefault(tid, []).append((rid, rev))
            for tid, (rows, _, _) in self._runs.pop(rid, {}).items():
                if tid in runs_kept and tid in accepted:  # re-opened with what was written
                    self._traces[tid].extend((r, accepted[tid]) for r in rows)
                else:
                    unused += [(r, tid) for r in rows]
        dropped = [(rid, tid) for tid in written if tid not in accepted] + unused
        try:
            if dropped:
                self._delete(dropped)
            if marks:
                with self._lock, transaction(self._db) as cur:
                    spool_file.mark(cur, marks)
            if reopened:
                self._respool(reopened, accepted, held, carried)
        except (sqlite3.Error, OSError):  # the request itself is spooled; count and go on
            log.exception("spool: settling request %d failed", rid)
            self.metrics.failed("settle")
        self._report()

    def _respool(self, reopened: list[str], accepted: dict[str, int], held: Held,
                 carried: Collection[str]) -> None:
        """Re-opened traces: what they held, re-encoded, a row per signal."""
        for signal, tids, body in encoded(held, reopened):
            again = self.append(body, tids, signal, carried, items=items_of(held, tids, signal))
            with self._lock:
                for tid in tids:
                    self._traces[tid].append((again, accepted[tid]))

    # --- plumbing ----------------------------------------------------------------------------

    def held_by(self, service: str) -> int:
        """The bytes held for ``service`` (``RowLoad``)."""
        with self._lock:
            return self.load.bytes[service]

    def held(self) -> tuple[int, int]:
        """(requests, bytes) held."""
        with self._lock:
            return len(self._requests), self.bytes

    def close(self) -> None:
        with self._lock:
            if self._opened:
                self._db.close()

