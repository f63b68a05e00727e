"""Stage: evaluate and store. The one interface the engine hands released traces to.

    Engine.process -> EvaluationStage.run(batch, done) -> evaluate_and_store (here, or in a
        worker process) -> done(jobs, outcomes) -> Engine: spool, metrics, sinks, waiters

``evaluate_and_store`` reads the store's agent history for runs no span named, and after
the batch's commit adds its named completed runs to it (``otel_eval.evaluate.agent_inference``).
It evaluates a trace only once per content: a trace whose ``digest`` the store already holds
for its trace id (read with one query per batch, ``content_digests``) is not evaluated or
stored again; its outcome says ``already_evaluated`` and the engine counts it, runs no sink for
it, and treats it as done (spool rows deleted, Kafka offsets committed). That is what keeps a
record redelivered after a Kafka rebalance (to a worker sharing the store) or a spool row
replayed after a crash between commit and delete from being evaluated twice. A trace that is
no agent run (``Evaluator.evaluate`` returns None: only setup operations) is not stored
either; its outcome says ``not_a_run``, counted and treated as done the same way. A trace
that lacks spans or log records the stored run was made from (``stored_span_ids``:
``model.content_ids``) is not evaluated either (``late``): spans that came after the run
was stored, to a process that no longer remembers it (a restart in between, a new Kafka
partition owner), or a replay with fewer of its records, are a fragment of it; the stored
run stands, as assembly's own ``late`` refusal keeps it while it remembers. One that holds
them all and more (a re-open, a replay or redelivery with more than was stored) supersedes
it.
The rule needs only the store, so it is the same in process and in a worker process. A trace
a worker process had stored before it died is evaluated again, and counted once.
A known outcome recorded (``POST /v1/feedback``) while a batch was evaluated and stored is in
the verdicts stored: the outcomes are read again after the commit, and a trace whose outcome
changed meanwhile is evaluated and stored again with it.

``InProcess`` evaluates and stores in the calling thread and calls ``done`` before ``run``
returns (the engine's single-process path). ``workers.pool.WorkerPool`` hands the traces to
worker processes and calls ``done`` from its own threads as their results come back. Both
run the same ``evaluate_and_store``, so a trace is evaluated the same way wherever it runs.

``Job``, ``Outcome`` and the ``EvaluationStage`` interface live in ``evaluate.handoff`` (the
engine imports them from there, never this module). An ``Outcome`` is what the engine needs
after the store committed: the evaluation (for
metrics and sinks), whether it superseded a stored one, and why evaluating failed if it did
(the trace is then stored with an ``evaluation_error`` finding, never dropped).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace

from otel_eval.base.loglimit import failed_line, limited_line
from otel_eval.base.model import Trace, content_digest, content_ids
from otel_eval.base.results import Evaluation
from otel_eval.base.text import valid_text
from otel_eval.evaluate.agent_inference import RecallOnce, learned
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.handoff import (
    ALREADY_EVALUATED,
    LATE,
    NOT_A_RUN,
    UNSTORABLE,
    Done,
    EvaluationStage,
    Job,
    Outcome,
)
from otel_eval.store import EvaluationStore
from otel_eval.store.failures import STORE_REFUSALS, write_failure

log = logging.getLogger(__name__)

# Rounds of evaluating again the traces whose outcome was recorded while they were stored.
FEEDBACK_ROUNDS = 3


__all__ = ["ALREADY_EVALUATED", "LATE", "NOT_A_RUN", "UNSTORABLE", "EvaluationStage", "InProcess",
           "Job", "Outcome", "evaluate_and_store", "store_as_errors", "store_failed",
           "store_given_up"]


def evaluate_and_store(evaluator: Evaluator, store: EvaluationStore, traces: Sequence[Trace],
                       retried_since_ns: Mapping[str, int] | None = None) -> list[Outcome]:
    """Evaluate ``traces`` and store them in one transaction. ``retried_since_ns``: traces a
    worker that died had taken, with when they were first handed out (wall clock, ns); a
    stored row of the same revision written since then is that worker's own commit, so
    storing again does not count as superseding it. When the store refuses (a full disk, a
    lost connection: ``store.failures``), nothing of the batch is stored and every outcome
    says why (``unstored``). Any other exception (the driver refusing one row's data, building
    a row) is one trace's: the batch is stored trace by trace, and the trace that still fails
    is stored as an evaluation error, or dropped (``UNSTORABLE``) when even that fails: said
    in a line per ``evaluator.store_log`` interval, with a count of those left out."""
    try:
        return _store_fresh(evaluator, store, traces, retried_since_ns)
    except Exception as e:  # stage boundary: the store's errors become values
        reason = write_failure(e)
        if reason in STORE_REFUSALS:
            return _refused(store, traces, reason, e)
        if len(traces) > 1:
            limited_line(evaluator.store_log, log, "storing a batch of %d trace(s) failed "
                         "(%s); storing them one by one", len(traces), _one_line(e),
                         counted="store failures")
            return [out for t in traces
                    for out in evaluate_and_store(evaluator, store, [t], retried_since_ns)]
        return [_store_error(evaluator, store, traces[0], e)]


def _one_line(error: BaseException) -> str:
    return valid_text(f"{type(error).__name__}: {' '.join(str(error).split())[:300]}")


def _refused(store: EvaluationStore, traces: Sequence[Trace], reason: str,
             error: BaseException) -> list[Outcome]:
    line = _one_line(error)
    log.warning("store %s refused a batch of %d trace(s) (%s: %s); kept for a retry",
                store.location, len(traces), reason, line)
    return [Outcome(None, False, unstored=reason, error=line) for _ in traces]


def _store_error(evaluator: Evaluator, store: EvaluationStore, trace: Trace,
                 error: BaseException) -> Outcome:
    """One trace the store would not take: stored as an evaluation error saying why, or
    dropped (``UNSTORABLE``, counted by the engine) when even building that fails. A store
    that refuses the small error record too is the store's own failure (a missing table, a
    revoked grant), not this trace's: the trace is kept and retried, never dropped."""
    limited_line(evaluator.store_log, log, "trace %s could not be stored (%s); storing it "
                 "as an evaluation error", trace.trace_id, _one_line(error),
                 counted="store failures")
    [out] = store_as_errors(evaluator, store, [trace], error)
    return out


