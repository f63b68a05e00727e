"""The session completion job (``evaluate.sessions.job``) on a real store, time by hand: a
session completes once after ``sessions.idle_timeout_s``, a late turn re-opens it, a claim
left by a dead process is taken over, two processes on one PostgreSQL store complete each
session once, open sessions past their bound complete oldest first (those of the service
holding the most), and the session's event
lands on the last turn's root span, at least once."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import grpc
from opentelemetry.proto.logs.v1 import logs_pb2
from support.clock import ManualClock
from support.otlp_capture import Capture
from support.poll import poll

from otel_eval.base.results import Evaluation, Verdict
from otel_eval.base.steps import Step, Trajectory
from otel_eval.decode.otlp import attributes_to_dict
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.job import SessionJob
from otel_eval.evaluate.sessions.reader import SessionReader
from otel_eval.store import EvaluationStore, open_store
from otel_eval.store.retention import Retention
from otel_eval.store.sessions import session_key
from otel_eval.telemetry.metrics import Metrics, render

T0 = 1_764_547_200  # seconds
S = 10**9
IDLE_S = 60.0


def _turn(session: str, n: int, at_s: float, tool_args: dict[str, str] | None = None,
          service: str = "shop", agent: str = "helper") -> Evaluation:
    trace_id = f"{abs(hash((session, service))) % 10**8:08x}{n:024x}"
    root = Step(0, f"{n + 1:016x}", None, "agent", "invoke_agent shop", start_ns=1)
    steps = [root]
    if tool_args is not None:
        steps.append(Step(1, f"{n + 100:016x}", root.span_id, "tool", "execute_tool",
                          tool_name="lookup", arguments=tool_args, start_ns=2))
    t = Trajectory(trace_id, "otlp", "complete", steps, service=service, agent=agent,
                   start_ns=int(at_s * S), session_id=session)
    return Evaluation(t, [], Verdict(True, []), evaluated_at_ns=int(at_s * S))


def _k(session_id: str) -> str:
    """The store's key of a session of ``_turn``'s service."""
    return session_key("shop", session_id)


def _sample(m: Metrics, name: str, **labels: str) -> float:
    return m.registry.get_sample_value(name, labels) or 0.0


def _job(store: EvaluationStore, clock: ManualClock, **config: float) -> tuple[SessionJob,
                                                                             Metrics]:
    metrics = Metrics()
    return SessionJob(store, SessionsConfig(**{"idle_timeout_s": IDLE_S, **config}),  # type: ignore[arg-type]
                      metrics, clock=clock), metrics


def test_a_restart_is_no_silence_of_a_conversation(tmp_path: Path) -> None:
    """serve restarted long after a session's last turn: the turns sent meanwhile may still
    be queued upstream or in the spool, so the session is not completed (judged, counted)
    until the new process has itself listened ``idle_timeout_s``. Before, the first tick
    completed it on the turns stored before the stop."""
    store = open_store(str(tmp_path / "s.db"))
    store.put_many([_turn("c1", 0, T0)])
    restart = T0 + 10 * IDLE_S
    clock = ManualClock(restart)
    job = SessionJob(store, SessionsConfig(idle_timeout_s=IDLE_S), Metrics(), clock=clock,
                     listening_since_s=restart)
    assert job.tick() == 0
    store.put_many([_turn("c1", 1, restart + 5)])  # the turn the stop held back
    clock.advance(IDLE_S)
    assert job.tick() == 0  # its last turn came 5 s after the restart
    clock.advance(5.001)
    assert job.tick() == 1
    record = SessionReader(store, job.config).get("c1")
    assert record is not None and (record["status"], record["turns"]) == ("complete", 2)
    store.close()


def test_a_restart_cuts_no_session_at_its_maximum_duration_before_its_turns_are_back(
        tmp_path: Path) -> None:
    """A session that passed ``max_session_duration_s`` while serve was down: before, the
    first check after the restart (the job starts before the spool replay) completed it at
    once on the turns stored before the stop; the turn the replay brought back re-opened it,
    and it was completed again: two completions and two events for one cut. As idleness,
    the duration is cut once the new process has listened ``idle_timeout_s``."""
    store = open_store(str(tmp_path / "s.db"))
    store.put_many([_turn("c1", 0, T0)])
    restart = T0 + 700.0
    clock = ManualClock(restart)
    metrics = Metrics()
    job = SessionJob(store, SessionsConfig(idle_timeout_s=IDLE_S, max_session_duration_s=600.0),
                     metrics, clock=clock, listening_since_s=restart)
    assert job.tick() == 0
    store.put_many([_turn("c1", 1, restart + 30)])  # the turn the replay brings back
    clock.advance(IDLE_S + 1)  # listened idle_timeout_s; the last turn 31 s ago, not idle
    assert job.tick() == 1
    kept = store.session_record(_k("c1"))
    assert kept is not None and (kept.completions, kept.state) == (1, "complete")
    assert kept.record is not None and kept.record["turns"] == 2
    assert kept.record["completed_by"] == "max_session_duration"
    assert _sample(metrics, "otel_eval_sessions_reopened_total", service="shop",
                   agent="helper") == 0
    store.close()


def test_a_session_completes_once_after_its_idle_timeout(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "s.db"))
    store.put_many([_turn("c1", n, T0 + n) for n in range(3)])
    clock = ManualClock(T0 + 2 + IDLE_S - 1)
    job, metrics = _job(store, clock)
    reader = SessionReader(store, job.config)
    assert job.tick() == 0
    assert reader.get("c1")["status"] == "open"  # type: ignore[index]
    assert _sample(metrics, "otel_eval_sessions_open") == 1
    clock.advance(1.001)
    assert job.tick() == 1
    record = reader.get("c1")
    assert record is not None
    assert (record["status"], record["turns"], record["completion"]) == ("complete", 3, 0)
    assert record["completed_by"] == "idle"
    assert job.tick() == 0  # never twice
    assert _sample(metrics, "otel_eval_sessions_completed_total", service="shop",
                   agent="helper") == 1
    assert _sample(metrics, "otel_eval_session_turns_count", service="shop",
                   agent="helper") == 1
    assert _sample(metrics, "otel_eval_session_turns_sum", service="shop",
                   agent="helper") == 3
    body, _ = render(metrics.registry, "application/openmetrics-text")
    last = record["traces"][-1]
    assert any(line.startswith("otel_eval_session_turns_bucket{") and
               f'# {{trace_id="{last}"}} 3' in line for line in body.decode().splitlines())
    assert _sample(metrics, "otel_eval_sessions_open") == 0
    store.close()


def test_a_turn_after_completion_reopens_the_session_and_it_completes_again(
        tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "s.db"))
    store.put_many([_turn("c1", n, T0 + n) for n in range(2)])
    clock = ManualClock(T0 + 1 + IDLE_S + 1)
    job, metrics = _job(store, clock)
    reader = SessionReader(store, job.config)
    assert job.tick() == 1
    store.put_many([_turn("c1", 2, clock.now)])  # the user came back
    record = reader.get("c1")
    assert record is not None
    assert (record["status"], record["turns"], record["completion"]) == ("open", 3, 1)
    store.put_many([_turn("c1", 2, clock.now + 1)])  # re-evaluated turn: no new turn
    assert job.tick() == 0
    clock.advance(IDLE_S + 2)
    assert job.tick() == 1
    record = reader.get("c1")
    assert record is not None
    assert (record["status"], record["turns"], record["completion"]) == ("complete", 3, 1)
    kept = store.session_record(_k("c1"))
    assert kept is not None and (kept.turns, kept.completions) == (3, 2)
    labels = {"service": "shop", "agent": "helper"}
    assert _sample(metrics, "otel_eval_sessions_completed_total", **labels) == 1
    assert _sample(metrics, "otel_eval_sessions_reopened_total", **labels) == 1
    store.close()


def test_a_turn_during_evaluation_keeps_the_session_open(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "s.db"))
    store.put_many([_turn("c1", 0, T0)])
    assert store.claim_session(_k("c1"), T0 * S, "dead:0", (T0 + 100) * S, 0)
    store.put_many([_turn("c1", 1, T0 + 100)])  # a turn while it is being evaluated
    assert not store.complete_session(_k("c1"), "dead:0", {"verdict": None}, (T0 + 101) * S)
    assert store.session_record(_k("c1")).state == "open"  # type: ignore[union-attr]
    store.close()


def test_a_claim_left_by_a_dead_process_is_taken_over_once(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "s.db"))
    store.put_many([_turn("c1", 0, T0)])
    late = T0 + IDLE_S + 1
    # a process claimed it, then was killed before completing it
    assert store.claim_session(_k("c1"), T0 * S, "dead:0", late * S, 0)
    clock = ManualClock(late + 10)
    job, _ = _job(store, clock, claim_timeout_s=300)
    assert job.tick() == 0  # the claim is fresh: its process may be working on it
    clock.advance(300)
    assert job.tick() == 1
    assert job.tick() == 0
    assert not store.complete_session(_k("c1"), "dead:0", {"verdict": None}, late * S)
    assert store.session_record(_k("c1")).state == "complete"  # type: ignore[union-attr]
    store.close()


def test_a_store_that_cannot_read_the_turns_now_makes_no_null_verdict(tmp_path: Path) -> None:
    """A read of the session's turns the store refused at that moment (an I/O error, a
    PostgreSQL connection lost or a statement past its timeout) was taken for the session's
    own failure: the session was completed for good with ``verdict: null`` and an error
    record, its event sent, never evaluated again. Now the check fails (logged), the claim
    stays, and the session is evaluated once its claim times out, with a verdict."""
    store = open_store(str(tmp_path / "s.db"))
    store.put_many([_turn("c1", n, T0 + n) for n in range(2)])
    clock = ManualClock(T0 + 1 + IDLE_S + 1)
    job, _ = _job(store, clock, claim_timeout_s=300)
    read = store.session_turns

    def refused(*_: Any) -> Any:
        raise sqlite3.OperationalError("disk I/O error")

    store.session_turns = refused  # type: ignore[method-assign]
    with contextlib.suppress(sqlite3.OperationalError):  # the check failed: the job's
        job.tick()  # thread logs it and checks again
    kept = store.session_record(_k("c1"))
    assert kept is not None and (kept.state, kept.completions) == ("claimed", 0)
    store.session_turns = read  # type: ignore[method-assign]
    clock.advance(301)
    assert job.tick() == 1
    record = SessionReader(store, job.config).get("c1")
    assert record is not None and record["status"] == "complete"
    assert record["verdict"] is not None and "error" not in record
    store.close()


def test_two_processes_on_one_postgresql_store_complete_each_session_once(
        postgresql_url: str) -> None:
    stores = [open_store(postgresql_url) for _ in range(2)]  # a connection each
    n = 120
    stores[0].put_many([_turn(f"c{i}", t, T0 + t) for i in range(n) for t in range(2)])
    clock = ManualClock(T0 + IDLE_S + 5)
    jobs = [_job(s, clock, max_completions_per_check=7) for s in stores]
    done = [0, 0]

    def run(k: int) -> None:
        for _ in range(60):  # both check at once, many times
            done[k] += jobs[k][0].tick()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(done) == n and all(done), done
    completed = sum(_sample(m, "otel_eval_sessions_completed_total", service="shop",
                            agent="helper") for _, m in jobs)
    assert completed == n
    for i in range(n):
        kept = stores[1].session_record(_k(f"c{i}"))
        assert kept is not None and (kept.state, kept.completions) == ("complete", 1)
    for s in stores:
        s.close()


def test_open_sessions_past_their_bound_complete_oldest_first(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "s.db"))
    store.put_many([_turn(f"c{i}", 0, T0 + i) for i in range(5)])
    job, metrics = _job(store, ManualClock(T0 + 5), max_open_sessions=3)
    assert job.tick() == 2
    assert [store.session_record(_k(f"c{i}")).state for i in range(5)] == [  # type: ignore[union-attr]
        "complete", "complete", "open", "open", "open"]
    assert store.session_record(_k("c0")).record["completed_by"] == (  # type: ignore[union-attr]
        "max_open_sessions")
    assert _sample(metrics, "otel_eval_sessions_evicted_total",
                   reason="max_open_sessions") == 2
    assert store.open_session_count() == 3
    store.close()


class _Interleaved:
    """A store whose first ``session_turns`` (a claimed session being evaluated) runs
    ``between()`` first: another process's whole check, at that point of this one's."""

    def __init__(self, store: EvaluationStore, between: Callable[[], object]) -> None:
        self._store = store
        self._between: Callable[[], object] | None = between

    def session_turns(self, *args: Any, **kwargs: Any) -> Any:
        between, self._between = self._between, None
        if between is not None:
            between()
        return self._store.session_turns(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_two_processes_past_the_bound_complete_only_the_excess(postgresql_url: str) -> None:
    """Four conversations open, the bound 2: the two oldest are to be completed early, no
    more. Process A claims the oldest and, while it evaluates it, process B checks. Before,
    B counted A's claimed session as open (state not complete) but took its victims among
    the open ones only: it completed the next two, and with A's a third conversation still
    going on was cut before its end (non-termination findings, a second completion and
    event at its next turn)."""
    a_store, b_store = open_store(postgresql_url), open_store(postgresql_url)
    a_store.put_many([_turn(f"c{i}", 0, T0 + i) for i in range(4)])
    clock = ManualClock(T0 + 5)
    b_job, b_metrics = _job(b_store, clock, max_open_sessions=2)
    a_job, a_metrics = _job(cast(EvaluationStore, _Interleaved(a_store, b_job.tick)), clock,
                            max_open_sessions=2)
    try:
        assert a_job.tick() == 1
        assert [a_store.session_record(_k(f"c{i}")).state  # type: ignore[union-attr]
                for i in range(4)] == ["complete", "complete", "open", "open"]
        assert sum(_sample(m, "otel_eval_sessions_evicted_total", reason="max_open_sessions")
                   for m in (a_metrics, b_metrics)) == 2
    finally:
        a_store.close()
        b_store.close()


def _one_service_floods(store: EvaluationStore) -> None:
    """A quiet service's conversation, open, its last turn the oldest; then another service
    opens 5 new conversations: past the bound of 3, the flood's own give way, the oldest
    first, and the quiet one stays open (its end not judged). Before, the oldest last turn
    went first, whosever it was: a sender opening new session ids completed every other
    sender's open conversation (non-termination findings on runs still going on)."""
    store.put_many([_turn("quiet", 0, T0, service="shop")])
    store.put_many([_turn(f"f{i}", 0, T0 + 1 + i, service="flood") for i in range(5)])
    job, metrics = _job(store, ManualClock(T0 + 10), max_open_sessions=3)
    assert job.tick() == 3
    kept = store.session_record(session_key("shop", "quiet"))
    assert kept is not None and kept.state == "open"
    assert [store.session_record(session_key("flood", f"f{i}")).state  # type: ignore[union-attr]
            for i in range(5)] == ["complete", "complete", "complete", "open", "open"]
    assert _sample(metrics, "otel_eval_sessions_evicted_total",
                   reason="max_open_sessions") == 3
    assert store.open_session_count() == 3
    store.close()


