"""Self-metrics of completed sessions (conversations), from the session completion job
(``evaluate.sessions.job``), on the per-trace label budget (``labels.SeriesCap``: the same
(service, agent) pairs as the trace metrics, so sessions / traces ratios hold):

    otel_eval_sessions_completed_total{service,agent}       sessions completed (first time)
    otel_eval_sessions_failed_total{service,agent}          of them, verdict failed
    otel_eval_session_findings_total{service,agent,detector,kind}   session findings: loop
                 (repeated_across_turns), non_termination (pending_tool_call,
                 unanswered_question), repeated_request, budget
    otel_eval_session_turns{service,agent}                  histogram, turns per session;
                 exemplar: the trace id of the last turn
    otel_eval_sessions_reopened_total{service,agent}        a turn came after completion: the
                 session was completed (evaluated, stored) again
    otel_eval_sessions_evicted_total{reason}                max_open_sessions: completed
                 before their idle timeout, the oldest of the services holding the most
                 first, to keep the bound;
                 max_session_duration: open that long without going idle
    otel_eval_session_turns_dropped_total{reason}           turns left out of a completed
                 session's evaluation: max_turns | max_turns_chars | retention (turns
                 store.retention_days deleted while the conversation went on)
    otel_eval_sessions_open                                 gauge: open or claimed sessions
                 in the store (the fleet's, with PostgreSQL), at the last check

As with traces, a session completed again after a late turn counts only
``sessions_reopened`` (and the turns dropped); every other counter is of first completions,
so ``sessions_failed <= sessions_completed`` holds per pair.
"""

from __future__ import annotations

from typing import Any

from otel_eval.telemetry.declare import Declarer
from otel_eval.telemetry.labels import SeriesCap

TURN_BUCKETS = (1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 500)
EVICT_REASONS = ("max_open_sessions", "max_session_duration")
DROP_REASONS = ("max_turns", "max_turns_chars", "retention")


class SessionMetrics:
    def __init__(self, d: Declarer, cap: SeriesCap) -> None:
        self.cap = cap
        c, sa = d.counter, ("service", "agent")
        self.c_completed = c("sessions_completed", "Sessions (conversations) completed and "
                             "evaluated, first completion.", sa)
        self.c_failed = c("sessions_failed", "Completed sessions whose verdict failed.", sa)
        self.c_findings = c("session_findings", "Session findings (across turns), by "
                            "detector and kind.", [*sa, "detector", "kind"])
        self.h_turns = d.histogram("session_turns", "Turns per completed session.", sa,
                                   TURN_BUCKETS)
        self.c_reopened = c("sessions_reopened", "Sessions completed again: a turn came "
                            "after their completion.", sa)
        self.c_evicted = c("sessions_evicted", "Sessions completed before their idle "
                           "timeout to keep a bound, by reason.", ["reason"])
        self.c_dropped = c("session_turns_dropped", "Turns left out of a completed session's "
                           "evaluation, by bound.", ["reason"])
        for reason in EVICT_REASONS:
            self.c_evicted.labels(reason)
        for reason in DROP_REASONS:
            self.c_dropped.labels(reason)
        self.g_open = d.gauge("sessions_open", "Open (or claimed) sessions in the store.")

    def completed(self, record: dict[str, Any], again: bool) -> None:
        """Every session metric of one stored session record."""
        service, agent = self.cap.pair(record.get("service"), record.get("agent"))
        counts = record.get("counts") or {}
        cut = int(counts.get("turns_cut") or 0)
        if cut:
            self.c_dropped.labels(record.get("cut_by") or "max_turns").inc(cut)
        if again:
            self.cap.series(self.c_reopened, service, agent).inc()
            return
        traces = record.get("traces") or []
        exemplar = {"trace_id": str(traces[-1])} if traces and traces[-1] else None
        self.cap.series(self.c_completed, service, agent).inc()
        verdict = record.get("verdict") or {}
        if verdict.get("passed") is False:
            self.cap.series(self.c_failed, service, agent).inc(exemplar=exemplar)
        for f in record.get("findings") or ():
            self.cap.series(self.c_findings, service, agent, str(f.get("detector"))[:64],
                            str(f.get("kind"))[:64]).inc(exemplar=exemplar)
        self.cap.series(self.h_turns, service, agent).observe(
            int(record.get("turns") or 0), exemplar)

    def evicted(self, reason: str, n: int = 1) -> None:
        self.c_evicted.labels(reason).inc(n)

    def open_sessions(self, n: int) -> None:
        self.g_open.set(n)
