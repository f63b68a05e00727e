"""Self-metrics of the judge checked against people (``evaluate.calibration``).

    GET /v1/calibration or a scrape, once the last report is older than ``refresh_s`` or an
    outcome was recorded since (by any process on the store: its feedback version changed)
      -> the report (served to both) -> its rows (service, agent, score) -> gauges

Metrics (a ``Collector`` declared through the ``Declarer`` ``Metrics`` hands this subsystem;
computed when scraped):

    otel_eval_judge_agreement_auc{service,agent,score}    AUC of a score against the outcomes
    otel_eval_judge_agreement_kappa{service,agent,score}  Cohen's kappa at the pass threshold
    otel_eval_judge_agreement_runs{service,agent,score}   labelled runs the figures rest on

``score`` is a judge dimension (``step``, ``process``, ``trace``, ``outcome``, ...) or
``p_success`` (the serving model's: the report has a row per model): a closed set. A
(service, agent) pair has gauges only once the per-trace metrics admitted it
(``labels.SeriesCap.admitted``, a look-up: the gauges never take a pair from the budget);
any other pair is left out, not put under ``_other``: agreement does not add up. Nor does it
merge: rows whose labels coincide (names cut to 128 characters; "" and "unknown") are left
out too. Service and agent ``*`` is every agent's runs together. A figure that cannot be
computed (one outcome only) has no sample. The report is computed by the source the service
gives (a store query of the labelled runs), at most once per ``refresh_s`` (and again after
an outcome is recorded, by this process or, read from the store's feedback version, any
other on the store: a fleet) for scrapes and ``GET /v1/calibration`` alike: never on the
engine's path. Thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from otel_eval.telemetry.declare import Declarer
from otel_eval.telemetry.labels import SeriesCap

log = logging.getLogger(__name__)

LABELS = ["service", "agent", "score"]
_GAUGES = (("auc", "AUC of a judge score (or p_success) against the outcomes users recorded "
            "(POST /v1/feedback), per agent; `*`: all agents."),
           ("kappa", "Cohen's kappa of a judge score (or p_success) at its pass threshold "
            "against the outcomes users recorded, per agent; `*`: all agents."),
           ("runs", "Labelled runs the judge agreement figures of a score rest on."))
# Seconds a report is served from before a scrape computes it again.
REFRESH_S = 300.0


class _AgreementCollector(Collector):
    """The agreement gauges, built when scraped from the owner's last report."""

    def __init__(self, owner: CalibrationMetrics) -> None:
        self._owner = owner

    def describe(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily(f"otel_eval_judge_agreement_{n}", doc, labels=LABELS)
                for n, doc in _GAUGES]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        rows = self._owner.rows()
        for name, doc in _GAUGES:
            family = GaugeMetricFamily(f"otel_eval_judge_agreement_{name}", doc, labels=LABELS)
            for labels, row in rows:
                value = row.get(name)
                if value is not None:
                    family.add_metric(labels, float(value))
            yield family