def test_past_the_bound_the_service_with_the_most_open_sessions_gives_way(
        tmp_path: Path) -> None:
    _one_service_floods(open_store(str(tmp_path / "s.db")))


def test_past_the_bound_the_flooding_service_gives_way_on_postgresql(
        postgresql_url: str) -> None:
    _one_service_floods(open_store(postgresql_url))


def test_a_conversation_that_never_goes_idle_completes_at_its_maximum_duration(
        tmp_path: Path) -> None:
    """A turn every 50 s against a 60 s idle timeout: before, the session never completed,
    so it was never evaluated. It now completes ``max_session_duration_s`` after its first
    turn, then again that long after its first turn since that completion (700 s), never at
    each check in between."""
    store = open_store(str(tmp_path / "s.db"))
    clock = ManualClock(T0)
    job, metrics = _job(store, clock, max_session_duration_s=600.0)
    completed_at = []
    for n in range(30):  # 1,500 s of turns
        store.put_many([_turn("c1", n, clock.now)])
        if job.tick():
            completed_at.append(clock.now - T0)
        clock.advance(50.0)
    assert completed_at == [650.0, 1350.0]
    kept = store.session_record(_k("c1"))
    assert kept is not None and kept.completions == 2 and kept.state == "open"
    assert kept.record is not None and kept.record["completed_by"] == "max_session_duration"
    assert _sample(metrics, "otel_eval_sessions_evicted_total",
                   reason="max_session_duration") == 2
    assert _sample(metrics, "otel_eval_sessions_completed_total", service="shop",
                   agent="helper") == 1
    store.close()



