"""Stage: assemble (store health). Whether the store takes writes, when to try again, and
when to give up.

    Finishing.finish: a batch the store refused (Outcome.unstored) -> failed(reason) ->
        the batch back at the head of the queue; Finishing.process waits retry_in(now)
    AdmissionControl.refusal -> failing -> "store_unavailable" (gRPC RESOURCE_EXHAUSTED,
        HTTP 429 + Retry-After: OTLP exporters retry) ; /readyz -> describe() (503)
    Engine's worker thread -> gave_up(now) -> serve stops and exits 1 naming the store

A refused write keeps its batch (still pending, still in the spool: nothing acknowledged is
dropped or counted as done) and is tried again after a capped exponential back-off, like the
Collector exporters' ``retry_on_failure`` (``initial_interval``, ``max_interval``,
``max_elapsed_time``), without jitter: one writer per process, nothing to spread. The first
write that goes through ends it. ``max_elapsed_s`` after the first refusal with no write
since, serve gives up (0: never).

Thread-safe (its own lock): the engine's thread, the worker pool's threads, the receivers and
the admin server read it. Time is the engine's injected clock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from otel_eval.base.backoff import Backoff

REFUSAL = "store_unavailable"  # the admission reason while the store refuses writes


@dataclass(frozen=True)
class _Failing:
    reason: str  # otel_eval.store.failures.WRITE_FAILURE_REASONS
    error: str  # the driver's message, for the log, /readyz and the give-up line
    since: float  # clock, first refusal since the last write that went through
    retry_at: float  # clock, the next attempt
    interval_s: float  # the back-off that led to retry_at
    attempt: int  # refusals since the last write that went through, less one


class StoreGaveUp(RuntimeError):
    """The store refused every write for ``max_elapsed_s``: serve stops (exit 1)."""


class StoreHealth:
    def __init__(self, location: str, *, initial_interval_s: float = 1.0,
                 max_interval_s: float = 30.0, max_elapsed_s: float = 300.0,
                 clock: Callable[[], float]) -> None:
        self.location = location
        self.initial_interval_s = initial_interval_s
        self.max_interval_s = max_interval_s
        self._backoff = Backoff(initial_interval_s, max_interval_s)
        self.max_elapsed_s = max_elapsed_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failing: _Failing | None = None

    @property
    def failing(self) -> str | None:
        """The reason the last write was refused, while no write has gone through since."""
        f = self._failing
        return None if f is None else f.reason

    def failed(self, reason: str, error: str) -> None:
        """A write was refused: the next attempt after the back-off (doubled each time). A
        refusal arriving before the back-off ends is of a write handed out before it began
        (worker processes hold several batches): the same attempt, not a longer wait."""
        now = self._clock()
        with self._lock:
            f = self._failing
            if f is not None and now < f.retry_at:
                return
            attempt = 0 if f is None else f.attempt + 1
            interval = self._backoff.delay_s(attempt)
            self._failing = _Failing(reason, error, now if f is None else f.since,
                                     now + interval, interval, attempt)

    def recovered(self) -> bool:
        """A write went through; True when the store had been refusing until now."""
        with self._lock:
            was, self._failing = self._failing, None
        return was is not None

    def retry_in(self, now: float) -> float:
        """Seconds until writes may be tried again (0: now)."""
        f = self._failing
        return 0.0 if f is None else max(0.0, f.retry_at - now)

    def gave_up(self, now: float) -> bool:
        f = self._failing
        return f is not None and self.max_elapsed_s > 0 and now - f.since >= self.max_elapsed_s

    def give_up_line(self) -> str:
        """What serve says when it gives up (one line)."""
        f = self._failing
        assert f is not None
        return (f"store {self.location} refused every write for {self._clock() - f.since:.0f} s "
                f"({f.reason}: {f.error}): giving up (store.write_retry_max_elapsed_s = "
                f"{self.max_elapsed_s:g}); what it did not store stays in the spool for the "
                "next start")

    def describe(self, now: float | None = None) -> str | None:
        """One line on why writes fail and for how long (None while they do not)."""
        f = self._failing
        if f is None:
            return None
        now = self._clock() if now is None else now
        return (f"store {self.location} refuses writes ({f.reason}: {f.error}) for "
                f"{now - f.since:.0f} s; next attempt in {max(0.0, f.retry_at - now):.1f} s")