class CalibrationMetrics:
    """The judge agreement subsystem: the last report, computed again when older than
    ``refresh_s`` or an outcome was recorded since (for a scrape or ``GET /v1/calibration``);
    ``cap`` gives the (service, agent) pairs the per-trace metrics admitted."""

    def __init__(self, d: Declarer, cap: SeriesCap, refresh_s: float = REFRESH_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._cap = cap
        self._refresh_s, self._clock = refresh_s, clock
        self._source: Callable[[], dict[str, Any]] | None = None
        self._opened: Callable[[], bool] = lambda: True  # the source's store is open
        self._version: Callable[[], object] | None = None
        self._report_version: object = None  # the store's feedback version the report read
        self._report: dict[str, Any] = {}
        self._at: float | None = None
        self._recorded = 0  # outcomes recorded: a report begun before one is stale at once
        self._failed_at: float | None = None  # a scrape's computation last failed then
        self._lock = threading.Lock()  # the report and its time
        # one computation at a time: requests arriving meanwhile wait for it and share it
        self._computing = threading.Lock()
        d.collector(_AgreementCollector(self))

    def serve_from(self, source: Callable[[], dict[str, Any]],
                   version: Callable[[], object] | None = None,
                   opened: Callable[[], bool] = lambda: True) -> None:
        """The report's source (``evaluate.calibration.report`` over the service's store)
        and, for a store other processes write too, what changes when any of them records an
        outcome (``EvaluationStore.feedback_version``): a report is kept only while it
        stays the same. ``opened``: whether the store may be read; a scrape while it is not
        (serve migrating it at start, or stopped) serves the last figures and reads nothing
        (the migration's connection is the store's), and the first scrape once it is open
        computes them."""
        self._source, self._version, self._opened = source, version, opened

    def calibrated(self, report: dict[str, Any]) -> None:
        """A report just computed."""
        with self._lock:
            self._report, self._at = report, self._clock()

    def outcome_recorded(self) -> None:
        """An outcome was just recorded (POST /v1/feedback): the next read computes the
        report again, so a person who recorded one sees it counted."""
        with self._lock:
            self._at = None
            self._recorded += 1

    def report(self) -> dict[str, Any]:
        """The last report when younger than ``refresh_s``, else the source's new one (raises
        what the source raises; the next call tries again)."""
        with self._computing:
            with self._lock:
                fresh = self._fresh()
            # read before the report: an outcome recorded between the two is counted in it
            # or makes the next read compute it again, never lost
            version = self._versioned(fresh)
            with self._lock:
                if fresh and version == self._report_version:
                    return self._report
                recorded = self._recorded
            if self._source is None:
                raise RuntimeError("calibration has no source")
            found = self._source()
            with self._lock:  # an outcome recorded meanwhile may be missing from it
                self._report, self._report_version = found, version
                self._at = self._clock() if self._recorded == recorded else None
            return found

    def _versioned(self, fresh: bool) -> object:
        """The store's feedback version (None: no version source); when it cannot be read
        (the store down), a fresh report's own: it is kept, as it was before versions."""
        if self._version is None:
            return None
        try:
            return self._version()
        except Exception:
            log.warning("the store's feedback version not read", exc_info=True)
            with self._lock:
                return self._report_version if fresh else None

    def _fresh(self) -> bool:  # self._lock held
        return self._at is not None and self._clock() - self._at < self._refresh_s

    def rows(self) -> list[tuple[list[str], dict[str, Any]]]:
        """(service, agent, score) labels and figures of the last report's rows whose pair
        the per-trace metrics admitted (a look-up: a calibration row never takes a pair from
        the budget, which the store's history of retired agents would fill before the live
        ones); rows whose labels coincide (names cut to 128 characters, "" and "unknown")
        are all left out: their figures cannot be merged. ``p_success`` is the serving
        model's (the report's ``serving_model``), when one serves. The report is computed again
        first when older than ``refresh_s``."""
        failed = self._failed_at
        if self._source is not None and self._opened() and (
                failed is None or self._clock() - failed >= self._refresh_s):
            try:
                self.report()
                self._failed_at = None
            except Exception:  # a store down must not fail the scrape: keep the last figures
                log.warning("judge agreement not refreshed", exc_info=True)
                self._failed_at = self._clock()  # and do not try again on every scrape
        with self._lock:
            found = self._report
        serving = found.get("serving_model")
        by_labels: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for row in found.get("groups", ()):
            if serving is not None and row.get("model") not in (None, serving):
                continue  # p_success of a model no longer serving: its rows are the report's
            pair = self._pair(row["service"], row["agent"])
            if pair is not None:
                by_labels.setdefault((*pair, row["score"]), []).append(row)
        return [(list(labels), rows[0]) for labels, rows in by_labels.items() if len(rows) == 1]

    def _pair(self, service: str, agent: str) -> tuple[str, str] | None:
        if (service, agent) == ("*", "*"):
            return service, agent
        return self._cap.admitted(service or None, agent or None)
