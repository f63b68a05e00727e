"""The label budget of the per-trace metrics: bounded label values, the overflow counted.

One budget of (service, agent) pairs for every per-trace metric (the first ``max_pairs``
distinct pairs; any other pair is service="_other", agent="_other" on all of them alike, so
ratios between them hold; the agents the configuration names in a second budget as large,
their own; a pair idle for ``expiration_s`` removed from every metric at once, its place
given back); tool names:
the first ``max_tools_per_agent`` per (service, agent) pair, the rest ``_other``; and a
backstop per metric past the pair budget (``max_series_per_metric`` label combinations, the
rest folded into the all-``_other`` series and counted in
``otel_eval_metrics_series_overflow_total{metric}``).

Every label value from span content is ``label_text``: valid UTF-8, its control characters
escaped as ``printable`` writes them (``curl /metrics`` in a terminal is a terminal: an agent
name carrying an OSC 52 clipboard write or a carriage return reached it raw, since
prometheus_client escapes a newline, a quote and a backslash only).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from otel_eval.base.printable import printable
from otel_eval.base.text import valid_text
from otel_eval.telemetry.declare import Declarer

OTHER = "_other"
UNKNOWN = "unknown"
MAX_LABEL_CHARS = 128  # a name from span content is cut to this many characters as a label
SWEEP_EVERY_S = 60.0  # idle pairs are looked for at most this often (when they expire)


def label_text(text: str) -> str:
    """``text`` as a label value: valid UTF-8 (a lone surrogate failed every scrape), its
    control characters escaped (``printable``); ``text`` itself when it needs neither."""
    return printable(valid_text(text))


class CappedNames:
    """Admits the first ``cap`` distinct names; later ones map to ``_other``. Thread-safe."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, name: str | None) -> str:
        value = (name or UNKNOWN)[:MAX_LABEL_CHARS]
        if value in self._seen:
            return value
        with self._lock:
            if value in self._seen or len(self._seen) < self._cap:
                self._seen.add(value)
                return value
        return OTHER


class Pairs:
    """The one label budget of every per-trace metric: admits the first ``cap`` distinct
    (service, agent) pairs; any other pair is (``_other``, ``_other``) on every metric alike,
    so a ratio of two metrics (loops / completed) stays right for each pair and in sum.
    A pair whose agent is one of ``reserved`` (the agents the configuration names) takes its
    place in a second budget of ``cap`` pairs, its own: junk agent names cannot crowd it out
    (a sender of 250 of them put every later agent under ``_other`` until a restart), and a
    sender spoofing a configured name under many service names fills that one only, so the
    pairs held stay at most ``2 * cap``. Thread-safe: the finishing thread and the session
    job's count per-trace metrics, and either may sweep (``expire``)."""

    def __init__(self, cap: int, reserved: Iterable[str] = ()) -> None:
        self._cap = cap
        self._reserved = frozenset(labels_of(None, name)[1] for name in reserved)
        self._seen: dict[tuple[str, str], float] = {}  # admitted pair -> when last seen
        self._counted = [0, 0]  # admitted pairs of the budget, of the configured agents'
        self._lock = threading.Lock()

    def __call__(self, service: str | None, agent: str | None,
                 now: float = 0.0) -> tuple[str, str]:
        pair = labels_of(service, agent)
        if pair == (OTHER, OTHER):  # named so by its sender: the overflow's, never expired
            return pair
        # Locked for an admitted pair too (uncontended: one per trace): a check, then a
        # store, lock-free, let ``expire`` take the pair out in between, and the store put it
        # back uncounted, a place over the budget, kept while the pair stays busy
        with self._lock:
            if pair in self._seen:
                self._seen[pair] = now
                return pair
            budget = pair[1] in self._reserved
            if self._counted[budget] < self._cap:
                self._counted[budget] += 1
                self._seen[pair] = now
                return pair
        return OTHER, OTHER

    def admitted(self, service: str | None, agent: str | None) -> tuple[str, str] | None:
        """The pair's labels when it is already admitted, else None; admits nothing."""
        pair = labels_of(service, agent)
        return pair if pair in self._seen else None

    def expire(self, before: float, drop: Callable[[set[tuple[str, str]], set[str]], None]
               ) -> set[tuple[str, str]]:
        """The admitted pairs last seen before ``before``, taken out: their places in the
        budget given back. A scan of the pairs (at most ``2 * max_pairs``). ``drop(gone,
        services)`` (their series, and those of the services no admitted pair has now) runs
        under the lock a new pair is admitted under: a pair of such a service admitted in
        between counted a trace on a series ``drop`` then removed."""
        with self._lock:
            gone = {pair for pair, seen in self._seen.items() if seen < before}
            for pair in gone:
                del self._seen[pair]
                self._counted[pair[1] in self._reserved] -= 1
            if gone:
                drop(gone, {s for s, _ in gone} - {s for s, _ in self._seen})
        return gone


def labels_of(service: str | None, agent: str | None) -> tuple[str, str]:
    """The (service, agent) label values of a pair: cut to ``MAX_LABEL_CHARS``, none
    "unknown", ``label_text`` (a lone surrogate is U+FFFD, a control character escaped: the
    gauges computed at scrape time, the rolling AUC and the judge agreement, label with the
    pair as it is here)."""
    return (label_text((service or UNKNOWN)[:MAX_LABEL_CHARS]),
            label_text((agent or UNKNOWN)[:MAX_LABEL_CHARS]))


