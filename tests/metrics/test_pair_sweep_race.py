"""A trace arriving at the moment of a sweep of idle (service, agent) pairs
(``admin.metrics_expiration_s``): the metrics are counted from the finishing thread and the
session job's, and either may sweep. The interleavings are forced, not timed: a lock's
stand-in starts the other thread at the step under test and goes on once that thread is done,
or waits at a lock (``GUARD_S`` only bounds a deadlock)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry
from support.clock import ManualClock
from test_series_cap import _evaluation

from otel_eval.telemetry.metrics import Metrics

HOUR = 3600.0
GUARD_S = 30.0


class _Watched:
    """A lock that says (``waits``) when a thread in ``whose`` finds it taken."""

    def __init__(self, lock: Any, whose: list[threading.Thread],
                 waits: threading.Event) -> None:
        self._lock, self._whose, self._waits = lock, whose, waits

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            if threading.current_thread() in self._whose:
                self._waits.set()
            self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class _Before:
    """A lock whose first taking by this thread once ``armed`` first runs ``step``."""

    def __init__(self, lock: Any, armed: threading.Event, step: Callable[[], None]) -> None:
        self._lock, self._armed, self._step = lock, armed, step
        self._me, self._done = threading.current_thread(), False

    def __enter__(self) -> None:
        if self._armed.is_set() and not self._done and threading.current_thread() is self._me:
            self._done = True
            self._step()
        self._lock.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._lock.__exit__(*exc)


def _in_thread(work: Callable[[], None], waits: threading.Event
               ) -> tuple[list[threading.Thread], Callable[[], None]]:
    """A thread for ``work`` and the step that starts it and returns once it is done or
    waits at a lock (``waits``, set by a ``_Watched`` lock or at its end)."""
    def run() -> None:
        try:
            work()
        finally:
            waits.set()

    thread = [threading.Thread(target=run)]

    def step() -> None:
        thread[0].start()
        assert waits.wait(GUARD_S)
    return thread, step


def _source(m: Metrics, service: str) -> float | None:
    return m.registry.get_sample_value("otel_eval_traces_agent_source_total",
                                       {"service": service, "source": "unknown"})


def test_a_trace_of_a_service_counted_during_a_sweep_keeps_its_source_series() -> None:
    """shop/planner idle past the expiration, the sweep found no other pair of shop and was
    about to remove shop's traces_agent_source series when a trace of shop/writer (a new
    pair) was admitted and counted on it: the series went, with that trace's count, while
    shop/writer is admitted."""
    clock = ManualClock()
    m = Metrics(CollectorRegistry(), metrics_expiration_s=HOUR, clock=clock)
    cap = m.traces.cap
    m.evaluation_stored(_evaluation(0, "shop", "planner"), 0.1, False)
    clock.advance(2 * HOUR)
    waits, armed = threading.Event(), threading.Event()
    writer, step = _in_thread(lambda: m.evaluation_stored(
        _evaluation(1, "shop", "writer"), 0.1, False), waits)
    expire = cap._pairs.expire

    def sweeping(*args: Any, **kwargs: Any) -> Any:
        armed.set()  # the sweep's next taking of the series lock removes series
        return expire(*args, **kwargs)

    cap._pairs.expire = sweeping  # type: ignore[method-assign]
    cap._pairs._lock = _Watched(cap._pairs._lock, writer, waits)  # type: ignore[assignment]
    cap._combos_lock = _Before(cap._combos_lock, armed, step)  # type: ignore[assignment]
    m.evaluation_stored(_evaluation(2, "bank", "teller"), 0.1, False)  # sweeps
    writer[0].join(GUARD_S)
    assert not writer[0].is_alive()
    assert cap.admitted("shop", "writer") == ("shop", "writer")
    assert _source(m, "shop") == 1  # shop/writer's trace
    assert _source(m, "bank") == 1


class _Looked(dict[Any, Any]):
    """The admitted pairs, running ``step`` once right after a look-up of ``pair`` by this
    thread (the trace's check whether its pair is admitted)."""

    def __init__(self, seen: dict[Any, Any], pair: tuple[str, str],
                 step: Callable[[], None]) -> None:
        super().__init__(seen)
        self._pair, self._step, self._me = pair, step, threading.current_thread()

    def _after(self, key: Any) -> None:
        if key == self._pair and threading.current_thread() is self._me:
            self._pair = ("", "")
            self._step()

    def __contains__(self, key: object) -> bool:
        found = super().__contains__(key)
        self._after(key)
        return found

    def get(self, key: Any, default: Any = None) -> Any:
        found = super().get(key, default)
        self._after(key)
        return found


def test_a_trace_of_a_pair_the_sweep_takes_out_never_holds_a_place_uncounted() -> None:
    """A trace of shop/planner found its pair admitted, then the sweep (the other thread)
    took the idle pair out and counted the places held, then the trace stored the pair back:
    held, but not counted, so the budget of one admitted shop/writer too (two pairs of
    their own in a budget of one, until the next sweep, and past it while both are busy)."""
    pairs = Metrics(CollectorRegistry(), max_pairs=1).traces.cap._pairs
    assert pairs("shop", "planner", 0.0) == ("shop", "planner")
    waits = threading.Event()
    sweeper, step = _in_thread(lambda: pairs.expire(100.0, lambda gone, services: None),
                               waits)
    pairs._seen = _Looked(pairs._seen, ("shop", "planner"), step)
    pairs._lock = _Watched(pairs._lock, sweeper, waits)  # type: ignore[assignment]
    got = pairs("shop", "planner", 100.0)
    sweeper[0].join(GUARD_S)
    assert not sweeper[0].is_alive()
    writer = pairs("shop", "writer", 101.0)
    own = [p for p in (got, writer) if p != ("_other", "_other")]
    assert len(own) <= 1 and len(pairs._seen) <= 1, (got, writer, dict(pairs._seen))