def test_a_conversation_resumed_days_later_completes_at_its_next_idle(tmp_path: Path) -> None:
    """A session completed at idle, resumed two days later: it was open "since its last
    completion", past max_session_duration_s at once, so the next check completed it as an
    eviction, one turn into the resumed conversation. It is open since its first turn after
    the completion and completes at its next idle, as any conversation."""
    _resumed_days_later(open_store(str(tmp_path / "s.db")))


def test_a_conversation_resumed_days_later_on_postgresql(postgresql_url: str) -> None:
    _resumed_days_later(open_store(postgresql_url))


def _resumed_days_later(store: EvaluationStore) -> None:
    clock = ManualClock(T0)
    job, metrics = _job(store, clock, max_session_duration_s=3600.0)
    store.put_many([_turn("c1", 0, clock.now)])
    clock.advance(IDLE_S + 1)
    assert job.tick() == 1
    clock.advance(2 * 86400.0)
    store.put_many([_turn("c1", 1, clock.now)])
    clock.advance(10.0)
    assert job.tick() == 0  # neither idle nor open an hour
    store.put_many([_turn("c1", 2, clock.now)])
    clock.advance(IDLE_S + 1)
    assert job.tick() == 1
    kept = store.session_record(_k("c1"))
    assert kept is not None and kept.completions == 2 and kept.state == "complete"
    assert kept.record is not None and kept.record["completed_by"] == "idle"
    assert kept.record["turns"] == 3
    assert _sample(metrics, "otel_eval_sessions_evicted_total",
                   reason="max_session_duration") == 0
    store.close()

