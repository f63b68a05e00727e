"""Work counted, not timed: Python function calls per stage on a fixed recorded corpus.

``count(fn)`` runs ``fn`` under ``sys.setprofile`` and counts the ``call`` events (each Python
function entered, a generator resumed); the profile function itself is not profiled. The count
is the same on every run of the same code on the same input, on any machine, loaded or not:
what a timed assertion cannot be. Three things could still move it, and are held fixed:

- caches warming (``functools.cache``, per-shape caches): every stage runs once unmeasured
  first, and the measured pass is the second, so the count is the steady state; the reader
  plan cache starts empty (it is emptied whole when full, so one left nearly full by earlier
  tests emptied itself inside the count: the guard failed after some test orders only);
- log records (pytest's handlers would add calls): logging is disabled while counting;
- iteration order of sets of strings (``PYTHONHASHSEED``): ``tests/cost`` checks that two
  seeds give the same counts.

The stages, by their public entry points (not by the modules that implement them):
``decode`` (``decode_request`` / ``decode_logs`` of the OTLP requests, or ``load_path`` of a
dataset file), ``trajectory`` (``build_trajectory``), ``detectors`` (``Detectors.evaluate``),
``predict`` (``Predictor.predict`` of the shipped default model: features, the run's text
and its terms), ``bound`` (``evaluate.bounds.bound``: the stored object measured and cut to
its bounds, its text encoded), ``store_row`` (``evaluation_row``: the stored row, with the
text ``bound`` encoded, as the evaluator hands it on).
"""

from __future__ import annotations

import gc
import json
import logging
import sys
from collections import defaultdict
from collections.abc import Callable, Container, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from conformance import corpus

from otel_eval.app.config import Config
from otel_eval.base.model import LogEvent, Span, Trace
from otel_eval.base.results import Evaluation
from otel_eval.base.steps import Trajectory
from otel_eval.decode.otlp import decode_request
from otel_eval.decode.otlp_json import request_from_dict
from otel_eval.decode.otlp_logs import decode_logs, logs_request_from_json
from otel_eval.evaluate.bounds import bound
from otel_eval.evaluate.conventions import fields
from otel_eval.evaluate.detectors import Detectors
from otel_eval.evaluate.predict import Predictor, load_model
from otel_eval.evaluate.predict.config import DEFAULT_MODEL_FILE
from otel_eval.evaluate.trajectory import build_trajectory
from otel_eval.store.base import evaluation_row

T = TypeVar("T")
STAGES = ("decode", "trajectory", "detectors", "predict", "bound", "store_row")
TAU_RUNS = Path("tau-bench/airline/gpt-4o-airline.runs.json")
TAU_SLICE = 60  # runs of the tau-bench airline file: the dataset side of the corpus


@dataclass(frozen=True)
class Work:
    """Python calls of one stage over one corpus, and what they were spent on."""

    calls: int
    spans: int
    runs: int

    @property
    def per_span(self) -> float:
        return self.calls / self.spans

    @property
    def per_run(self) -> float:
        return self.calls / self.runs


class _Counter:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            self.calls += 1


@contextmanager
def _quiet() -> Iterator[None]:
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def count(fn: Callable[[], T]) -> tuple[int, T]:
    """(Python calls made by ``fn()``, its result), on the second of two runs. The collector
    is off while counting: a ``gc.callbacks`` hook another test's import left (Hypothesis
    registers one) is a call at each collection, and when collections fall depends on what
    ran before."""
    with _quiet():
        fields._plans.clear()
        fn()  # warm every cache the stage keeps
        counter = _Counter()
        enabled = gc.isenabled()
        gc.collect()
        gc.disable()
        sys.setprofile(counter)
        try:
            result = fn()
        finally:
            sys.setprofile(None)
            if enabled:
                gc.enable()
    return counter.calls, result


Requests = list[tuple[str, Any]]


def conformance_requests(skip: Container[str] = ()) -> list[Requests]:
    """Every committed conformance recording's OTLP requests, parsed (outside the count);
    but the "stack/scenario" cells in ``skip``."""
    return [recording_requests(stack, scenario) for stack, scenario in corpus.recorded()
            if f"{stack}/{scenario}" not in skip]


