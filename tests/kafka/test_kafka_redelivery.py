"""A Kafka record redelivered while its trace is released but not yet stored (its partition
revoked and assigned back to the same worker) is reported stored only once that trace is.

Every span of such a record is refused (``duplicate_span`` within the reopen window,
``late`` after it): before, the record's barrier armed with no trace, ``on_stored`` fired at
once, the consumer committed the offset, and a kill -9 before the store lost the trace (the
first delivery's waiter belongs to the old assignment and is ignored). Engine level, no
broker: the stage below holds what it is handed (a worker backlog) until the test finishes it,
with the outcome the test names.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka_traces import requests_for, trace_ids
from prometheus_client import CollectorRegistry
from support.clock import ManualClock

from otel_eval.app.config import Config, replace
from otel_eval.assemble.engine import Engine
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.base.model import Span
from otel_eval.decode import otlp
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.handoff import ALREADY_EVALUATED, Done, Job, Outcome
from otel_eval.evaluate.stage import UNSTORABLE, InProcess
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics

GRACE_S = 5.0


class HeldStage:
    """Holds the jobs it is handed (a worker's backlog) until ``store`` or ``answer``."""

    def __init__(self, inner: InProcess) -> None:
        self.inner = inner
        self.held: list[tuple[list[Job], Done]] = []

    def run(self, jobs: list[Job], done: Done) -> None:
        self.held.append((jobs, done))

    def store(self) -> None:
        """Evaluate and store what is held, as a worker would."""
        held, self.held = self.held, []
        for jobs, done in held:
            self.inner.run(jobs, done)

    def answer(self, outcome: Outcome) -> None:
        held, self.held = self.held, []
        for jobs, done in held:
            done(jobs, [outcome for _ in jobs])

    def drain(self, deadline_s: float) -> bool:
        return not self.held

    @property
    def healthy(self) -> bool:
        return True


class Redelivery:
    """An engine on a hand-driven clock, its stage holding what it is handed, and one
    trace's record (all its spans, root ended) that can be delivered again."""

    def __init__(self, tmp_path: Path, **changes: object) -> None:
        self.clock = ManualClock()
        cfg = replace(Config(), **{"assembly.grace_s": GRACE_S, **changes})
        self.store = Store(str(tmp_path / "s.db"))
        self.stage = HeldStage(InProcess(Evaluator(cfg), self.store))
        self.engine = Engine(self.stage, StoreHealth(self.store.location, clock=self.clock),
                             Metrics(CollectorRegistry()), assembly=cfg.assembly,
                             clock=self.clock)
        [self.tid] = trace_ids(1)
        self.calls: list[str] = []

    def record(self) -> list[Span]:
        """The record's spans, decoded afresh (as a fetch of it would)."""
        return [s for req in requests_for([self.tid], 3, 1)
                for s in otlp.decode_request(req).spans]

    def deliver(self, name: str) -> dict[str, int]:
        adm = self.engine.submit(self.record(), source="kafka",
                                 on_stored=lambda: self.calls.append(name))
        assert adm.throttled is None
        return dict(adm.rejected)

    def release(self) -> None:
        """Past grace: released and handed to the stage, not stored."""
        self.clock.advance(GRACE_S + 1)
        assert self.engine.tick() == 1
        self.engine.process()
        assert self.stage.held and self.store.get(self.tid) is None


def test_a_record_delivered_again_while_its_trace_is_unstored_waits_for_the_store(
        tmp_path: Path) -> None:
    r = Redelivery(tmp_path)
    r.deliver("first")
    r.release()
    assert r.engine.hand_over({r.tid}) == 0  # revoked: released already, nothing to forget
    assert r.deliver("again") == {"duplicate_span": 3}
    assert r.calls == []  # before: ["again"] (its offset committed, nothing stored)
    r.stage.store()
    assert r.store.get(r.tid) is not None
    assert sorted(r.calls) == ["again", "first"]


def test_a_record_delivered_again_after_the_reopen_window_waits_for_the_store(
        tmp_path: Path) -> None:
    # nothing kept for re-opening: the released trace's spans are refused as `late`
    r = Redelivery(tmp_path, **{"assembly.max_released_traces": 0})
    r.deliver("first")
    r.release()
    assert r.deliver("again") == {"late": 3}
    assert r.calls == []
    r.stage.store()
    assert sorted(r.calls) == ["again", "first"]


@pytest.mark.parametrize("outcome", [
    Outcome(None, False, skipped=ALREADY_EVALUATED),  # the store holds this content
    Outcome(None, False, skipped=UNSTORABLE),  # dropped, counted: done like its first record
])
def test_a_redelivered_record_is_done_when_its_trace_is_done_without_a_new_row(
        tmp_path: Path, outcome: Outcome) -> None:
    r = Redelivery(tmp_path)
    r.deliver("first")
    r.release()
    r.deliver("again")
    assert r.calls == []
    r.stage.answer(outcome)
    assert sorted(r.calls) == ["again", "first"]


def test_a_store_refusal_keeps_a_redelivered_record_waiting(tmp_path: Path) -> None:
    r = Redelivery(tmp_path)
    r.deliver("first")
    r.release()
    r.deliver("again")
    r.stage.answer(Outcome(None, False, unstored="disk_full"))  # kept for a retry
    assert r.calls == [] and r.engine.finishing.queued_traces() == 1
    r.clock.advance(3600)  # past the store's back-off
    assert r.engine.process() == 1
    r.stage.store()
    assert sorted(r.calls) == ["again", "first"]


def test_a_stop_that_leaves_the_trace_unstored_reports_neither_delivery_stored(
        tmp_path: Path) -> None:
    r = Redelivery(tmp_path)
    r.deliver("first")
    r.release()
    r.deliver("again")
    r.engine.shutdown(0.0)  # the stage still holds the trace: stays unstored
    assert r.engine.stopped and r.store.get(r.tid) is None
    assert r.calls == []  # the consumer commits neither record; the next owner replays it


def test_a_record_delivered_again_after_its_trace_was_stored_is_done_at_once(
        tmp_path: Path) -> None:
    r = Redelivery(tmp_path)
    r.deliver("first")
    r.release()
    r.stage.store()
    assert r.calls == ["first"]
    r.deliver("again")  # nothing left to wait for: the trace is durable
    assert r.calls == ["first", "again"]