def _records(ds: Capture) -> list[logs_pb2.LogRecord]:
    return [r for req in ds.logs for rl in req.resource_logs for sl in rl.scope_logs
            for r in sl.log_records]


def test_the_session_event_is_on_the_last_turns_root_span(tmp_path: Path) -> None:
    from otel_eval.outputs.config import ExportConfig
    from otel_eval.outputs.events import EvaluationEvents

    store = open_store(str(tmp_path / "s.db"))
    same = {"reservation_id": "ZFA04Y"}
    turns = [_turn("c1", n, T0 + n, same) for n in range(3)]
    store.put_many(turns)
    with Capture() as ds:
        metrics = Metrics()
        events = EvaluationEvents(ExportConfig(events_endpoint=f"127.0.0.1:{ds.port}"),
                                  metrics, evaluator_version="9.9.9")
        events.start()
        job = SessionJob(store, SessionsConfig(idle_timeout_s=IDLE_S), metrics,
                         events=events, clock=ManualClock(T0 + 100))
        assert job.tick() == 1
        events.shutdown(5.0)
        [rec] = _records(ds)
    assert store.session_events_due(1 << 62, 10) == []  # delivered: owed no more
    last = turns[-1].trajectory
    assert (rec.trace_id.hex(), rec.span_id.hex()) == (last.trace_id, last.steps[0].span_id)
    attrs = attributes_to_dict(rec.attributes)
    assert attrs["gen_ai.evaluation.name"] == "otel_eval.session.verdict"
    assert attrs["gen_ai.conversation.id"] == "c1"
    assert (attrs["gen_ai.evaluation.score.label"], attrs["otel_eval.session.turns"]) == (
        "fail", 3)
    assert attrs["otel_eval.session.findings"] == "loop.repeated_across_turns"
    assert _sample(metrics, "otel_eval_session_findings_total", service="shop",
                   agent="helper", detector="loop", kind="repeated_across_turns") == 1
    assert _sample(metrics, "otel_eval_sessions_failed_total", service="shop",
                   agent="helper") == 1
    store.close()


