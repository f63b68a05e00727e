"""The judge stage's write path (``JudgeStage``'s half on the writer thread): what becomes of
a judgement once made, and of the work a killed process left.

    JudgeStage._done / _skipped (loop) -> _write: JudgeWrites.put (store.put_judge, cut to
        fit: ``_fit``) -> _after_write (writer thread): stored -> the results topic gets the
        row read back (``_publish``); not stored -> out of the journal
        -> _written (loop): the judgement's events (``_send``), holding its journal entry
    start: _mark_lost (writer thread): each journal entry of a dead process stored skipped
        ``restart`` (or, stored already, its events and results record sent again)

Each queued evaluation is kept in a journal (``journal.PendingJournal``) until its judgement or
skip is stored, and a judgement's (or skip's) until its events and its results-topic record
are delivered (or dropped for good), as is each session judgement under way until it is
written: the work a killed process held is marked skipped ``restart`` at the next start, and
counted, and the events and results record of a judgement stored but not delivered are sent
again from the store (at least once).

The stage is the one writer of a row's ``judge`` part, through the store's write path for it
(``store.judge_writes.JudgeWrites``: a thread of its own, never the event loop the Kafka
stages share, writes in the order made). A store (or journal) that cannot answer is said in
a line per ``STORE_LOG_INTERVAL_S``, with a count of the failures left out, not a line per
trace.

``JudgeDelivery`` is a base of ``JudgeStage`` (the stage constructs, starts and stops it all):
the attributes it reads are the stage's, declared here.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from otel_eval.base.aio import LoopThread
from otel_eval.base.component import Held, settle
from otel_eval.base.loglimit import LogLimiter, limited_line
from otel_eval.base.model import Trace
from otel_eval.base.results import Evaluation, stored_evaluation, stored_run_span_id
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.judge.fit import fit_stored
from otel_eval.evaluate.judge.journal import PendingJournal
from otel_eval.evaluate.judge.workqueue import skipped_judge
from otel_eval.outputs.deps import JudgedResults, JudgeEvents
from otel_eval.store import EvaluationStore
from otel_eval.store.judge_writes import JudgeWrites
from otel_eval.telemetry.metrics import Metrics

# The stage's logger, for both its parts: their lines keep the one name.
log = logging.getLogger("otel_eval.evaluate.judge.stage")


class JudgeDelivery:
    """The judge stage's writes, journal and deliveries (see the module docstring)."""

    config: JudgeConfig
    bounds: TrajectoryConfig  # the bounds of a stored result
    loop: LoopThread
    store: EvaluationStore
    metrics: Metrics
    events: JudgeEvents | None
    results: JudgedResults | None
    _store_log: LogLimiter  # the writer thread's and the loop's store failures
    _journal: PendingJournal | None
    _journal_ever: PendingJournal | None  # as opened, also once closed
    _writer: JudgeWrites | None
    _writes: set[Future[bool]]  # made, not yet done (touched on the loop)

    def _mark_lost(self) -> bool:  # on the writer thread
        """Store the work a dead process left in the journal as skipped ``restart`` (and
        publish it, as any judge skip is); send the events of the judgements it stored and
        had not delivered again."""
        assert self._journal is not None
        lost = self._journal.pending()
        if lost:
            log.warning("%d traces queued for the judge by a process that stopped before "
                        "judging them (stored as skipped restart) or before their events "
                        "left (sent again)", len(lost))
        try:
            for trace_id, revision, run_span_id, evaluated_at_ns in lost:
                row = self.store.get(trace_id)  # a write that landed past a shutdown deadline
                if row is None or row.get("revision") != revision or not self._same(
                        trace_id, evaluated_at_ns):
                    self._journal.remove(trace_id, revision)  # evaluated again since: its own
                elif "judge" not in row:
                    stored = self.store.put_judge(trace_id, revision,
                                                  skipped_judge("restart"), evaluated_at_ns)
                    self.metrics.judge.skip("restart")
                    held = Held(trace_id, revision, self._delivered)
                    if stored and self.results is not None:  # as every judge skip is
                        self._publish_row(self.results, trace_id, revision, held)
                    settle([held])  # the entry leaves once its record is delivered
                else:  # stored: its events and results record, not delivered, sent again
                    self._resend(trace_id, revision, run_span_id, row)
            self._mark_lost_sessions()
        except Exception as e:  # the store's failure: said; the entries left wait for a start
            log.error("marking the judge work of a stopped process failed: %s",
                      type(e).__name__, exc_info=e)
            return False
        return True

    def _resend(self, trace_id: str, revision: int, run_span_id: str,
                row: dict[str, Any]) -> None:  # on the writer thread
        """A judgement stored by a dead process: its events and its results record again,
        from the store, the entry held until both are delivered or dropped for good."""
        held = Held(trace_id, revision, self._delivered)
        if self.results is not None:
            self._publish_row(self.results, trace_id, revision, held)
        if self.events is not None:
            trace = Trace(trace_id, [], row.get("status") or "complete", revision=revision)
            # an older version's entry kept no span: the run's, from its steps
            self._send(stored_evaluation(trace, row), run_span_id or stored_run_span_id(row),
                       held)
        else:
            settle([held])

    def _mark_lost_sessions(self) -> None:  # on the writer thread
        """A session judgement a dead process had under way: stored skipped ``restart`` onto
        the completion it was judging, unless that one has a judge already (written, the
        entry not yet cleared) or is no longer the session's last (re-opened since)."""
        assert self._journal is not None
        for key, completions in self._journal.pending_sessions():
            row = self.store.session_record(key)
            if (row is not None and row.completions == completions
                    and row.record is not None and "judge" not in row.record
                    and self.store.put_session_judge(key, completions,
                                                     skipped_judge("restart"))):
                log.warning("the judgement of session %s was under way in a process that "
                            "stopped before it ended: stored as skipped restart", key)
                self.metrics.judge.skip("restart")
            self._journal.remove_session(key, completions)

    def _journal_session(self, key: str, completions: int,
                         add: bool) -> bool:  # on the writer thread
        journal = self._journal
        if journal is None:
            return False
        try:
            if add:
                journal.add_session(key, completions)
            else:
                journal.remove_session(key, completions)
        except sqlite3.Error as e:  # judging goes on; only a crash's mark is at stake
            self._store_failed(logging.ERROR, "journaling the judgement of session %s "
                               "failed: %s", key, e)
            return False
        return True

    def _same(self, trace_id: str, evaluated_at_ns: int | None) -> bool:
        """Whether the stored row is the evaluation the entry was queued for: one of the same
        revision evaluated at another time (a run re-opened by late spans, replayed whole at
        revision 0 again by this start or another worker) is not, and its judge is its
        evaluator's (before, it was stored skipped ``restart`` and counted)."""
        if evaluated_at_ns is None:  # an entry an older version wrote: the revision decides
            return True
        stamp = self.store.stamp(trace_id)
        return stamp is not None and stamp[1] == evaluated_at_ns

    def _journal_add(self, trace_id: str, revision: int, run_span_id: str,
                     evaluated_at_ns: int) -> bool:  # on the writer thread
        assert self._journal is not None
        try:
            self._journal.add(trace_id, revision, run_span_id, evaluated_at_ns)
        except sqlite3.Error as e:  # judging goes on; only a crash's mark is at stake
            self._store_failed(logging.ERROR, "journaling judge work of trace %s failed: %s",
                               trace_id, e)
            return False
        return True

    def _judged(self, evaluation: Evaluation, held: Held) -> None:  # on the loop, once stored
        self._send(evaluation, evaluation.trajectory.run_span_id, held)

    def _send(self, evaluation: Evaluation, run_span_id: str, held: Held) -> None:
        """The judgement's events, holding its journal entry until they are delivered or
        dropped for good (``_delivered``); a stop first leaves it for the next start.
        Settles the stage's own take of ``held``."""
        assert self.events is not None
        self.events.export_judge(evaluation, run_span_id, self.config.low_score_threshold,
                                 (held,))  # raising: the entry stays, sent at the next start
        settle([held])  # the stage's own hold: released here when the sink queued none

    def _delivered(self, held: list[Held]) -> None:  # on a sender's thread (or this one)
        journal = self._journal_ever
        if journal is None:
            return
        try:
            journal.delivered([(h.trace_id, h.revision) for h in held])
        except sqlite3.Error as e:  # delivered: the next start sends them again (at least once)
            log.error("clearing the journal entries of %d delivered judgements failed: %s",
                      len(held), e)

    def _write(self, evaluation: Evaluation,
               then: Callable[[Evaluation, Held], None] | None = None) -> None:  # on the loop
        """Hand ``put_judge`` to the writer thread and return at once; ``then(evaluation,
        held)`` runs on the loop once the store took it (not when the trace was re-evaluated
        since), and settles the stage's take of ``held``: the journal entry, kept until the
        judgement's events and results record are delivered or dropped for good."""
        assert evaluation.judge is not None and self._writer is not None
        events = then is not None
        held = Held(evaluation.trace_id, evaluation.trajectory.revision, self._delivered)
        try:
            write = self._writer.put(
                evaluation.trace_id, evaluation.trajectory.revision, evaluation.judge,
                shape=lambda judge: self._fit(evaluation, judge),
                after=lambda stored: self._after_write(evaluation, stored, events, held),
                # the evaluation judged: another of the same revision (a replay, here or by
                # another worker) is judged on its own
                evaluated_at_ns=evaluation.evaluated_at_ns)
        except RuntimeError:  # the writer has stopped: the shutdown deadline passed
            log.warning("judge result of trace %s not stored: the stage has stopped",
                        evaluation.trace_id)
            return
        self._writes.add(write)
        write.add_done_callback(
            lambda f: self.loop.call(self._written, f, evaluation, then, held))

    def _fit(self, evaluation: Evaluation, judge: dict[str, Any]) -> dict[str, Any]:
        """On the writer thread: the judgement cut to what the stored result leaves of
        ``max_result_bytes`` (and kept as the evaluation's, for its events)."""
        evaluation.judge = fit_stored(evaluation, judge, self.bounds)
        return evaluation.judge

    def _journal_remove(self, evaluation: Evaluation) -> None:  # on the writer thread
        """Stored: out of the journal. Read once: a write past the shutdown deadline may end
        after ``shutdown`` dropped it (a closed journal removes nothing)."""
        journal = self._journal
        if journal is None:
            return
        try:
            journal.remove(evaluation.trace_id, evaluation.trajectory.revision)
        except sqlite3.Error as e:  # stored: the next start finds its judge, marks nothing
            self._store_failed(logging.ERROR, "clearing the journal entry of trace %s "
                               "failed: %s", evaluation.trace_id, e)

    def _after_write(self, evaluation: Evaluation, stored: bool, events: bool,
                     held: Held) -> None:
        """On the writer thread, once the store answered: a stored judgement goes to the
        results topic as the row now reads (``_publish``), and keeps its journal entry
        (``held``) until that record and its events are delivered: a crash before then sends
        them again at the next start (``_mark_lost``). Not stored: out of the journal."""
        if not stored:
            self._journal_remove(evaluation)
            return
        if self.results is not None:
            self._publish(self.results, evaluation, held)
        if not events:  # else ``_send`` settles the stage's take, once the events are queued
            settle([held])

    def _publish(self, results: JudgedResults, evaluation: Evaluation,
                 held: Held | None = None) -> None:
        """On the writer thread: the stored object, with its judge, to the results topic:
        read back, since the row may hold more than ``evaluation`` (a verdict an outcome
        re-judged while the judge ran: ``POST /v1/feedback``), and the topic's last record
        is the results API's object. ``evaluation`` itself when the row cannot be read, or is
        another evaluation's by now (that one is published on its own)."""
        with results.ordered():  # an outcome's record read after ours goes after ours
            try:
                got = self.store.get_versioned(evaluation.trace_id)
            except Exception as e:  # the judgement is stored: what we hold goes out
                self._store_failed(logging.WARNING, "reading back the judged trace %s failed: "
                                   "%s", evaluation.trace_id, type(e).__name__)
                got = None
            if got is None:
                results.publish(evaluation, held)
            elif (got[0].get("revision"), got[1]) == (evaluation.trajectory.revision,
                                                      evaluation.evaluated_at_ns):
                results.publish_stored(*got, held=held)

    def _publish_row(self, results: JudgedResults, trace_id: str, revision: int,
                     held: Held) -> None:
        """On the writer thread: the stored row of ``revision``, its judge just written
        (``_mark_lost``), to the results topic as the results API returns it."""
        with results.ordered():
            try:
                got = self.store.get_versioned(trace_id)
            except Exception as e:  # the skip is stored: the topic misses it, said
                self._store_failed(logging.WARNING, "reading back the judged trace %s "
                                   "failed: %s", trace_id, type(e).__name__)
                return
            if got is not None and got[0].get("revision") == revision:
                results.publish_stored(*got, held=held)

    def _store_failed(self, level: int, what: str, *args: object,
                      error: BaseException | None = None) -> None:
        """A line of the store's (or the journal's) failure, unless ``_store_log`` leaves it
        out: the store down fails every trace's write and read-back (``error``'s traceback
        at DEBUG)."""
        limited_line(self._store_log, log, what, *args, counted="judge store failures",
                     level=level, exc_info=error)

    def _written(self, write: Future[bool], evaluation: Evaluation,
                 then: Callable[[Evaluation, Held], None] | None,
                 held: Held) -> None:  # on the loop
        self._writes.discard(write)
        if write.cancelled():
            return
        if (e := write.exception()) is not None:  # the store's failure: said, judging goes on
            self._store_failed(logging.ERROR, "storing the judge result of trace %s failed: "
                               "%s: %s", evaluation.trace_id, type(e).__name__, e, error=e)
        elif write.result() and then is not None:
            then(evaluation, held)
