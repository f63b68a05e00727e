"""Stage: evaluate, sessions. The session completion job: a conversation is evaluated once,
when it completes, by one process of the fleet, and its record is stored.

    every sessions.check_interval_s (tick(now), clock injected):
      store.sessions_due(idle: last turn older than sessions.idle_timeout_s; stale claims)
        -> store.claim_session (one UPDATE: open -> claimed by this tick's token; one winner
           across processes sharing the store)
        -> store.session_turns -> evaluate_session(complete) + prediction (session_predict)
        -> store.complete_session (claimed by the token -> complete, the record; nothing
           when a turn came meanwhile: the session is open again)
        -> metrics (telemetry.sessions), a gen_ai.evaluation.result event on the last turn's
           root span (outputs.events), only for the process whose completion was stored;
           owed in the store (``events_due_ns``, in the completion's statement) until the
           events sink delivered it or dropped it for good
      store.session_events_due (owed, the holder's lease of claim_timeout_s over: it died or
           stopped first) -> lease_session_events (one winner) -> the event again, from the
           stored record (at least once)
        -> the session judge, when serve has one (``SessionJudging``: one call per
           completion, off this thread, written onto that completion)

The state is the store's ``sessions`` table (``store.session_rows``: ``put_many`` opens and
updates a session with each turn, in the turn's transaction), never this process's memory:
turns of one conversation evaluated by different ``--workers``, Kafka consumers or fleet
members make one session; a restart (kill -9 included) loses nothing, and a claim held by a
process that died is taken over after ``sessions.claim_timeout_s``. A turn after completion
re-opens the session (``put_many``); it is completed again at its next idle, counted in
``otel_eval_sessions_reopened_total``, its record replaced (``completion`` + 1).

Bounds: per tick at most ``max_completions_per_check`` sessions; open sessions at most
``max_open_sessions`` (past it the oldest of the services holding the most open sessions
are completed early: ``sessions_evicted``; a service's new ids never push out another's); a
session open ``max_session_duration_s`` since its first turn (or its first turn since its
last completion), its turns never ``idle_timeout_s`` apart, is completed as it stands
(``sessions_evicted`` too; after a restart, as idleness, only once the process has listened
``idle_timeout_s``: the turns held while it was down are back); per
session the turns read are cut by ``max_turns`` and ``max_turns_chars`` (counted in
``session_turns_dropped``). This process holds no per-session state: memory does not grow
with open sessions. Not thread-safe: ``tick`` runs on the job's one thread (or the test's).
A stop leaves open sessions open (a stop is no verdict).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from otel_eval.base.component import Held, settle
from otel_eval.base.loglimit import LogLimiter, bug_line, limited_line
from otel_eval.base.printable import quoted
from otel_eval.base.results import stored_run_span_id
from otel_eval.evaluate.predict import Predictor
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.evaluate import evaluate_session, in_turn_order
from otel_eval.evaluate.sessions.predict import session_prediction
from otel_eval.store.base import EvaluationStore
from otel_eval.store.sessions import split_session_key
from otel_eval.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

__all__ = ["SessionEvents", "SessionJob", "last_root_span"]

# Seconds between two lines of one failure every session (or every check) hits.
LOG_INTERVAL_S = 10.0


class SessionEvents(Protocol):
    """Where a completed session goes out as an event (``outputs.events``)."""

    def export_session(self, record: dict[str, Any], trace_id: str, span_id: str,
                       held: tuple[Held, ...] = ()) -> None: ...


def last_root_span(turn: dict[str, Any]) -> str:
    """The root span of a stored turn: ``model.run_span`` of its steps' spans (the root, else
    the earliest span), never an orphan whose clock says it began before the root; "" with
    no step (``results.stored_run_span_id``)."""
    return stored_run_span_id(turn)


@runtime_checkable
class SessionJudging(Protocol):
    """The judge at the session level (``evaluate.judge.stage.JudgeStage``): told each stored
    completion, it judges the conversation off this thread and writes onto that completion."""

    def judge_session(self, record: dict[str, Any], turns: Sequence[dict[str, Any]],
                      nbytes: int) -> None:
        """``nbytes``: the turns' JSON as stored (``StoredTurns.chars``), what holding them
        costs until they are judged."""
        ...


class SessionJob:
    """``start()`` ticks every ``check_interval_s`` on a thread of its own;
    ``tick(now_s)`` is one check (tests call it with a ``ManualClock``)."""

    def __init__(self, store: EvaluationStore, config: SessionsConfig, metrics: Metrics,
                 predictor: Predictor | None = None, events: SessionEvents | None = None,
                 clock: Callable[[], float] = time.time,
                 judging: SessionJudging | None = None,
                 listening_since_s: float | None = None, listening: bool = True,
                 log_clock: Callable[[], float] = time.monotonic) -> None:
        """``listening_since_s``: when this process began to receive; a last turn before it
        counts as seen then (None: no such bound, e.g. a test's job). ``listening`` False:
        it does not receive yet, no session is idle until ``listening()`` says it does
        (serve: once its receivers are open, after the store's opening and the spool's
        replay). ``log_clock``: the time of the limit on the lines of a failure every
        session or check hits."""
        self.store = store
        self.config = config
        self.metrics = metrics
        self.predictor = predictor
        self.events = events
        self.judging = judging
        self.clock = clock  # wall clock, seconds: turns are stamped with the wall clock
        self._claims = (f"{uuid.uuid4().hex[:12]}:{n}" for n in itertools.count())
        # Idleness is seen while listening: before this process has run idle_timeout_s, a
        # quiet session may be one whose turns were sent while otel-eval was down (queued by
        # the sender's collector, or acknowledged into the spool and not replayed yet).
        self._listening_since_ns: int | None = (
            None if not listening else 0 if listening_since_s is None
            else int(listening_since_s * 1e9))
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._evaluate_log = LogLimiter(LOG_INTERVAL_S, log_clock)  # a bug: every session
        self._check_log = LogLimiter(LOG_INTERVAL_S, log_clock)  # a store down: every check

    def tick(self, now_s: float | None = None) -> int:
        """Complete the sessions due now; how many this process completed."""
        now = int((self.clock() if now_s is None else now_s) * 1e9)
        cfg = self.config
        open_n = self.store.open_session_count()  # one count a check: 40 ms at 100,000
        done = self._keep_bound(now, open_n)
        idle_ns = int(cfg.idle_timeout_s * 1e9)
        # a last turn before this process started counts as seen at its start (a restart is
        # no silence of the conversation's); a stale claim is taken over as before
        since = self._listening_since_ns
        listened = since is not None and now - idle_ns >= since
        idle_before = now - idle_ns if listened else -1
        due = self.store.sessions_due(idle_before, now - int(cfg.claim_timeout_s * 1e9),
                                      cfg.max_completions_per_check)
        for session_id, last_ns in due:
            done += self._complete(session_id, last_ns, now, "idle")
        if listened:  # nor is a session cut for its duration before its turns may be back
            done += self._cut_long(now)
        self.metrics.sessions.open_sessions(max(0, open_n - done))
        if self.events is not None:
            self._send_owed(now)
        return done

    def _cut_long(self, now: int) -> int:
        """Complete the sessions open ``max_session_duration_s`` since their first turn (or
        their first turn since their last completion): a conversation that never goes idle
        is evaluated all the same. Not in a restart's first ``idle_timeout_s``: a session
        that passed its maximum while serve was down may still have turns in the spool, not
        replayed yet, or queued upstream (cut before, it was re-opened by them and completed
        a second time, a second event)."""
        cfg = self.config
        done = 0
        for session_id, last_ns in self.store.sessions_open_since(
                now - int(cfg.max_session_duration_s * 1e9), cfg.max_completions_per_check):
            if self._complete(session_id, last_ns, now, "max_session_duration"):
                done += 1
                self.metrics.sessions.evicted("max_session_duration")
        return done

    def _keep_bound(self, now: int, open_n: int) -> int:
        """Past ``max_open_sessions``: complete now the oldest open sessions of the services
        holding the most (``crowded_open_sessions``)."""
        over = open_n - self.config.max_open_sessions
        if over <= 0:
            return 0
        done = 0
        for session_id, last_ns in self.store.crowded_open_sessions(
                min(over, self.config.max_completions_per_check),
                self.config.max_open_sessions):  # counted again: another may be at it
            if self._complete(session_id, last_ns, now, "max_open_sessions"):
                done += 1
                self.metrics.sessions.evicted("max_open_sessions")
        return done

    def _complete(self, session_id: str, last_ns: int, now: int, why: str) -> int:
        claim = next(self._claims)
        stale = now - int(self.config.claim_timeout_s * 1e9)
        if not self.store.claim_session(session_id, last_ns, claim, now, stale):
            return 0  # another process has it, or a turn just came
        kept = self.store.session_record(session_id)
        again = kept is not None and kept.completions > 0
        turns, record, nbytes = self._evaluate(session_id, kept.turns if kept else 0)
        completion = kept.completions if kept is not None else 0
        record.update(completion=completion, completed_by=why, completed_at_unix_nano=now,
                      last_turn_evaluated_at_unix_nano=last_ns)
        owed = now + self._lease_ns if self.events is not None and turns else None
        if not self.store.complete_session(session_id, claim, record, now, owed):
            return 0  # a turn came while it was evaluated: open again, evaluated later
        self.metrics.sessions.completed(record, again)
        if owed is not None:
            last = turns[-1]
            self._export(session_id, completion + 1, record, str(last.get("trace_id")),
                         last_root_span(last))
        if self.judging is not None and turns:
            self.judging.judge_session(record, list(turns), nbytes)
        return 1

    @property
    def _lease_ns(self) -> int:
        return int(self.config.claim_timeout_s * 1e9)

    def _export(self, key: str, completions: int, record: dict[str, Any], trace_id: str,
                span_id: str) -> None:
        """The completion's event, held: owed in the store until the sink is done with it."""
        assert self.events is not None
        held = Held(key, completions, self._sent)
        self.events.export_session(record, trace_id, span_id, (held,))  # raising: still owed
        settle([held])  # the job's own hold: released here when the sink queued none

    def _sent(self, held: list[Held]) -> None:  # on the sink's sender thread (or this one)
        try:
            self.store.session_events_sent([(h.trace_id, h.revision) for h in held])
        except Exception as e:  # still owed: sent again after the lease (at least once)
            log.error("clearing %d delivered session events failed: %s", len(held), e)
            self.metrics.evaluation.failed("session_events", type(e).__name__[:64])

    def _send_owed(self, now: int) -> None:
        """The events owed by completions whose holder's lease is over (it died, or stopped
        before its sink delivered them): each taken by one process, sent from the stored
        record on its last turn's root span."""
        for key, completions, due in self.store.session_events_due(
                now, self.config.max_completions_per_check):
            if not self.store.lease_session_events(key, completions, due, now + self._lease_ns):
                continue  # another process took it
            kept = self.store.session_record(key)
            traces = (kept.record or {}).get("traces") if kept is not None else None
            last = self.store.get(str(traces[-1])) if traces else None
            if kept is None or kept.completions != completions or last is None:
                # completed again (that one owes its own), or the turn is gone: nothing to send
                self.store.session_events_sent([(key, completions)])
                continue
            assert kept.record is not None
            self._export(key, completions, kept.record, str(last.get("trace_id")),
                         last_root_span(last))

    def _evaluate(self, key: str, counted: int = 0) -> tuple[Sequence[dict[str, Any]],
                                                             dict[str, Any], int]:
        """(the turns read in turn order, the complete record of the session stored under
        ``key``, the turns' characters of JSON as stored); an evaluation that raises is stored
        as an error record (never retried forever), counted. A store that cannot read the
        turns now raises: the check fails, the claim stays and is taken over once it times
        out (a state of the store is no verdict on the session). ``counted``: the turns the
        session's row counts, those retention deleted while it went on included (more than
        are stored: the record counts them cut, ``cut_by: retention``)."""
        cfg = self.config
        bodies, stored, _, chars = self.store.session_turns(key, cfg.max_turns,
                                                            cfg.max_turns_chars)
        try:
            turns = in_turn_order(bodies)
            record = evaluate_session(key, turns, cfg, "complete", max(stored, counted))
            if record["counts"]["turns_cut"]:
                record["cut_by"] = ("retention" if stored <= len(turns) else
                                    "max_turns" if len(turns) >= cfg.max_turns
                                    else "max_turns_chars")
            if self.predictor is not None:
                record["prediction"] = session_prediction(
                    self.predictor, record["session_id"], turns, record["findings"])
            return turns, record, chars
        except Exception as e:  # the stage boundary: one session never stops the job
            service, session_id = split_session_key(key)
            bug_line(self._evaluate_log, log, "evaluating session %s of service %s failed",
                     quoted(session_id), quoted(service),
                     counted="failed session evaluations")
            self.metrics.evaluation.failed("session", type(e).__name__[:64])
            return (), {"session_id": session_id, "service": service or None,
                        "status": "complete", "turns": 0,
                        "traces": [], "verdict": None, "findings": [], "counts": {},
                        "error": f"{type(e).__name__}: {e}"[:512]}, 0

    # -- lifecycle ---------------------------------------------------------------------------

    def listening(self) -> None:
        """This process receives from now (``clock``): a last turn before now counts as seen
        now."""
        self._listening_since_ns = int(self.clock() * 1e9)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="otel-eval-sessions",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self.config.check_interval_s):
            self.check()

    def check(self) -> None:
        """``tick()`` now, a failure logged (one line, then a count: a store down fails
        every check; its traceback at DEBUG)."""
        try:
            self.tick()
        except Exception as e:  # a store that refuses now may answer at the next check
            limited_line(self._check_log, log, "session completion check failed: %s: %s",
                         type(e).__name__, e, counted="failed checks", level=logging.ERROR,
                         exc_info=e)

    def shutdown(self, deadline_s: float) -> None:
        """Stop checking; a check in progress finishes its session (within the deadline).
        Open sessions stay open: a stop is no verdict."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline_s))