def test_a_session_event_the_stop_could_not_deliver_goes_out_after_the_lease(
        tmp_path: Path) -> None:
    """The collector refuses the event, and the process stops (its sink drops it
    ``shutdown``). Before, the event was lost: the store kept the record and nothing sent
    it again. Now the completion owes it in the store: once the first process's lease
    (``claim_timeout_s``) is over, another process sends it from the stored record, on the
    last turn's root span, once."""
    from otel_eval.outputs.config import ExportConfig
    from otel_eval.outputs.events import EvaluationEvents

    store = open_store(str(tmp_path / "s.db"))
    turns = [_turn("c9", n, T0 + n) for n in range(2)]
    store.put_many(turns)
    config = SessionsConfig(idle_timeout_s=IDLE_S, claim_timeout_s=300.0)

    def serving(ds: Capture, now_s: float) -> tuple[SessionJob, EvaluationEvents]:
        events = EvaluationEvents(ExportConfig(events_endpoint=f"127.0.0.1:{ds.port}"),
                                  Metrics(), evaluator_version="9.9.9")
        events.start()
        return SessionJob(store, config, Metrics(), events=events,
                          clock=ManualClock(now_s)), events

    with Capture() as ds:
        ds.fail_next = [grpc.StatusCode.UNAVAILABLE] * 10_000
        first, events = serving(ds, T0 + 100)
        assert first.tick() == 1
        poll(lambda: ds.failed, "the event's first delivery to fail", interval_s=0.02)
        events.shutdown(0.2)
        assert _records(ds) == []
        assert [k for k, _, _ in store.session_events_due(1 << 62, 10)] == [_k("c9")]
        ds.fail_next = []
        early, events = serving(ds, T0 + 350)  # the first process's lease still runs
        assert early.tick() == 0
        events.shutdown(5.0)
        assert _records(ds) == []
        later, events = serving(ds, T0 + 401)
        assert later.tick() == 0  # nothing completed again: the owed event only
        events.shutdown(5.0)
        [rec] = _records(ds)
        assert store.session_events_due(1 << 62, 10) == []
        again, events = serving(ds, T0 + 2000)
        again.tick()
        events.shutdown(5.0)
        assert len(_records(ds)) == 1  # sent once
    last = turns[-1].trajectory
    assert (rec.trace_id.hex(), rec.span_id.hex()) == (last.trace_id, last.steps[0].span_id)
    assert attributes_to_dict(rec.attributes)["gen_ai.conversation.id"] == "c9"
    store.close()