def store_as_errors(evaluator: Evaluator, store: EvaluationStore, traces: Sequence[Trace],
                    error: BaseException) -> list[Outcome]:
    """``store_failed``, its failures as values: a store that refuses the error records (a
    full disk, a lost connection, a missing table) keeps the traces (``unstored``: the engine
    retries them, as any refused batch), never dropped; when even building them fails, they
    are dropped (``UNSTORABLE``, counted by the engine)."""
    try:
        return store_failed(evaluator, store, traces, error)
    except Exception as e:
        reason = write_failure(e)
        if reason is not None:  # the store refuses even an error record: kept
            return _refused(store, traces, reason, e)
        log.error("%d trace(s) could not be stored as evaluation errors either (%s); dropped",
                  len(traces), _one_line(e))
        return [Outcome(None, False, skipped=UNSTORABLE) for _ in traces]


def store_given_up(evaluator: Evaluator, store: EvaluationStore, traces: Sequence[Trace],
                   error: BaseException, handed_out_ns: Mapping[str, int]) -> list[Outcome]:
    """``store_as_errors`` for traces whose worker kept dying holding them
    (``handed_out_ns``: when each was first handed to one, wall clock, ns), except a trace
    whose revision a worker stored since then (its own commit, then it died before
    answering, as ``_own_commits``): that evaluation stands, never replaced by the error;
    it is done as ``already_evaluated`` (the delivering sinks read it from the store)."""
    try:
        own = _own_commits(store, traces, handed_out_ns)
    except Exception as e:
        reason = write_failure(e)
        if reason is None:
            raise
        return _refused(store, traces, reason, e)
    rest = [t for t in traces if t.trace_id not in own]
    outcomes = iter(store_as_errors(evaluator, store, rest, error) if rest else [])
    return [Outcome(None, False, skipped=ALREADY_EVALUATED) if t.trace_id in own
            else next(outcomes) for t in traces]


def _store_fresh(evaluator: Evaluator, store: EvaluationStore, traces: Sequence[Trace],
                 retried_since_ns: Mapping[str, int] | None) -> list[Outcome]:
    """Skip what the store already holds (``_skipped``), evaluate and store the rest."""
    stored = store.content_digests({t.trace_id for t in traces})  # one query per batch
    own = _own_commits(store, traces, retried_since_ns or {})
    other = {t.trace_id for t in traces if t.trace_id in stored and t.trace_id not in own
             and stored[t.trace_id] != t.digest}  # stored with other content: rare
    whole = store.stored_span_ids(other) if other else {}
    skipped = [ALREADY_EVALUATED if t.trace_id in other and _stored_before_cut_digests(
        store, t, stored[t.trace_id]) else _skipped(t, stored, own, whole) for t in traces]
    fresh = [t for t, why in zip(traces, skipped, strict=True) if why is None]
    outcomes = iter(_evaluate_and_store(evaluator, store, fresh, own) if fresh else [])
    return [next(outcomes) if why is None else Outcome(None, False, skipped=why)
            for why in skipped]


