"""Stage: evaluate, known outcomes sent after the fact (``POST /v1/feedback``).

    outcome -> [store.get -> Evaluator.with_outcome -> store.put_feedback_and_verdict
               (only onto the revision read; re-read and again when it was re-evaluated)]
            -> the predictor's rolling AUC (PredictionMetrics.labelled; a prediction of the
               serving model only: one stored before a model swap enters no window)
            -> ``recorded()``: the cached calibration report is stale (GET /v1/calibration
               and the agreement gauges count the outcome at their next read)
            -> ``published.publish_stored(body, evaluated_at_ns)``: the stored object, its
               verdict re-judged (read back and handed over under ``published.ordered()``),
               to the Kafka results topic (``outputs.kafka``), the last record of its key

That record is owed in the store (``results_owed``, migration 21) from before the verdict's
write until Kafka delivered it (or dropped it for good, counted): the publisher's queue is
memory, so a kill -9 after the 200 and before the delivery would lose the re-judged verdict
from the topic. A start publishes what is owed again (``replay``), as the results API returns
it then (at least once; the record's headers order it among its key's).

The one writer of the feedback table and of a stored row's findings and verdict after the
fact (the engine applies a stored outcome itself when it re-evaluates). The outcome's row and
the verdict re-judged with it are one write: of two outcomes sent for a trace at once, the
last to commit wrote both, so the verdict never contradicts the feedback table (which
calibration, the engine and training read). Runs on the admin server's request threads,
never on the event loop.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from otel_eval.base.component import Held, settle
from otel_eval.base.loglimit import LogLimiter, limited_line
from otel_eval.base.printable import as_json
from otel_eval.evaluate.evaluator import Evaluator, normalize_outcome
from otel_eval.outputs.deps import JudgedResults
from otel_eval.store.base import EvaluationStore
from otel_eval.telemetry.prediction import PredictionMetrics

log = logging.getLogger(__name__)

# Re-reads when the trace was re-evaluated between reading and writing its verdict.
FEEDBACK_ATTEMPTS = 5
# Seconds between two lines of a store that cannot clear delivered records' debts.
PAID_LOG_INTERVAL_S = 10.0


class Feedback:
    def __init__(self, store: EvaluationStore, evaluator: Evaluator,
                 metrics: PredictionMetrics, *,
                 wall_clock_ns: Callable[[], int] = time.time_ns,
                 recorded: Callable[[], None] = lambda: None,
                 published: JudgedResults | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``published``: where the stored object goes again once the outcome re-judged its
        verdict (the Kafka results topic, when on: ``publish_stored``). ``clock``: the time
        of the limit on the lines of a store that cannot clear the debts."""
        self.store = store
        self._published = published
        self.evaluator = evaluator
        self.metrics = metrics
        self._recorded = recorded
        self._wall_clock_ns = wall_clock_ns
        # where a delivered record's debt is paid: off the publisher's loop (a store call)
        self._payer: ThreadPoolExecutor | None = None
        # a store down fails every outcome's debt: one line, then a count
        self._paid_log = LogLimiter(PAID_LOG_INTERVAL_S, clock)

    def record(self, trace_id: str, outcome_value: object) -> dict[str, Any] | None:
        """Record a known outcome for an evaluated trace and re-judge its stored verdict.

        A trace not evaluated yet gets None (404) and nothing is recorded: an outcome sent
        ahead of its trace would decide the verdict of spans nobody has seen (anyone holding
        the id from a ``traceparent`` could pre-empt it). Send it once the trace is stored.
        """
        outcome = normalize_outcome(outcome_value)
        if outcome is None:
            # the API's 400 says "outcome: " before it; the value as the sender wrote it
            # (JSON: null, "maybe", 0.5), bounded
            raise ValueError("expected success or failure (or 1 or 0, true or false), "
                             f"got {as_json(outcome_value)}")
        store = self.store
        written = False
        owed: int | None = None  # when the record was owed (``results_owed``)
        for _ in range(FEEDBACK_ATTEMPTS):
            # the evaluation's time before its body: a replay (by another worker, or after a
            # restart) evaluates a trace at the same revision again, and the write lands only
            # on the evaluation read (a body newer than the time read is refused, read again)
            stamp = store.stamp(trace_id)
            body = store.get(trace_id) if stamp is not None else None
            if stamp is None or body is None:
                if owed is not None:
                    store.results_paid(trace_id, owed)
                return None  # nothing recorded: see the docstring
            if owed is None and self._published is not None:  # before the verdict's write
                owed = self._wall_clock_ns()
                store.owe_results(trace_id, owed)
            updated = self.evaluator.with_outcome(body, outcome)
            if store.put_feedback_and_verdict(trace_id, body["revision"], outcome,
                                              self._wall_clock_ns(), updated["findings"],
                                              updated["verdict"], evaluated_at_ns=stamp[1]):
                written = True
                break
            # re-evaluated since it was read: nothing written, read the new revision
        else:  # re-evaluated at every attempt: keep the outcome, the engine's next
            # re-evaluation of the trace applies it
            store.put_feedback(trace_id, outcome, self._wall_clock_ns())
        self._recorded()  # the outcome's row is written: the calibration report is stale
        if written and self._published is not None and owed is not None:  # the verdict
            got = self._publish(trace_id, owed)  # changed: what the results API returns now
        else:
            if owed is not None:  # nothing re-judged: no record owed
                store.results_paid(trace_id, owed)
            got = store.get_versioned(trace_id)  # with whatever the judge wrote meanwhile
        stored = got[0] if got is not None else None
        if stored is not None and self._serving_model(stored):
            self.metrics.labelled(stored, outcome)  # the predictor's rolling AUC
        return stored

    def _publish(self, trace_id: str, owed: int) -> tuple[dict[str, Any], int, int] | None:
        """The stored row, read after our write and handed over in read order, its debt
        (owed at ``owed``) paid once Kafka delivered it or dropped it for good."""
        assert self._published is not None
        with self._published.ordered():
            got = self.store.get_versioned(trace_id)
            if got is None:  # gone (retention): nothing to publish
                self.store.results_paid(trace_id, owed)
                return None
            held = Held(trace_id, int(got[0].get("revision") or 0),
                        lambda _held: self._paid(trace_id, owed))
            self._published.publish_stored(*got, held=held)
        settle([held])  # our own take: the publisher's holds it until delivered
        return got

    def _paid(self, trace_id: str, owed: int) -> None:  # on the publisher's loop
        def pay() -> None:
            try:
                self.store.results_paid(trace_id, owed)
            except Exception as e:  # left owed: published again at the next start
                limited_line(self._paid_log, log, "clearing the owed results record of "
                             "trace %s failed: %s", trace_id, type(e).__name__,
                             counted="clearing failures", level=logging.ERROR)

        if self._payer is None:
            self._payer = ThreadPoolExecutor(1, thread_name_prefix="results-paid")
        with contextlib.suppress(RuntimeError):  # stopped: left owed, sent at the next start
            self._payer.submit(pay)

    def replay(self, limit: int) -> int:
        """At start, once the publisher is: the records owed by a process that stopped
        before Kafka delivered them (up to ``limit``, the publisher's queue), published again
        as the store holds them now; how many."""
        if self._published is None:
            return 0
        owed = self.store.results_owed(limit)
        for trace_id, owed_at_ns in owed:
            self._publish(trace_id, owed_at_ns)
        return len(owed)

    def close(self) -> None:
        """Pay the debts of the records delivered so far (the store still open)."""
        if self._payer is not None:
            self._payer.shutdown(wait=True)

    def _serving_model(self, body: dict[str, Any]) -> bool:
        """Whether ``body``'s prediction is the serving model's: the rolling AUC is that
        model's, and a run predicted before a model swap (stored before a restart with
        another ``--model``, or another otel-eval's default) would put the old model's
        ranking in the new model's window."""
        predictor = self.evaluator.predictor
        prediction = body.get("prediction")
        return predictor is not None and isinstance(prediction, dict) \
            and prediction.get("model") == predictor.model.label