def test_another_services_turns_never_join_a_conversation_of_the_same_id(
        tmp_path: Path) -> None:
    """The store audit's scenario (repro r4): another service (or a sender guessing ids)
    sends three looping turns under the conversation id "1" a victim also uses (LangGraph's
    example thread_id), dated before the victim's two clean turns. Before, they made one
    session: the loop failed the victim's conversation, the record took the service and
    agent of the last turn by start time (the victim's), so the finding was counted on the
    victim's (service, agent) and paged its owners."""
    from otel_eval.outputs.config import ExportConfig
    from otel_eval.outputs.events import EvaluationEvents

    store = open_store(str(tmp_path / "s.db"))
    same = {"order": "42"}
    theirs = [_turn("1", n, T0 + n, same, service="attacker", agent="evil") for n in range(3)]
    mine = [_turn("1", n, T0 + 100 + n, service="shop", agent="support-bot") for n in range(2)]
    store.put_many([*theirs, *mine])
    reader = SessionReader(store, SessionsConfig(idle_timeout_s=IDLE_S))
    with Capture() as ds:
        metrics = Metrics()
        events = EvaluationEvents(ExportConfig(events_endpoint=f"127.0.0.1:{ds.port}"),
                                  metrics, evaluator_version="9.9.9")
        events.start()
        job = SessionJob(store, SessionsConfig(idle_timeout_s=IDLE_S), metrics,
                         events=events, clock=ManualClock(T0 + 1000))
        assert job.tick() == 2
        events.shutdown(5.0)
        on_span = {r.trace_id.hex(): attributes_to_dict(r.attributes) for r in _records(ds)}
    victim = reader.get("1", "shop")
    assert victim is not None and victim["status"] == "complete"
    assert (victim["service"], victim["agent"], victim["turns"]) == ("shop", "support-bot", 2)
    assert victim["findings"] == [] and victim["verdict"]["passed"] is True
    assert victim["traces"] == [e.trace_id for e in mine]
    other = reader.get("1", "attacker")
    assert other is not None and (other["service"], other["agent"]) == ("attacker", "evil")
    assert [(f["detector"], f["kind"]) for f in other["findings"]] == [
        ("loop", "repeated_across_turns")]
    loops = {"detector": "loop", "kind": "repeated_across_turns"}
    assert _sample(metrics, "otel_eval_session_findings_total", service="shop",
                   agent="support-bot", **loops) == 0
    assert _sample(metrics, "otel_eval_sessions_failed_total", service="shop",
                   agent="support-bot") == 0
    assert _sample(metrics, "otel_eval_sessions_completed_total", service="shop",
                   agent="support-bot") == 1
    assert _sample(metrics, "otel_eval_session_findings_total", service="attacker",
                   agent="evil", **loops) == 1
    assert _sample(metrics, "otel_eval_sessions_failed_total", service="attacker",
                   agent="evil") == 1
    # each verdict on its own service's last turn, under the conversation id users know
    assert {t: (a["gen_ai.conversation.id"], a["gen_ai.evaluation.score.label"])
            for t, a in on_span.items()} == {mine[-1].trace_id: ("1", "pass"),
                                             theirs[-1].trace_id: ("1", "fail")}
    store.close()