def _skipped(trace: Trace, stored: Mapping[str, str], own: set[str],
             whole: Mapping[str, frozenset[str]]) -> str | None:
    """Why ``trace`` is not evaluated, given the stored digests and span ids and records'
    keys (``whole``); None: it is. A trace a dead worker had committed is evaluated again
    (``own``): that worker's outcome never reached the engine, so nothing counted, exported
    or judged it. Else the same content is ``already_evaluated``; other content that holds
    every span and log record the stored run was made from (``content_ids``) is more of the
    run (a re-open, a replay or a Kafka redelivery with more than was stored) and supersedes
    it; content that lacks some is a fragment (spans that came after the run was stored, to
    a process that no longer holds it: a restart, a new partition owner; a replay with fewer
    of its records) and is ``late``, the stored run stands. A row stored before span ids
    were kept falls back on ``Trace.late_if_stored``; one that names no record (an earlier
    release of schema 16 kept span ids only) on its digest (``_holds_records``)."""
    held = stored.get(trace.trace_id)
    if held is None or trace.trace_id in own:
        return None
    if trace.digest and held == trace.digest:
        return ALREADY_EVALUATED
    ids = whole.get(trace.trace_id)
    if ids is None:
        return LATE if trace.late_if_stored else None
    if not ids <= content_ids(trace):
        return LATE
    return None if any(i.startswith("r") for i in ids) or _holds_records(
        trace, ids, held) else LATE


def _stored_before_cut_digests(store: EvaluationStore, trace: Trace, held: str) -> bool:
    """Whether the stored run is ``trace`` released ``truncated`` by a release whose digest
    did not tell a cut run from a whole one (before ``content_digest`` hashed the status):
    the same content stored ``truncated``, so a replay of it (spool rows an upgrade found)
    is not evaluated, judged and exported again. A row stored ``complete`` with that digest
    is a whole run this one cuts (a late item it had no room for): not this. Rare: read
    only for a truncated trace whose digest, without its status, is the stored one."""
    if trace.status != "truncated" or held != content_digest(replace(trace, status="complete")):
        return False
    body = store.get(trace.trace_id)
    return body is not None and body.get("status") == "truncated"


def _holds_records(trace: Trace, ids: frozenset[str], held: str) -> bool:
    """Whether ``trace`` holds every log record of a stored run whose ids name none: a run
    with no records, or a row of an earlier release of schema 16, which kept span ids only.
    Its digest tells: the trace's spans of the run with the trace's records, or with none,
    make it again only when the trace holds all the run's records (or it had none), released
    as the trace is or as the stored run may have been (``truncated`` or not: the digest
    tells them apart). Else (more records than the run's too, or fewer) it is not known to
    hold them: ``late``."""
    spans = [s for s in trace.spans if s.span_id in ids]
    return held in (content_digest(replace(trace, spans=spans, logs=logs, status=status))
                    for logs in (list(trace.logs), []) for status in ("complete", "truncated"))


def _own_commits(store: EvaluationStore, traces: Sequence[Trace],
                 retried_since_ns: Mapping[str, int]) -> set[str]:
    """The traces a worker that died had taken (``retried_since_ns``: when each was first
    handed out, wall clock, ns) and had already stored: a row of the same revision written
    since then is that worker's own commit, so storing again is not superseding it."""
    own = set()
    for trace in traces:
        since = retried_since_ns.get(trace.trace_id)
        if not since:  # not handed out (0: kept after a refusal, handed again)
            continue
        stamp = store.stamp(trace.trace_id)
        if stamp is not None and stamp[0] == trace.revision and stamp[1] >= since:
            own.add(trace.trace_id)
    return own


def _evaluate_and_store(evaluator: Evaluator, store: EvaluationStore, traces: Sequence[Trace],
                        own: set[str]) -> list[Outcome]:
    known = store.feedback_many({t.trace_id for t in traces})  # one query, not one per trace
    history = RecallOnce(store)  # a run no span names: one query per kind of run, per batch
    results = [_evaluate(evaluator, trace, known.get(trace.trace_id), history)
               for trace in traces]
    evaluated = [ev for ev, _ in results if ev is not None]
    superseded = iter(store.put_many(evaluated) if evaluated else [])
    if evaluated:  # committed: a failure from here on is no refusal of the batch
        try:
            _outcomes_recorded_meanwhile(evaluator, store, traces, results, known, history)
        except Exception as e:  # the stored verdicts stand; the next evaluation applies it
            limited_line(evaluator.store_log, log, "reading the outcomes recorded while %d "
                         "trace(s) were stored failed (%s); their next evaluation applies "
                         "them", len(evaluated), _one_line(e), counted="store failures")
    evicted = _remember(evaluator, store, evaluated)
    outcomes = [Outcome(None, False, skipped=NOT_A_RUN) if ev is None
                else Outcome(ev, next(superseded) and ev.trace_id not in own, failure)
                for ev, failure in results]
    if outcomes:  # counted by the engine (the batch's, once)
        outcomes[0].history_evicted = tuple(sorted(evicted.items()))
    return outcomes


