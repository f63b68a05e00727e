"""Stage: assemble (durability). Acknowledged means durable: the engine's one door to the spool.

    submit: append(request bytes) before the answer -> settle(what assembly took)
    tick:   dropped(traces assembly dropped with only log records)
    finish: evaluated(traces the store committed)
    start:  replay(submit) before the receivers open

Every spool failure is counted (``otel_eval_spool_failures_total{operation}``) and logged; a
failed append refuses the request (``spool_error``: the exporter retries), a failed delete
leaves rows that go with the next delete (or before a request the spool would refuse for
them), and that a crash meanwhile replays at the next start (found already evaluated: not
evaluated again). Without a spool (off, or an in-memory store) every method is a no-op and
nothing is refused for it.

``append`` and ``settle`` run under the engine lock (a trace cannot be evaluated before its
pair exists); ``settle`` copies what re-opened traces hold out of the assembler there, so the
spool never reads the assembler's live state.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from otel_eval.assemble.assembler import TraceAssembler
from otel_eval.assemble.service_load import service_of
from otel_eval.assemble.spool import Spool
from otel_eval.base.backoff import Backoff
from otel_eval.base.model import Span
from otel_eval.decode import encode, otlp_logs
from otel_eval.decode.otlp_logs import HeldRecord
from otel_eval.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

Request = bytes | Callable[[], bytes]
_BACKOFF = Backoff(1.0, 30.0)  # the store's write retries' defaults (store.write_retry_*)


class Durability:
    def __init__(self, spool: Spool | None, assembler: TraceAssembler, metrics: Metrics, *,
                 clock: Callable[[], float] = time.monotonic,
                 backoff: Backoff = _BACKOFF) -> None:
        self.spool = spool
        self._assembler = assembler
        self._metrics = metrics
        self._clock = clock
        self._backoff = backoff  # how long readiness stays false after a failed append
        self._failed = 0  # appends failed since the last one written
        self._refusing: tuple[str, float] | None = None  # (the error, until: clock)

    def refusing(self) -> str | None:
        """Why /readyz answers 503 (one line), from a failed append until one is written or
        its back-off ends (``backoff``: the store's write retries' schedule, doubling with
        each failure): a full disk is no reason to take traffic a load balancer can send
        to another replica, nor to be restarted (``/healthz`` says nothing of it). Ready
        again once the back-off ends, with nothing written meanwhile, so that a replica
        taken out of rotation gets the request that finds out whether it writes again."""
        r = self._refusing
        if r is None or self._clock() >= r[1]:
            return None
        assert self.spool is not None
        return (f"spool {self.spool.path} refuses writes ({r[0]}); every export is "
                f"refused spool_error (ready again in {r[1] - self._clock():.1f} s, or when "
                "a write goes through)")

    def request_bytes(self, request: Request | None, items: Collection[Any],
                      replayed: bool) -> bytes | None:
        """The bytes to spool for a request, or None when it is not spooled (no spool, no
        request, nothing in it, or replayed from the spool itself)."""
        if self.spool is None or request is None or not items or replayed:
            return None
        return request() if callable(request) else request

    @staticmethod
    def taken_only(signal: str, items: Collection[Any]) -> bytes:
        """The bytes to spool for what assembly takes of a request that lost items to a
        service's share (``Engine._within_shares``): those items re-encoded, as a
        re-opened run is re-spooled. Spooled whole, the rejected ones stayed on disk (held
        against ``spool_max_bytes``) while the request's kept runs were open, and a replay,
        which takes every item of a trace its row names, took those of a kept trace."""
        if signal == "logs":
            return otlp_logs.encode_logs(items).SerializeToString()
        return encode.encode_spans(items).SerializeToString()

    def refusal(self, nbytes: int) -> str | None:
        return self.spool.refusal(nbytes) if self.spool is not None else None

    def spool_bytes(self, raw: bytes | None, items: Collection[Span | HeldRecord],
                    sender: str) -> int:  # lock held
        """What spooling a request adds (0: not spooled): its bytes, and those of the
        released runs its ``items`` re-open, which ``append`` writes with it (as received:
        ``nbytes``). Counted against ``spool_max_bytes`` before it is taken: a few late
        spans re-opening many stored runs wrote them all past the bound."""
        if raw is None:
            return 0
        runs = self._assembler.reopens(items, sender)
        return len(raw) + sum(sum(s.nbytes for s in spans) + sum(r.nbytes for r in logs)
                              for spans, logs, _ in runs.values())

    def reopened_bytes(self, raw: bytes | None, items: Collection[Span | HeldRecord],
                       sender: str) -> Counter[str]:  # lock held
        """Per service.name, the bytes of the released runs ``items`` re-open, which
        ``append`` spools with the request (``raw``; None: not spooled, nothing) and the
        spool charges to their items' services (``RowLoad``): counted in a service's share
        of ``spool_max_bytes`` (``past_share``) as in the bound (``spool_bytes``)."""
        out: Counter[str] = Counter()
        if raw is None:
            return out
        for spans, logs, _ in self._assembler.reopens(items, sender).values():
            for span in spans:
                out[service_of(span)] += span.nbytes
            for record in logs:
                out[service_of(record)] += record.nbytes
        return out

    def past_share(self, service: str, nbytes: int, share: float) -> bool:
        """Whether ``service``, holding spool bytes already, would hold more than ``share``
        of ``spool_max_bytes`` with ``nbytes`` more (``max_service_share``)."""
        if self.spool is None:
            return False
        held = self.spool.held_by(service)
        return bool(held) and held + nbytes > share * self.spool.max_bytes

    def append(self, raw: bytes, trace_ids: set[str], signal: str,
               items: Collection[Span | HeldRecord] = (), sender: str = "",
               refused: Collection[str] = ()) -> int | None:  # lock held
        """The request's spool row, or None when it could not be written (then it is
        refused). The released runs its ``items`` (by ``sender``) re-open are written with
        it, or it is refused: acknowledged, a request's late spans survive a crash in
        their run (alone, a replay refuses them as ``late``). So are its pairs' marks
        (``TraceAssembler.marks``: cut, another sender's) and the ``refused`` traces (for
        a share, their runs not open: ``TraceAssembler.cut``)."""
        assert self.spool is not None
        runs = self._assembler.reopens(items, sender)
        cut, foreign = self._assembler.marks(items, sender)
        try:
            row = self.spool.append(raw, trace_ids, signal,
                                    runs={tid: run[:2] for tid, run in runs.items()},
                                    runs_stored={tid for tid, run in runs.items() if run[2]},
                                    items=items, cut=cut, foreign=foreign, refused=refused)
        except (sqlite3.Error, OSError) as e:
            log.exception("spool write failed; refusing the request (the exporter retries)")
            self._metrics.spool.failed("append")
            self._refusing = (str(e)[:200] or type(e).__name__,
                              self._clock() + self._backoff.delay_s(self._failed))
            self._failed += 1
            return None
        self._failed, self._refusing = 0, None
        return row

    def settle(self, row: int, written: set[str], took: set[str],
               fresh: Collection[Span | HeldRecord] = (), foreign: Collection[str] = ()
               ) -> None:  # lock held
        """After assembly took the request; ``fresh``: the spans or records of this request,
        spooled in its own row, so not again with a re-opened trace's (a replay would refuse
        the second copy as a ``duplicate_span``, counted as not evaluated); ``foreign``: the
        traces whose spans it took only to pass on as another sender's (``AddResult``)."""
        assert self.spool is not None
        asm = self._assembler
        revisions = {}
        for tid in took:
            opened = asm.open_trace(tid)
            if opened is not None:
                revisions[tid] = opened[0]
        held: dict[str, tuple[list[Span], list[HeldRecord]]] = {}
        reopened = self.spool.reopened(revisions)
        mine = {id(item) for item in fresh} if reopened else set()
        runs = self.spool.runs_written(row)
        kept = set()
        for tid in reopened:
            opened = asm.open_trace(tid)
            spans = [s for s in opened[1] if id(s) not in mine] if opened is not None else []
            logs = [r for r in asm.open_logs_of(tid) if id(r) not in mine]
            if runs.get(tid) == (frozenset(s.span_id for s in spans), len(logs)):
                kept.add(tid)  # written with the request: what it holds
            else:
                held[tid] = spans, logs
        self.spool.settle(row, written, revisions, held,
                          {tid for tid in held if asm.holds_stored(tid)}, foreign, kept,
                          {tid for tid in revisions if asm.is_cut(tid)})

    def dropped(self, trace_ids: list[Any]) -> None:
        """Traces assembly dropped with only log records: their spooled records are done."""
        if not trace_ids or self.spool is None:
            return
        try:
            self.spool.evaluated(trace_ids)
        except (sqlite3.Error, OSError):  # rows stay (replayed, dropped again): count
            log.exception("spool: deleting dropped log records failed")
            self._metrics.spool.failed("delete")

    def evaluated(self, traces: Iterable[tuple[str, int]],
                  alone: Iterable[tuple[str, int]] = ()) -> None:
        """After the store's commit: a crash in between replays and supersedes. ``alone``:
        revisions holding nothing of the earlier ones (``Spool.evaluated``). Deletes only:
        this runs on a delivering sink's sender thread too (``Finishing._release``), whose
        sending must not wait for rows to be thinned (``thin``, the engine's worker)."""
        if self.spool is None:
            return
        try:
            self.spool.evaluated(traces, alone, thin=False)
        except (sqlite3.Error, OSError):  # rows stay (replayed at start): count, go on
            log.exception("spool: deleting evaluated traces failed")
            self._metrics.spool.failed("delete")

    def thin(self) -> None:
        """The rows evaluations left half done thinned (``Spool.thin``; a failure counted
        there): the engine's worker, off the engine lock, after each pass."""
        if self.spool is not None:
            self.spool.thin()

    def carried(self) -> set[str]:
        """The traces the spool replays with what a stored revision of them held (whole runs
        re-opened by late spans), for ``TraceAssembler.resume``; read once, after ``replay``:
        handed over, not copied (the spool keeps none for the life of the process)."""
        if self.spool is None:
            return set()
        taken, self.spool.carried = self.spool.carried, set()
        return taken

    def cut(self) -> set[str]:
        """The traces the spool replays whose runs miss spans refused for a service's share,
        for ``TraceAssembler.cut``; read once, after ``replay``: handed over, not copied
        (assembly remembers them, ``max_tombstones``; a second copy here held as many again
        for the life of the process)."""
        if self.spool is None:
            return set()
        taken, self.spool.cut = self.spool.cut, set()
        return taken

    def replay(self, submit: Callable[..., Any]) -> tuple[int, int, int] | None:
        """What the spool holds, through ``submit(items, signal=..., replayed=True, age_s=...)``
        (the engine's one door; ``age_s``: how long ago the request was received, so
        assembly's timers go on from then), before the receivers open."""
        if self.spool is None:
            return None
        def one(items: Any, signal: str, age_s: float) -> tuple[int, Mapping[str, int]]:
            adm = submit(items, "otlp", signal=signal, replayed=True, age_s=age_s)
            return adm.accepted, adm.rejected  # refused by assembly, by reason
        return self.spool.replay(one)