class SeriesCap:
    """The (service, agent) pair budget and the per-metric series backstop, shared by the
    trace metrics and the predictor's."""

    def __init__(self, d: Declarer, max_pairs: int, max_series_per_metric: int,
                 reserved_agents: Iterable[str] = (), expiration_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.c_series_overflow = d.counter(
            "metrics_series_overflow", "Observations folded into the _other series of a "
            "metric whose label combinations reached the cap.", ["metric"])
        # a backstop per per-trace metric, past the pair budget: the other labels come from
        # closed sets (statuses, finding kinds, budgets, 20 tools per agent), so only a
        # pathological mix reaches it; the overflow is counted
        self._max_series = max_series_per_metric
        self._combos: dict[int, dict[tuple[str, ...], Any]] = {}  # metric -> series -> child
        self._metrics: dict[int, Any] = {}  # id -> the metric its combos are of
        self._combos_lock = threading.Lock()
        # (service, agent) pairs with series of their own: capping each label separately
        # (100 x 100) let each metric admit different pairs (3,000 pairs: 50,157 series)
        self._pairs = Pairs(max_pairs, reserved_agents)
        # admin.metrics_expiration_s (0: never): a pair idle that long gives its place back.
        # Looked for at most once a minute (as spanmetrics' at each flush): a clock read per
        # trace, a scan of the pairs per minute, never one per trace
        self._expiration_s, self._clock = expiration_s, clock
        self._sweep_every_s = min(expiration_s, SWEEP_EVERY_S)
        self._next_sweep = clock() + self._sweep_every_s if expiration_s else 0.0
        self._sweeping = threading.Lock()
        self._forgets: list[Callable[[set[tuple[str, str]]], None]] = []

    def pair(self, service: str | None, agent: str | None) -> tuple[str, str]:
        """The (service, agent) labels of a trace: its own when the pair is within the
        budget (``max_pairs``) or its agent is a reserved one, else (``_other``, ``_other``).
        Pairs idle past the expiration are taken out first, when a minute has passed."""
        if not self._expiration_s:
            return self._pairs(service, agent)
        now = self._clock()
        if now >= self._next_sweep:
            self._expire(now)
        return self._pairs(service, agent, now)

    def on_expired(self, forget: Callable[[set[tuple[str, str]]], None]) -> None:
        """``forget(pairs)`` is called with the pairs expired, after their series went (a
        subsystem's own state per pair: tool names, AUC windows)."""
        self._forgets.append(forget)

    def _expire(self, now: float) -> None:
        if not self._sweeping.acquire(blocking=False):
            return  # another thread sweeps
        try:
            if now < self._next_sweep:
                return
            self._next_sweep = now + self._sweep_every_s
            gone = self._pairs.expire(now - self._expiration_s, self._remove)
            if gone:
                for forget in self._forgets:
                    forget(gone)
        finally:
            self._sweeping.release()

    def _remove(self, gone: set[tuple[str, str]], services: set[str]) -> None:
        """The series of ``gone`` pairs removed from every metric at once, so ratios of two
        metrics stay right; a (service, ...) metric's series (agent_source) of ``services``,
        which no admitted pair has. Under the pairs' lock (``Pairs.expire``): no pair is
        admitted meanwhile. A trace of a gone pair counted meanwhile may be lost with them."""
        with self._combos_lock:
            for key, seen in self._combos.items():
                metric = self._metrics[key]
                names = tuple(metric._labelnames)  # prometheus_client's, as declared
                if names[:2] == ("service", "agent"):
                    drop = [v for v in seen if (v[0], v[1]) in gone]
                elif names[:1] == ("service",):
                    drop = [v for v in seen if v[0] in services]
                else:
                    continue
                for values in drop:
                    del seen[values]
                    with contextlib.suppress(KeyError):  # never observed
                        metric.remove(*values)

    def admitted(self, service: str | None, agent: str | None) -> tuple[str, str] | None:
        """The labels of a pair already admitted by ``pair`` (the traces seen), else None:
        a look-up for series that must not spend the budget (the agreement gauges)."""
        return self._pairs.admitted(service, agent)

    def labels(self, service: str | None, agent: str | None) -> tuple[str, str]:
        """The labels the per-trace metrics carry for a pair, admitting nothing: its own
        when admitted, else (``_other``, ``_other``) (for series that join theirs, of
        stored data: the issues job's)."""
        return self._pairs.admitted(service, agent) or (OTHER, OTHER)

    def series(self, metric: Any, *values: str) -> Any:
        """``metric.labels(*values)``, or its all-``_other`` series once the metric holds
        ``max_series_per_metric`` label combinations (counted per metric). Values are made
        valid UTF-8 first (a lone surrogate in one tool name failed every scrape)."""
        seen = self._combos.get(id(metric))
        child = seen.get(values) if seen is not None else None
        if child is not None:  # the admitted series' child, kept: labels() costs ~1 us
            return child
        values = tuple(label_text(v) for v in values)  # prometheus_client encodes them
        with self._combos_lock:
            seen = self._combos.setdefault(id(metric), {})
            self._metrics[id(metric)] = metric
            if values not in seen:
                if len(seen) >= self._max_series:
                    self.c_series_overflow.labels(metric.describe()[0].name).inc()
                    values = (OTHER,) * len(values)
                if values not in seen:
                    seen[values] = metric.labels(*values)
            return seen[values]