def _evaluate(evaluator: Evaluator, trace: Trace, outcome: str | None,
              history: RecallOnce) -> tuple[Evaluation | None, str | None]:
    """The trace's evaluation (None: no agent run) and, when evaluating raised, the error's
    type (the stand-in stored then says why)."""
    try:
        ev, failure = evaluator.evaluate(trace, outcome, history), None
    except Exception as e:  # stage boundary: the trace is still stored, with the error
        failed_line(evaluator.failure_log, log, "evaluation of trace %s failed: %s",
                    trace.trace_id, _one_line(e))
        ev, failure = evaluator.failed(trace, e), type(e).__name__
    if ev is not None:
        _made_from(ev, trace)
    return ev, failure


def _made_from(ev: Evaluation, trace: Trace) -> None:
    """What ``ev`` was made from, stored in its own columns (``_skipped`` reads them)."""
    ev.content_digest = trace.digest or None
    ev.span_ids = " ".join(sorted(content_ids(trace)))


def _outcomes_recorded_meanwhile(evaluator: Evaluator, store: EvaluationStore,
                                 traces: Sequence[Trace],
                                 results: list[tuple[Evaluation | None, str | None]],
                                 known: Mapping[str, str], history: RecallOnce) -> None:
    """Evaluate again, and store again, the traces whose outcome was recorded after
    ``feedback_many`` read and before ``put_many`` committed. Feedback writes its verdict
    only onto the revision it read, the one before: without this its outcome was in the
    feedback table and not in the verdict just stored, until the trace's next evaluation.
    Feedback recorded after the commit reads the new revision and writes its own verdict.
    One more query per batch; ``results`` is updated in place (for the sinks) with what was
    stored. Raises what the store raises: the batch is committed by then, so the caller
    must not take that for a refusal of it."""
    stale: list[int] = []
    for _ in range(FEEDBACK_ROUNDS):
        now = store.feedback_many({ev.trace_id for ev, _ in results if ev is not None})
        stale = [i for i, (ev, _) in enumerate(results) if ev is not None
                 and now.get(ev.trace_id, known.get(ev.trace_id)) != known.get(ev.trace_id)]
        if not stale:
            return
        known = now
        again = {i: _evaluate(evaluator, traces[i], now[traces[i].trace_id], history)
                 for i in stale}
        store.put_many([ev for ev, _ in again.values() if ev is not None])
        for i, result in again.items():  # stored: what the sinks get (else the first ones)
            results[i] = result
    log.warning("the outcomes of %d trace(s) kept changing while they were stored; their "
                "next evaluation applies them", len(stale))


def _remember(evaluator: Evaluator, store: EvaluationStore,
              evaluations: list[Evaluation]) -> dict[str, int]:
    """The batch's named completed runs into the agent history (after their commit: a
    failure here loses no evaluation, only what later runs could have inferred); the rows
    its bounds deleted, by reason. A store that cannot fails every batch: a line per
    interval (``evaluator.store_log``)."""
    try:
        return store.remember_agents(learned(evaluations))
    except Exception as e:
        limited_line(evaluator.store_log, log, "recording the agent history failed: %s",
                     type(e).__name__, counted="store failures")
        return {}


def store_failed(evaluator: Evaluator, store: EvaluationStore, traces: Sequence[Trace],
                 error: BaseException) -> list[Outcome]:
    """Store ``traces`` as evaluation errors (``error`` says why): a trace that kept killing
    its worker is accounted for, not replayed forever and not dropped."""
    evs = [evaluator.failed(t, error) for t in traces]
    for ev, t in zip(evs, traces, strict=True):
        _made_from(ev, t)
    superseded = store.put_many(evs)
    return [Outcome(ev, sup, type(error).__name__)
            for ev, sup in zip(evs, superseded, strict=True)]


class InProcess:
    """Evaluate and store in the calling thread (the engine's worker thread)."""

    def __init__(self, evaluator: Evaluator, store: EvaluationStore) -> None:
        self.evaluator = evaluator
        self.store = store

    def run(self, jobs: list[Job], done: Done) -> None:
        done(jobs, evaluate_and_store(self.evaluator, self.store, [j.trace for j in jobs]))

    def drain(self, deadline_s: float) -> bool:
        return True  # ``run`` returns only when its jobs are done

    @property
    def healthy(self) -> bool:
        return True
