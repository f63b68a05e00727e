"""The session job's failures in the log: a session whose evaluation raises (a bug every
conversation of a shape hits) wrote a traceback per session, and a check the store refuses
(down, locked) a traceback per check, every ``check_interval_s`` for as long as it is down.
Each is one line (the bug's with its traceback), then, after ``LOG_INTERVAL_S``, a line
with how many it left out meanwhile; each failed session is still stored as an error
record and counted."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from support.clock import ManualClock

from otel_eval.base.results import Evaluation, Verdict
from otel_eval.base.steps import Step, Trajectory
from otel_eval.evaluate.sessions import job as job_module
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.job import LOG_INTERVAL_S, SessionJob
from otel_eval.evaluate.sessions.reader import SessionReader
from otel_eval.store import open_store
from otel_eval.telemetry.metrics import Metrics

T0 = 1_764_547_200  # seconds
IDLE_S = 60.0


def _turn(session: str, at_s: float) -> Evaluation:
    trace_id = f"{abs(hash(session)) % 10**8:08x}{1:024x}"
    root = Step(0, f"{1:016x}", None, "agent", "invoke_agent shop", start_ns=1)
    t = Trajectory(trace_id, "otlp", "complete", [root], service="shop", agent="helper",
                   start_ns=int(at_s * 1e9), session_id=session)
    return Evaluation(t, [], Verdict(True, []), evaluated_at_ns=int(at_s * 1e9))


def _lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "otel_eval.evaluate.sessions.job"]


def test_sessions_whose_evaluation_raises_are_one_traceback_then_a_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    def broken(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise KeyError("a bug every session hits")

    monkeypatch.setattr(job_module, "evaluate_session", broken)
    store = open_store(str(tmp_path / "s.db"))
    store.put_many([_turn(f"c{n}", T0 + n) for n in range(11)])
    clock, log_clock = ManualClock(T0 + 10 + IDLE_S + 1), ManualClock()
    job = SessionJob(store, SessionsConfig(idle_timeout_s=IDLE_S), Metrics(), clock=clock,
                     log_clock=log_clock)
    try:
        with caplog.at_level(logging.WARNING, logger="otel_eval.evaluate.sessions.job"):
            assert job.tick() == 11  # each completed with an error record
            log_clock.advance(LOG_INTERVAL_S)
            store.put_many([_turn("c11", clock.advance(1))])
            clock.advance(IDLE_S + 1)
            assert job.tick() == 1
        record = SessionReader(store, job.config).get("c3")
    finally:
        store.close()
    assert record is not None and record["error"].startswith("KeyError"), record
    got = _lines(caplog)
    assert [r.getMessage().split('"')[0] for r in got] == ["evaluating session "] * 2, got
    assert got[0].exc_info and not got[1].exc_info  # one traceback
    assert got[1].getMessage().endswith(
        "(10 more failed session evaluations not logged since the last)"), got[1].getMessage()


def test_checks_the_store_refuses_are_one_line_then_a_count(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = open_store(str(tmp_path / "s.db"))

    def refused() -> int:
        raise OSError("database is locked")

    store.open_session_count = refused  # type: ignore[method-assign]
    log_clock = ManualClock()
    job = SessionJob(store, SessionsConfig(idle_timeout_s=IDLE_S, check_interval_s=0.5),
                     Metrics(), clock=ManualClock(T0), log_clock=log_clock)
    try:
        with caplog.at_level(logging.WARNING, logger="otel_eval.evaluate.sessions.job"):
            for _ in range(20):  # ten seconds of checks every half second
                job.check()
            log_clock.advance(LOG_INTERVAL_S)
            job.check()
    finally:
        store.close()
    got = [r.getMessage() for r in _lines(caplog)]
    assert got == ["session completion check failed: OSError: database is locked",
                   "session completion check failed: OSError: database is locked "
                   "(19 more failed checks not logged since the last)"], got
