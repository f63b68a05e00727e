"""The spool's rows leaving it: pairs deleted once their traces' evaluations are stored
(``evaluated``, ``_delete``), and rows half of whose traces are done thinned to what the
others hold (``_thin_rows``). Part of ``Spool`` (``spool.py`` says what it promises); its
state is set by ``Spool.__init__``, guarded by the spool's lock."""

from __future__ import annotations

import builtins
import logging
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from otel_eval.assemble import spool_file
from otel_eval.assemble.service_load import RowLoad
from otel_eval.assemble.spool_file import transaction
from otel_eval.assemble.spool_rows import thinned
from otel_eval.telemetry.spool import SpoolMetrics

log = logging.getLogger("otel_eval.assemble.spool")


@dataclass(slots=True)
class Request:
    nbytes: int
    traces: set[str]  # traces it fed whose evaluation is not stored yet
    signal: str = "traces"
    fed: int = 0  # of them when its body was written (``_thin``)


class Leaving:
    """What leaves the spool: ``Spool``'s deletes and thinning."""

    _lock: threading.Lock
    _db: sqlite3.Connection
    _requests: dict[int, Request]
    _traces: dict[str, list[tuple[int, int]]]  # trace -> [(request, revision)]
    _undeleted: list[tuple[int, str]]
    _thin: dict[int, None]
    bytes: int
    max_bytes: int
    load: RowLoad
    metrics: SpoolMetrics

    def body(self, rid: int) -> builtins.bytes | None:  # ``Spool.body``
        raise NotImplementedError

    # --- evaluated (engine worker, after the store's commit) --------------------------------

    def evaluated(self, traces: Iterable[tuple[str, int]],
                  alone: Iterable[tuple[str, int]] = (), thin: bool = True) -> None:
        """These (trace id, revision) evaluations are stored: their pairs, and the requests
        left without one, leave the spool in one transaction (those of earlier revisions
        too: a revision holds what they held). ``alone``: revisions that hold nothing of the
        earlier ones (only spans passed on): their own pairs only. ``thin``: then thin the
        rows waiting for it (``thin``); False on a delivering sink's sender thread, whose
        sending would wait for it (the engine's worker thins at its next pass)."""
        latest: dict[str, int] = {}
        for tid, rev in traces:
            latest[tid] = max(rev, latest.get(tid, rev))
        only = set(alone)
        with self._lock:  # a pair once (a revision alone released with a later one)
            pairs = list(dict.fromkeys([
                *((rid, tid) for tid, rev in latest.items()
                  for rid, r in self._traces.get(tid, ()) if r <= rev),
                *((rid, tid) for tid, rev in only
                  for rid, r in self._traces.get(tid, ()) if r == rev)]))
        if pairs:
            self._delete(pairs)
            if thin:
                self._thin_rows(self.max_bytes // 4)
            self._report()

    def thin(self) -> None:
        """Thin the rows waiting for it while more than a quarter of ``max_bytes`` is held
        (``_thin_rows``), off the engine lock: the engine's worker, after each pass."""
        if self._thin and self.bytes > self.max_bytes // 4:
            self._thin_rows(self.max_bytes // 4)
            self._report()

    def _thin_rows(self, target: int, budget: int | None = None) -> None:
        """Rows kept only by some of their traces (a long run's span in every batch keeps
        each batch until the run ends, up to ``max_trace_duration_s``) hold only what those
        traces hold, once the spool holds a quarter of ``max_bytes``: each row's body is
        written again in place (the same row: replayed in the order received), in its own
        transaction (the old body until it commits), its pairs and their marks unchanged.
        A row is thinned again only once half its traces are done since, so each byte is
        written again a bounded number of times. Rows are thinned while more than ``target``
        bytes are held (a quarter of ``max_bytes``; before a refusal, as many as make room).
        ``budget``: the bytes of rows read at most (the first row whatever its size): a
        refusal runs under the engine lock, so it thins in proportion to the request, and
        the next ``evaluated`` the rest."""
        while self._thin and self.bytes > target and (budget is None or budget > 0):
            with self._lock:
                if not self._thin:  # another thread took the last
                    return
                rid = next(iter(self._thin))
                del self._thin[rid]
                req = self._requests.get(rid)
            if req is not None:
                if budget is not None:
                    budget -= req.nbytes
                try:
                    self._thin_one(rid, req)
                except (sqlite3.Error, OSError) as e:  # the row stays whole: counted
                    log.warning("spool: thinning request %d failed: %s", rid, e)
                    self.metrics.failed("thin")
                    return

    def _thin_one(self, rid: int, req: Request) -> None:
        """Row ``rid``'s body written again with what its pending traces hold: only while
        it is still ``req`` (read and parsed off the lock, the row may go meanwhile, and
        SQLite give its id to the next request: that one's body is not written over)."""
        with self._lock:
            keep = set(req.traces)
        raw = self.body(rid) if keep else None
        body = None if raw is None else thinned(raw, req.signal, keep)
        if raw is not None and body is not None and len(body) < len(raw):
            with self._lock:
                if self._requests.get(rid) is not req:
                    return
                with transaction(self._db) as cur:
                    spool_file.rewrite(cur, rid, body)
        with self._lock:
            req.fed = len(keep)  # thinned again once half of these are done
            if body is not None and self._requests.get(rid) is req and len(body) < req.nbytes:
                self.bytes -= req.nbytes - len(body)
                req.nbytes = len(body)
                self.load.resize(rid, len(body))

    def _delete(self, pairs: list[tuple[int, str]]) -> None:
        """Delete pairs, and requests whose last pair goes; memory follows the commit. The
        pairs a failed delete left (a full disk) go with these: their rows, and the bytes
        they count against ``max_bytes``, were kept until the next start."""
        with self._lock:
            pairs = list(dict.fromkeys([*self._undeleted, *pairs]))
            by_row: dict[int, list[str]] = {}
            for rid, tid in pairs:
                by_row.setdefault(rid, []).append(tid)
            done = [rid for rid, tids in by_row.items()
                    if rid in self._requests and self._requests[rid].traces <= set(tids)]
            try:
                with transaction(self._db) as cur:
                    spool_file.delete(cur, pairs, done)
            except BaseException:
                self._undeleted = pairs  # tried again with the next delete
                raise
            self._undeleted = []
            gone = set(pairs)
            for tid in {t for _, t in pairs}:
                keep = [e for e in self._traces.get(tid, ()) if (e[0], tid) not in gone]
                if keep:
                    self._traces[tid] = keep
                else:
                    self._traces.pop(tid, None)
            for rid, tids in by_row.items():
                if (req := self._requests.get(rid)) is not None:
                    req.traces.difference_update(tids)
                    self.load.done(rid, tids)
                    if req.traces and 2 * len(req.traces) <= req.fed:
                        self._thin[rid] = None  # half its traces are done: thin it
            for rid in done:
                self.bytes -= self._requests.pop(rid).nbytes
                self._thin.pop(rid, None)
                self.load.drop(rid)

    def _report(self) -> None:
        self.metrics.held(len(self._requests), self.bytes)