def recording_requests(stack: str, scenario: str) -> Requests:
    """One conformance recording's OTLP requests, parsed."""
    reqs: Requests = []
    for item in corpus.recording(stack, scenario)["requests"]:
        if item["signal"] == "traces":
            reqs.append(("traces", request_from_dict(item["body"])))
        else:
            reqs.append(("logs", logs_request_from_json(json.dumps(item["body"]).encode())))
    return reqs


def decode_recordings(recordings: list[Requests]) -> list[Trace]:
    """Decode stage: the requests -> one trace per trace id, spans and log records."""
    traces = []
    for reqs in recordings:
        spans: dict[str, list[Span]] = defaultdict(list)
        logs: dict[str, list[LogEvent]] = defaultdict(list)
        for signal, request in reqs:
            if signal == "traces":
                for s in decode_request(request).spans:
                    spans[s.trace_id].append(s)
            else:
                for r in decode_logs(request).records:
                    logs[r.trace_id].append(r)
        traces += [Trace(tid, ss, "complete", logs=logs.get(tid, [])) for tid, ss in spans.items()]
    return traces


def with_attribute(trace: Trace, i: int, key: str, value: Any) -> Trace:
    """``trace`` with span ``i``'s attribute ``key`` set to ``value`` (None: removed), the
    other spans as they are (the corpus mutated: tests/evaluation/test_unknown_values.py,
    bench/unknown_values.py)."""
    sp = trace.spans[i]
    attrs = dict(sp.attributes)
    if value is None:
        del attrs[key]
    else:
        attrs[key] = value
    spans = list(trace.spans)
    spans[i] = Span(sp.trace_id, sp.span_id, sp.parent_span_id, sp.name, sp.start_ns,
                    sp.end_ns, kind=sp.kind, status=sp.status,
                    status_message=sp.status_message, attributes=attrs,
                    events=list(sp.events), resource=sp.resource, scope=sp.scope,
                    parent_remote=sp.parent_remote)
    return Trace(trace.trace_id, spans, trace.status, logs=trace.logs)


def tau_slice(datasets: Path, tmp: Path) -> Path:
    path = tmp / "airline-slice.runs.json"
    path.write_text(json.dumps(json.loads((datasets / TAU_RUNS).read_text())[:TAU_SLICE]))
    return path


def stage_work(decode: Callable[[], list[Trace]],
               stages: tuple[str, ...] = STAGES) -> dict[str, Work]:
    """Each of ``stages`` counted over the traces ``decode`` gives (itself the decode stage),
    running the stages before the last one asked for, in pipeline order."""
    config = Config()
    detectors = Detectors(config.detectors)
    last = max(STAGES.index(s) for s in stages)
    calls, traces = count(decode)
    spans, runs = sum(len(t.spans) for t in traces), len(traces)
    out = {"decode": Work(calls, spans, runs)}
    if last >= 1:
        calls, trajectories = count(lambda: [build_trajectory(t, config.trajectory)
                                             for t in traces])
        out["trajectory"] = Work(calls, spans, runs)
    if last >= 2:
        calls, judged = count(lambda: [detectors.evaluate(t) for t in trajectories])
        out["detectors"] = Work(calls, spans, runs)
    if last >= 3:
        predictor = Predictor(load_model(DEFAULT_MODEL_FILE))
        unbounded = [_evaluation(t, f, v)
                     for t, (f, v) in zip(trajectories, judged, strict=True)]
        calls, _ = count(lambda: [predictor.predict(e) for e in unbounded])
        out["predict"] = Work(calls, spans, runs)
    if last >= 4:
        # bound changes what it cuts: each count gets evaluations of its own (the warm-up
        # pass of ``count`` bounds the first ones)
        made = iter([[_evaluation(t, f, v) for t, (f, v) in zip(trajectories, judged,
                                                                strict=True)]
                     for _ in range(2)])
        evaluations: list[Evaluation] = []

        def bounded() -> None:
            evaluations[:] = next(made)
            for e in evaluations:
                bound(e, config.trajectory)

        calls, _ = count(bounded)
        out["bound"] = Work(calls, spans, runs)
    if last >= 5:
        calls, _ = count(lambda: [evaluation_row(e) for e in evaluations])
        out["store_row"] = Work(calls, spans, runs)
    return {k: out[k] for k in stages}


def _evaluation(trajectory: Trajectory, findings: Any, verdict: Any) -> Evaluation:
    return Evaluation(trajectory, findings, verdict, evaluated_at_ns=1_764_547_200 * 10**9)