def test_the_session_event_span_is_the_turns_run_span_whatever_the_clocks() -> None:
    """``last_root_span`` is ``model.run_span`` read from a stored turn: the root (no
    parent) even when a span whose parent never arrived starts before it (its service's
    clock behind the root's), as the turn's own events are on the root."""
    from otel_eval.base.model import Span, run_span_id
    from otel_eval.evaluate.sessions.job import last_root_span

    tid = "ab" * 16
    spans = [Span(tid, "1" * 16, None, "agent", 100 * 10**9, 110 * 10**9),
             Span(tid, "2" * 16, "1" * 16, "chat", 101 * 10**9, 102 * 10**9),
             # a downstream service's span, its client span lost, its clock 5 s behind
             Span(tid, "3" * 16, "9" * 16, "tool", 98 * 10**9, 99 * 10**9)]
    turn = {"trace_id": tid, "steps": [
        {"span_id": s.span_id, "parent_span_id": s.parent_span_id,
         "start_time_unix_nano": s.start_ns, "end_time_unix_nano": s.end_ns} for s in spans]}
    assert last_root_span(turn) == run_span_id(spans) == "1" * 16


def test_retention_of_a_going_conversations_old_turns_is_said_in_its_record(
        tmp_path: Path) -> None:
    """Retention deletes a conversation's turns older than ``store.retention_days`` even
    while it goes on (its last turn newer: its row stays). Before, its next completion was
    judged on the turns kept as if they were all it had (``turns`` 2 of 3, nothing cut):
    the record says the turns it had (``counts.turns``), those not read (``turns_cut``),
    ``cut_by: retention``, counted in ``session_turns_dropped_total{reason="retention"}``."""
    _retention_cut(open_store(str(tmp_path / "s.db")))


def test_retention_of_a_going_conversations_old_turns_on_postgresql(
        postgresql_url: str) -> None:
    _retention_cut(open_store(postgresql_url))


def _retention_cut(store: EvaluationStore) -> None:
    day = 86400.0
    store.put_many([_turn("c1", 0, T0), _turn("c1", 1, T0 + 2 * day),
                    _turn("c1", 2, T0 + 2 * day + 1)])
    assert Retention(store, 1.0).apply(int((T0 + 2 * day + 2) * S)) == 1
    clock = ManualClock(T0 + 2 * day + 2 + IDLE_S)
    job, metrics = _job(store, clock, session_turns=2)
    going = SessionReader(store, job.config).get("c1")
    assert going is not None and (going["status"], going["turns"]) == ("open", 3)
    assert job.tick() == 1
    kept = store.session_record(_k("c1"))
    assert kept is not None and kept.record is not None
    record = kept.record
    assert (record["turns"], record["counts"]["turns_read"],
            record["counts"]["turns_cut"]) == (3, 2, 1)
    assert record["cut_by"] == "retention"
    assert any(f["kind"] == "session_turns" for f in record["findings"])
    assert _sample(metrics, "otel_eval_session_turns_dropped_total", reason="retention") == 1
    store.close()


def test_a_session_completed_again_says_which_completion_its_event_is(tmp_path: Path) -> None:
    """docs/api.md: a session completed again has ``completion`` one more. Its event carried
    no such number, so a consumer of the events told the two verdicts of one conversation
    apart only by turn count and time; it carries ``otel_eval.session.completion`` as the
    API names it."""
    from otel_eval.outputs.config import ExportConfig
    from otel_eval.outputs.events import EvaluationEvents

    store = open_store(str(tmp_path / "s.db"))
    store.put_many([_turn("c1", n, T0 + n) for n in range(2)])
    clock = ManualClock(T0 + 1 + IDLE_S + 1)
    with Capture() as ds:
        metrics = Metrics()
        events = EvaluationEvents(ExportConfig(events_endpoint=f"127.0.0.1:{ds.port}"),
                                  metrics, evaluator_version="9.9.9")
        events.start()
        job = SessionJob(store, SessionsConfig(idle_timeout_s=IDLE_S), metrics,
                         events=events, clock=clock)
        assert job.tick() == 1
        store.put_many([_turn("c1", 2, clock.now)])  # the user came back
        clock.advance(IDLE_S + 2)
        assert job.tick() == 1
        events.shutdown(5.0)
        first, second = _records(ds)
    record = SessionReader(store, job.config).get("c1")
    assert record is not None and record["completion"] == 1
    numbers = [attributes_to_dict(r.attributes).get("otel_eval.session.completion")
               for r in (first, second)]
    assert numbers == [0, 1]
    store.close()


