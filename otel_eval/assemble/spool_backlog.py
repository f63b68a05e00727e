"""Stage: assemble (spool backlog). What a previous process left in the spool: read when the
file is opened, replayed at start.

    Spool.open -> read(db): the pending pairs and their marks (requests without one deleted)
    Spool.replay -> Backlog.replay: oldest request first -> replay_one (``spool_rows``) ->
        the engine's submit (replayed=True)

Promises:
- timers survive a restart: each request keeps the wall-clock time it was received at, and
  a replay hands its age to assembly, so a trace's grace and maximum duration count from
  when its spans came (its idle clock restarts with the process, and its maximum duration
  is not reached before ``idle_timeout_s`` after it: the downtime is no silence of the
  run's; a run left in flight that never ends is still reported once);
- a straggler stays one: a trace the spool replays is late if its run is stored (as spans
  opening it live would be), unless one of its pairs is ``carried`` (re-spooled with what a
  stored revision held when late spans re-opened it): a restart never turns spans a previous
  process took as stragglers of a stored run into a run that replaces it;
- passed on stays passed on: spans taken only to pass on as another sender's for a released
  run (pass-through's ``foreign_sender``) keep that mark on their pair, so a replay, which
  knows no sender, passes them on again and never evaluates them into the run, even when the
  run's own sender re-opened it before the crash;
- cut stays cut: a run missing spans refused for their service's share (``TraceAssembler.cut``)
  keeps that mark on its pairs (``settle``'s ``cut``), so a replay releases it ``truncated``
  (reason ``service_share``) as the live process would, never judged as a whole run; so does
  a run whose spans were refused before it opened (``spool_refused``: nothing of it in the
  spool then), when it opens after the restart.

No state of its own past the replay: the ``Spool`` owns the file and what it holds (``Rows``:
what the replay asks of it).
"""

from __future__ import annotations

import functools
import logging
import sqlite3
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Protocol

from otel_eval.assemble.spool_file import transaction
from otel_eval.assemble.spool_rows import Replay, replay_one
from otel_eval.base.model import Span
from otel_eval.decode import otlp
from otel_eval.decode.otlp_logs import HeldRecord
from otel_eval.telemetry.spool import SpoolMetrics

# The spool's logger, for all its parts: their lines keep the one name.
log = logging.getLogger("otel_eval.assemble.spool")


class Rows(Protocol):
    """What a replay asks of the spool (``Spool``)."""

    metrics: SpoolMetrics

    def body(self, rid: int) -> bytes | None:
        """Request ``rid``'s bytes; None when it is gone."""

    def delete(self, pairs: list[tuple[int, str]]) -> None:
        """Delete (request, trace) pairs (raises ``sqlite3.Error`` / ``OSError``)."""

    def charge(self, rid: int, items: Collection[Span | HeldRecord]) -> None:
        """Charge row ``rid`` to the services of ``items`` (``RowLoad``)."""


@dataclass(slots=True)
class Backlog:
    """The pending pairs a previous process left, all at revision 0 (a fresh assembler starts
    every trace at 0), with what each request and pair said of itself."""

    pending: dict[int, set[str]] = field(default_factory=dict)  # request -> its traces
    sizes: dict[int, int] = field(default_factory=dict)  # request -> its body's bytes
    signals: dict[int, str] = field(default_factory=dict)  # request -> traces | logs
    received: dict[int, float] = field(default_factory=dict)  # request -> wall-clock s
    # traces left to replay with a stored revision's content (``carried`` pairs): whole
    # runs, not stragglers of a run stored before (``TraceAssembler.resume``)
    carried: set[str] = field(default_factory=set)
    # traces left to replay whose runs miss spans refused for a service's share (``cut``
    # pairs): released truncated (``TraceAssembler.cut``), never judged whole
    cut: set[str] = field(default_factory=set)
    # (request, trace) pairs whose spans were taken only to pass on (another sender's
    # for a released run): replayed so, never as the run's (``settle``'s ``foreign``)
    foreign: set[tuple[int, str]] = field(default_factory=set)

    def replay(self, rows: Rows, submit: Replay, wall: Callable[[], float]
               ) -> tuple[int, int, int]:
        """Hand every pending trace's spans and log records to ``submit``, oldest request
        first. Returns (requests, spans, records) replayed."""
        taken = Counter[str]()
        for rid in sorted(self.pending):
            raw = rows.body(rid)
            if raw is None:
                continue
            wanted, signal = self.pending[rid], self.signals.get(rid, "traces")
            at = self.received.get(rid) or 0.0  # 0: kept before receive times were (age 0)
            age_s = max(0.0, wall() - at) if at else 0.0
            try:
                n, fed = replay_one(raw, signal, wanted, age_s, submit, rows.metrics,
                                    {t for t in wanted if (rid, t) in self.foreign},
                                    functools.partial(rows.charge, rid))
            except otlp.MalformedRequest:  # cannot happen for what append wrote; never loop
                log.error("spool request %d is not an OTLP %s request; dropping it", rid, signal)
                rows.metrics.failed("replay")
                rows.delete([(rid, t) for t in wanted])
                continue
            taken[signal] += n
            _fed_nothing(rows, rid, wanted - fed)
        if self.pending:
            log.info("spool: replayed %d span(s) and %d log record(s) from %d request(s) not "
                     "evaluated before the last stop", taken["traces"], taken["logs"],
                     len(self.pending))
        return len(self.pending), taken["traces"], taken["logs"]


def read(db: sqlite3.Connection) -> Backlog:
    """What the spool at ``db`` holds; requests without a pending pair are deleted."""
    backlog = Backlog()
    sizes: dict[int, int] = {}
    for rid, size, signal, received in db.execute(
            "SELECT id, length(body), signal, received_at FROM spool_requests"):
        sizes[rid], backlog.signals[rid], backlog.received[rid] = size, signal, received
    for rid, tid, carried, foreign, cut in db.execute(
            "SELECT request_id, trace_id, carried, foreign_sender, cut FROM spool_traces"):
        if rid in sizes:
            backlog.pending.setdefault(rid, set()).add(tid)
            if carried:
                backlog.carried.add(tid)
            if foreign:
                backlog.foreign.add((rid, tid))
            if cut:
                backlog.cut.add(tid)
    # runs refused spans for a share before they opened: cut when they open
    backlog.cut.update(tid for (tid,) in db.execute("SELECT trace_id FROM spool_refused"))
    orphans = [(rid,) for rid in sizes if rid not in backlog.pending]
    with transaction(db) as cur:
        cur.executemany("DELETE FROM spool_requests WHERE id = ?", orphans)
        cur.execute("DELETE FROM spool_traces WHERE request_id NOT IN "
                    "(SELECT id FROM spool_requests)")
    backlog.sizes = {rid: sizes[rid] for rid in backlog.pending}
    return backlog


def _fed_nothing(rows: Rows, rid: int, traces: set[str]) -> None:
    """The pairs of a replayed request whose traces the decoder kept nothing of (refused
    by this version, counted): no release will ever delete them, and left they were
    replayed, and counted, at every start, held against ``max_bytes`` for good."""
    if not traces:
        return
    try:
        rows.delete([(rid, t) for t in traces])
    except (sqlite3.Error, OSError):  # left for the next delete (``_undeleted``)
        log.exception("spool: deleting the refused traces of request %d failed", rid)
        rows.metrics.failed("delete")
