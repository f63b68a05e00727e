"""Stage: issues, periodic. Every ``issues.interval_s``, cluster the window's critiques.

    evaluations_since(now - window_s) -> IssueTracker.run (catalogue in SQLite: stable ids)
      -> latest IssuesResult -> latest_json() (GET /v1/issues)
                             -> runs() (GET /v1/issues/{id}/runs; a cursor's pages read the
                                run it names, the one before kept for them: issues.runs)
                             -> one collector on the registry (top-K issue gauges)
                             -> annotator (Grafana annotations for new issues, share jumps)

Usage (the service, when ``issues.interval_s > 0``):

    grafana = GrafanaAnnotator(cfg.issues.grafana) if cfg.issues.grafana.url else None
    job = IssuesJob(cfg.issues, cfg.issues.store_path or cfg.store.path,
                    lambda ns: store.since(ns, WINDOW_RUNS, keep=critique_fields),
                    metrics.registry,
                    annotator=grafana)
    job.start()                          # a thread: run_once() now, then every interval_s
    AdminApi(..., issues=job.latest_json,          # GET /v1/issues
             issue_runs=job.runs)                  # GET /v1/issues/{id}/runs
    job.close(timeout_s)                 # on shutdown: stop the thread, close the catalogue

Promises: ``run_once`` never raises (a failed run is logged and counted, the previous
result is kept); runs never overlap, in a process nor, on a PostgreSQL store, across the fleet
(the worker holding the catalogue's advisory lock runs; the others count ``skipped`` and
publish no issues, a former leader included); the gauges are the last successful run's,
bounded by ``max_gauge_issues`` in all (``top_k`` per (level, node); the rest as ``_other``
samples), whatever the number of agent nodes. Its metrics are
``otel_eval.telemetry.issues``' collector, fed by ``_snapshot``.

The exemplar is the one trace id used as a label, so a dashboard table can link to it: one
series per shown issue (so at most ``max_gauge_issues``), a 32-hex trace id only, and sticky
(kept while that trace stays in the window), so it changes at most once per window rather
than every run.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from otel_eval.base.model import is_trace_id
from otel_eval.outputs.deps import Deps
from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.critiques import Redact, critique_fields
from otel_eval.outputs.issues.grafana import GrafanaAnnotator
from otel_eval.outputs.issues.result import (
    MAX_AGENTS_PER_ISSUE,
    OTHER_ISSUE_ID,
    Annotated,
    Issue,
    IssuesResult,
    run_issues,
    to_json,
    top_issue_gauge_samples,
)
from otel_eval.outputs.issues.runs import NoRun, RunsAt, kept, page
from otel_eval.outputs.issues.synthesis import Synthesizer
from otel_eval.outputs.issues.tracker import Annotator, IssueTracker
from otel_eval.store.base import SessionLimits, Window
from otel_eval.telemetry.issues import (
    ANNOTATION_SKIP_REASONS,
    ANNOTATION_STATUSES,
    RUN_STATUSES,
    IssueRow,
    IssuesCollector,
    IssuesSnapshot,
)
from otel_eval.telemetry.labels import labels_of

if TYPE_CHECKING:  # naming imports numpy and scipy (the tracker does, when it clusters)
    from otel_eval.outputs.issues.embed import Embedder
    from otel_eval.outputs.issues.naming import Namer

log = logging.getLogger(__name__)

EvaluationsSince = Callable[[int], Window]

# The newest runs of its window a run clusters: their critiques are held in memory, as the
# clustering needs them all at once. The store's window says when it held more
# (``Window.truncated``): the result says so (``window_truncated``, on /v1/issues) and the log
# says it, its shares then being of the newest runs only. Before, the rest went unsaid.
WINDOW_RUNS = 100_000



PairLabels = Callable[[str | None, str | None], tuple[str, str]]


def _labels(issues: Iterable[Issue], pair: PairLabels) -> tuple[tuple[str, str], ...]:
    """The (service, agent) pairs of ``issues`` as the per-trace metrics label them (the
    dashboard joins on both): ``pair`` looks them up in their pair budget
    (``SeriesCap.labels``), so a pair without series (past ``admin.metrics_max_pairs``, or
    not seen by this process) is (``_other``, ``_other``) here as on the traces' series,
    and the stored window takes no place in the budget; the first ``MAX_AGENTS_PER_ISSUE``."""
    pairs = {pair(s or None, a or None) for i in issues for s, a in i.service_agents}
    return tuple(sorted(pairs)[:MAX_AGENTS_PER_ISSUE])


def _has(ordered: tuple[str, ...], value: str) -> bool:
    at = bisect.bisect_left(ordered, value)
    return at < len(ordered) and ordered[at] == value


class IssuesJob:
    def __init__(self, config: IssuesConfig, store: str | sqlite3.Connection,
                 evaluations_since: EvaluationsSince, registry: CollectorRegistry,
                 clock: Callable[[], float] = time.time, annotator: Annotator | None = None,
                 *, namer: Namer | None = None, embedder: Embedder | None = None,
                 synthesizer: Synthesizer | None = None,
                 session: SessionLimits | None = None,
                 monotonic: Callable[[], float] = time.monotonic,
                 pair: PairLabels = labels_of, redact: Redact = None) -> None:
        """``store``: the catalogue's SQLite file or PostgreSQL URL (or a connection usable
        from the job's thread), ``session`` the limits of a PostgreSQL one
        (``store.session``); ``evaluations_since(ns)``: the window of v1 evaluation
        objects evaluated after ``ns`` (unix nanoseconds; ``Store.since``); ``clock``: unix
        seconds; ``monotonic``: seconds, the naming deadline's
        (``issues.naming_deadline_s``); ``pair``: the (service, agent) labels of a pair on
        the per-trace metrics (``serve``: their pair budget, so the dashboard's issues table
        joins an issue of a pair past it to the ``_other`` series); ``redact``: applied to
        every critique's text (titles and descriptions are its words)."""
        self._config = config
        self._tracker = IssueTracker(config, store, clock, namer=namer, embedder=embedder,
                                     synthesizer=synthesizer, session=session,
                                     monotonic=monotonic, redact=redact)
        self._evaluations_since = evaluations_since
        self._pair = pair
        self._clock = clock
        self._annotator = annotator
        self._run_lock = threading.Lock()  # one run at a time (thread and manual calls)
        self._lock = threading.Lock()  # guards the snapshot below (scrapes read it)
        # the last runs, newest first, without their assignments and events (``runs.kept``):
        # the last is what every reader reads, the one before it is kept for the cursors
        # paging its issues' runs (issues.runs)
        self._kept: tuple[IssuesResult, ...] = ()
        # the runs' numbers (``IssuesResult.run``: a cursor names its run by stamp and
        # number), from a random start: a restarted process's runs are not the cursors' old
        # ones, whatever its clock says
        self._numbers = itertools.count(secrets.randbits(32))
        self._rows: tuple[IssueRow, ...] = ()
        self._following = False  # the last run was skipped: another worker leads
        self._exemplars: dict[str, str] = {}  # issue id -> sticky exemplar trace id
        self._runs = dict.fromkeys(RUN_STATUSES, 0)
        self._annotations = dict.fromkeys(ANNOTATION_STATUSES, 0)
        self._annotations_skipped = dict.fromkeys(ANNOTATION_SKIP_REASONS, 0)
        self._last_run: float | None = None
        self._last_duration: float | None = None
        # the interval in force (a gauge; start() may be given another); None: the job is off
        self._interval: float | None = config.interval_s if config.interval_s > 0 else None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._collector = IssuesCollector(self._snapshot, created=clock())
        self._registry = registry
        registry.register(self._collector)
        self._registered = True

    # -- the run --------------------------------------------------------------------------

    def run_once(self, now: float | None = None) -> IssuesResult | None:
        """Cluster the window ending at ``now`` (unix seconds; default: the clock). Returns
        the result, or None when the run failed (logged, counted, previous result kept)."""
        with self._run_lock:
            started = time.monotonic()
            try:
                if not self._tracker.leads():  # another worker runs the fleet's job
                    self._follow()
                    return None
                now = self._clock() if now is None else now
                since_ns = int((now - self._config.window_s) * 1e9)
                result = replace(self._run(since_ns, now), run=next(self._numbers))
                rows = self._rows_of(result)
            except Exception:  # stage boundary: a bad run must not stop the periodic job
                log.exception("issue clustering run failed")
                with self._lock:
                    self._runs["error"] += 1
                return None
            with self._lock:
                self._kept, self._rows = kept(result, self._kept), rows
                self._following = False
                self._runs["ok"] += 1
                self._last_run = now
                self._last_duration = time.monotonic() - started
            self._annotate(result, now)
            return result

    def _run(self, since_ns: int, now: float) -> IssuesResult:
        """The tracker's run over the window's newest ``WINDOW_RUNS`` runs (oldest first)."""
        window = self._evaluations_since(since_ns)
        evaluations = window.rows[-WINDOW_RUNS:]  # a reader past the bound: its newest
        cut = window.truncated or len(window.rows) > WINDOW_RUNS
        if cut:
            log.warning("the issues window (%.0f s) holds more runs than a run reads: the "
                        "newest %d runs clustered, the older ones left out (window_truncated)",
                        self._config.window_s, len(evaluations))
        result = self._tracker.run(evaluations, now)
        return replace(result, window_truncated=True) if cut else result

    def _follow(self) -> None:
        """A skipped run: the fleet's issues are the leader's, so what this worker ran while
        it led (before its connection, and the lock, dropped) is no longer published: no
        result, no issue series beside the leader's, no last run for the staleness alert."""
        with self._lock:
            self._runs["skipped"] += 1
            self._kept, self._rows, self._exemplars = (), (), {}
            self._following = True
            self._last_run = self._last_duration = None

    def _annotate(self, result: IssuesResult, now: float) -> None:
        if self._annotator is None or not result.events:
            return
        try:
            done = self._annotator.annotate(result.events, now)
        except Exception:  # an annotator must not fail the run; GrafanaAnnotator never raises
            log.exception("issue annotations failed")
            done = Annotated(failed=len(result.events))
        with self._lock:
            self._annotations["posted"] += done.posted
            self._annotations["failed"] += done.failed
            for reason in ANNOTATION_SKIP_REASONS:  # label values from the closed set only
                self._annotations_skipped[reason] += done.skipped.get(reason, 0)

    def _rows_of(self, result: IssuesResult) -> tuple[IssueRow, ...]:
        cfg = self._config
        rows: list[IssueRow] = []
        exemplars: dict[str, str] = {}
        for sample in top_issue_gauge_samples(result, cfg.top_k, cfg.max_gauge_issues):
            labels = sample.labels
            key = (labels["level"], labels["node"], labels["issue_id"], labels["title"])
            if labels["issue_id"] == OTHER_ISSUE_ID:
                rows.append(IssueRow(key, sample.share, sample.traces, None,
                                     _labels(sample.issues, self._pair), None))
                continue
            (issue,) = sample.issues
            exemplar = self._exemplar(issue)
            if exemplar is not None:
                exemplars[issue.issue_id] = exemplar
            rows.append(IssueRow(key, sample.share, issue.traces, issue.trend,
                                 _labels(sample.issues, self._pair), exemplar,
                                 issue.severity, issue.status))
        self._exemplars = exemplars  # only shown issues: bounded like the gauges
        return tuple(rows)

    def _exemplar(self, issue: Issue) -> str | None:
        """Keep the previous run's exemplar while its trace is still in the window; a trace
        id only (32 hex digits: a bounded label value the dashboard's links can open)."""
        previous = self._exemplars.get(issue.issue_id)
        if previous is not None and _has(issue.trace_ids, previous):
            return previous
        return next((t for t in issue.exemplars if is_trace_id(t)), None)

    # -- what others read -----------------------------------------------------------------

    def latest(self) -> IssuesResult | None:
        with self._lock:
            return self._kept[0] if self._kept else None

    def runs(self, issue_id: str, at: RunsAt) -> dict[str, Any] | None:
        """One page of the runs of an issue (``GET /v1/issues/{id}/runs``): of the last
        successful run, or of the kept run a cursor pages (``RunsGone`` when it is no longer
        kept); None when that run does not have the issue; ``NoRun`` without a run (none
        yet, or another worker leads: the issues are its)."""
        with self._lock:
            runs, following = self._kept, self._following
        if not runs and at.run_ns is None:
            raise NoRun(NoRun.FOLLOWING if following else NoRun.NOT_YET)
        return page(runs, issue_id, at)

    def of_run(self, trace_id: str) -> list[dict[str, str]]:
        """The issues of the last successful run that the run ``trace_id`` is one of (the
        run page links each); none before the first run."""
        latest = self.latest()
        return [] if latest is None else run_issues(latest, trace_id)

    def latest_json(self) -> dict[str, Any]:
        """The ``GET /v1/issues`` object of the last successful run (without assignments);
        before the first run, an empty result with ``generated_at: null``."""
        latest = self.latest()
        if latest is not None:
            return to_json(latest, assignments=False)
        empty = IssuesResult(0.0, self._config.window_s, self._config.embedding, 0, 0, 0,
                             (), ())
        return {**to_json(empty, assignments=False), "generated_at": None}

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, interval_s: float | None = None) -> None:
        """Run now, then every ``interval_s`` (default ``issues.interval_s``) in a thread."""
        interval = self._config.interval_s if interval_s is None else interval_s
        if interval <= 0:
            raise ValueError("IssuesJob.start needs a positive interval (issues.interval_s)")
        if self._thread is not None:
            raise RuntimeError("IssuesJob already started")
        self._tracker.open()  # the catalogue: a database that cannot be opened stops start
        with self._lock:
            self._interval = interval
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, args=(interval,),
                                        name="otel-eval-issues", daemon=True)
        self._thread.start()

    def _loop(self, interval: float) -> None:
        # Fixed rate: the next run is due one interval after this one started, so a slow run
        # shortens the pause instead of drifting. run_once never raises.
        while not self._stop.is_set():
            due = time.monotonic() + interval
            self.run_once()
            if self._stop.wait(max(0.0, due - time.monotonic())):
                return

    def stop(self, timeout_s: float | None = None) -> bool:
        """Stop the thread (a run in progress finishes first); False if still running."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is None:
            return True
        thread.join(timeout_s)
        return not thread.is_alive()

    def shutdown(self, deadline_s: float) -> None:
        """The service lifecycle's stop: ``close`` within the deadline (none left: a run under
        way is not waited for; it ends on its daemon thread, the catalogue left open)."""
        self.close(timeout_s=max(0.0, deadline_s))

    def close(self, timeout_s: float | None = None) -> None:
        """Stop, unregister the gauges, close the catalogue (when opened from a path)."""
        stopped = self.stop(timeout_s)
        if self._registered:  # close twice (a test, then the lifecycle): once is enough
            self._registry.unregister(self._collector)
            self._registered = False
        if stopped:  # else the running thread still uses the catalogue; the process exits
            self._tracker.close()

    def _snapshot(self) -> IssuesSnapshot:
        with self._lock:
            return (self._rows, dict(self._runs), dict(self._annotations), self._last_run,
                    self._last_duration, dict(self._annotations_skipped), self._interval,
                    self._tracker.naming_deferred)


def build(config: IssuesConfig, deps: Deps, *,
          namer: Callable[[], Namer | None] = lambda: None,
          synthesizer: Callable[[], Synthesizer | None] = lambda: None,
          redact: Redact = None) -> IssuesJob | None:
    """The periodic issue clustering over the stored window (``issues.interval_s`` > 0), its
    catalogue in ``issues.store_path`` or the store; ``namer()`` and ``synthesizer()`` make
    the judge model's (None without one), called only when the job is on; ``redact``: the
    judge's redaction, applied to every critique's text."""
    if config.interval_s <= 0:
        return None
    grafana = GrafanaAnnotator(config.grafana) if config.grafana.url else None
    store = deps.store
    return IssuesJob(config, config.store_path or deps.store_target,
                     lambda since_ns: store.since(since_ns, WINDOW_RUNS,
                                                  keep=critique_fields),
                     deps.registry, annotator=grafana, namer=namer(),
                     synthesizer=synthesizer(), session=deps.store_session,
                     pair=deps.metrics.traces.cap.labels, redact=redact)