def test_a_poller_reads_each_completion_by_its_counted_window(tmp_path: Path) -> None:
    """docs/api.md "Polling for conversations": ``since`` goes by the last turn, which a
    completion does not move, so a poll from the previous poll's time never sees the session
    complete; the counted window returns each first completion once; a later turn re-opens
    the session and ``since`` returns it again, read by id until ``completion`` is one more."""
    from otel_eval.store.sessions import SessionQuery

    store = open_store(str(tmp_path / "s.db"))
    clock = ManualClock(T0 + 10)
    job, _ = _job(store, clock, check_interval_s=10.0)
    reader = SessionReader(store, job.config)
    margin_s = 60.0  # the clocks' difference

    def listed(**window: float) -> list[tuple[str, int | None]]:
        params = {k: [str(v)] for k, v in window.items()}
        return [(r["status"], r.get("completion")) for r in reader.page(
            SessionQuery.from_params({**params, "limit": ["10"]}))["sessions"]]

    store.put_many([_turn("c1", n, T0 + n) for n in range(2)])
    first_poll = clock.now
    assert listed(since=T0 - 100) == [("open", None)]
    counted_until = clock.now - margin_s  # nothing completed yet
    assert listed(counted_since=T0 - 100, counted_until=counted_until) == []
    clock.advance(IDLE_S + 1)
    assert job.tick() == 1
    clock.advance(margin_s + 1)
    assert listed(since=first_poll) == []  # the gap of a poller on since
    previous, counted_until = counted_until, clock.now - margin_s
    assert listed(counted_since=previous, counted_until=counted_until) == [("complete", 0)]
    second_poll = clock.now
    store.put_many([_turn("c1", 2, clock.now)])  # the user came back: re-opened
    assert listed(since=second_poll) == [("open", 1)]
    clock.advance(IDLE_S + 1)
    assert job.tick() == 1
    clock.advance(margin_s + 1)
    previous, counted_until = counted_until, clock.now - margin_s
    assert listed(counted_since=previous, counted_until=counted_until) == []  # counted once
    assert listed(since=second_poll) == [("complete", 1)]  # read again: completion one more
    store.close()


def test_serve_listens_from_its_receivers_opening_not_its_construction(
        tmp_path: Path) -> None:
    """serve's job counted a restart's last turns as seen from when the ``Service`` was
    constructed, on the wall clock rather than the job's own: a start that took long (a
    store migrated at an upgrade, a spool replayed, another serve's lock awaited) counted as
    listening, so a conversation whose later turns were still queued upstream was
    completed (judged, its event sent) at the first check once the receivers opened. The
    job's clock here says the start took an hour; the last turn was 100 s before it."""
    from prometheus_client import CollectorRegistry

    from otel_eval.app.config import Config, replace
    from otel_eval.app.service import Service

    cfg = replace(Config(), **{
        "receiver.grpc_endpoint": "127.0.0.1:0", "receiver.http_endpoint": "127.0.0.1:0",
        "admin.endpoint": "127.0.0.1:0", "store.path": str(tmp_path / "e.db"),
        "evaluation.workers": 1, "sessions.idle_timeout_s": IDLE_S})
    svc = Service(cfg, registry=CollectorRegistry())
    started = time.time() + 3600  # the clock the job reads, an hour after the constructor
    svc.session_job.clock = ManualClock(started)
    svc.start(worker=False)  # the job ticked by hand
    try:
        svc.store.put_many([_turn("c1", 0, started - 100)])
        assert svc.session_job.tick(started + 1) == 0  # listening for 1 s: not idle yet
        assert svc.session_job.tick(started + IDLE_S) == 1
    finally:
        svc.shutdown(deadline_s=5)
