"""Stage: evaluate. One released trace -> one ``Evaluation`` (trajectory, findings, verdict).

The same function serves ``serve`` (called by the engine's worker) and ``eval`` (called per
file trace), so streaming and offline results are the same by construction. A trace that is
no agent run (``trajectory.is_run``: only setup operations, such as a ``create_agent`` span
in a trace of its own) gets no evaluation (None): callers count it as skipped (``not_a_run``).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from otel_eval.base.configcheck import ConfigError
from otel_eval.base.loglimit import LogLimiter, failed_line
from otel_eval.base.model import Trace
from otel_eval.base.results import Evaluation, Finding
from otel_eval.base.steps import Trajectory
from otel_eval.base.text import valid_text
from otel_eval.evaluate.agent_inference import AgentHistory, infer_agent
from otel_eval.evaluate.bounds import bound
from otel_eval.evaluate.detectors import (
    Detectors,
    ReferenceSet,
    evaluation_error,
    load_references,
    verdict_of,
)
from otel_eval.evaluate.trajectory import build_trajectory, is_run
from otel_eval.evaluate.trajectory.build import bare_trajectory

if TYPE_CHECKING:
    from otel_eval.evaluate.config import EvaluatorSettings
    from otel_eval.evaluate.predict import Model, Predictor

log = logging.getLogger(__name__)
# A trace shape that breaks evaluation (a detector, the trajectory, the predictor) breaks it
# for every trace of that shape: one line per this many seconds, the rest counted in it.
FAILURE_LOG_INTERVAL_S = 10.0
_SUCCESS = {"success", "succeeded", "pass", "passed", "true", "1", "1.0", "ok", "resolved"}
_FAILURE = {"failure", "failed", "fail", "false", "0", "0.0", "error", "unresolved"}


def normalize_outcome(value: object) -> str | None:
    """Map the many ways an outcome is written (bool, 1/0, 1.0/0.0 rewards, words) to
    success/failure; anything else (0.5, 2, -7, NaN, inf: a score, not an outcome) is None.
    Shared by ``POST /v1/feedback`` (None: 400), the outcome attribute (None: not known)
    and the training labels (None: a bad labels line)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "success" if value else "failure"
    if isinstance(value, int | float):
        return "success" if value == 1 else "failure" if value == 0 else None
    text = str(value).strip().lower()
    if text in _SUCCESS:
        return "success"
    if text in _FAILURE:
        return "failure"
    return None


def _predictor(config: EvaluatorSettings, model: Model | None = None) -> Predictor | None:
    """The success predictor when ``prediction.model_path`` is set: of ``model`` when given
    (the one the serving process loaded, handed to its workers), else of the file; a file
    that cannot be used is a ``ConfigError`` (at startup, never per trace)."""
    if not config.prediction.enabled:
        return None
    from otel_eval.evaluate.predict import ModelFileError, Predictor

    if model is not None:
        return Predictor(model)

    try:
        return Predictor.from_file(config.prediction.model_file)
    except ModelFileError as e:
        raise ConfigError([f"prediction.model_path: {e}"]) from None


_MORE_REASONS = re.compile(r"\((\d+) more reasons\)")


def _unseen_reasons(body: dict[str, Any]) -> list[str]:
    """The reasons of the stored verdict that come from error findings its result was cut of
    (``bounds``: the last findings go, counted as ``findings_dropped`` by the
    ``result_truncated`` finding): they cannot be re-judged, so they stay reasons. The stored
    findings kept are the first ones, so their errors are the verdict's first reasons; the
    reasons may be cut too, ending with "(N more reasons)"."""
    cut = next((f.get("attributes") or {} for f in body.get("findings", [])
                if f.get("kind") == "result_truncated"), {})
    if not cut.get("findings_dropped"):
        return []
    seen = sum(f.get("severity") == "error" for f in body.get("findings", []))
    reasons = [r for r in (body.get("verdict") or {}).get("reasons") or []
               if isinstance(r, str)]
    more = _MORE_REASONS.fullmatch(reasons[-1]) if reasons else None
    listed = reasons[:-1] if more else reasons
    hidden = (int(more.group(1)) if more else 0) - max(0, seen - len(listed))
    return listed[seen:] + ([f"({hidden} more reasons)"] if hidden > 0 else [])


def _unseen_findings(body: dict[str, Any]) -> list[Finding]:
    """Stand-ins (detector, kind and severity) for the findings the stored result was cut of
    (``bounds``: ``findings_dropped_kinds`` of the ``result_truncated`` finding), so that the
    lucky-pass check sees a loop or an unrecovered error only those would show."""
    cut = next((f.get("attributes") or {} for f in body.get("findings", [])
                if f.get("kind") == "result_truncated"), {})
    kinds = cut.get("findings_dropped_kinds")
    return [Finding(k[0], k[1], k[2], "", [], [], {})
            for k in (kinds if isinstance(kinds, list) else [])
            if isinstance(k, list) and len(k) == 3 and all(isinstance(v, str) for v in k)]


class Evaluator:
    def __init__(self, config: EvaluatorSettings, *, references_path: str | None = None,
                 wall_clock: Callable[[], float] = time.time,
                 model: Model | None = None, references: ReferenceSet | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``references`` (the set the serving process loaded, handed to its workers) wins
        over ``references_path``, which wins over ``detectors.references_path``.
        ``failure_log`` limits the per-trace lines of failures, ``store_log`` those of
        rows the store would not take (``evaluate.stage``) (``clock``: their time);
        evaluating is single-threaded (the engine's thread, or a worker process)."""
        self.config = config
        refs = references if references is not None else (
            load_references(references_path) if references_path else None)  # else config's
        self.failure_log = LogLimiter(FAILURE_LOG_INTERVAL_S, clock)
        self.store_log = LogLimiter(FAILURE_LOG_INTERVAL_S, clock)
        self.detectors = Detectors(config.detectors, refs, self.failure_log)
        self._wall_clock = wall_clock
        self.predictor = _predictor(config, model)

    def trajectory(self, trace: Trace) -> Trajectory:
        return build_trajectory(trace, self.config.trajectory)

    def evaluate(self, trace: Trace, outcome: str | None = None,
                 history: AgentHistory | None = None, *,
                 bounded: bool = True) -> Evaluation | None:
        """Total: a trajectory that cannot be built is evaluated as an empty one with the
        error recorded (an ``evaluation_error`` finding), never an exception. With a
        ``history``, a run no span named gets the agent the service's completed runs
        show (``agent_inference``), before the detectors read their per-agent settings.
        None when the trace is no agent run (``handoff.NOT_A_RUN``): nothing to evaluate.
        ``bounded=False`` leaves the result uncut (``bounds.bound``), as the predictor reads
        it: what ``otel-eval train`` reads, which stores and prints nothing."""
        if not is_run(trace):
            return None
        try:
            traj = self.trajectory(trace)
        except Exception as e:  # the boundary of building (adapters have their own)
            self.failed_line("building the trajectory of trace %s failed: %s",
                             trace.trace_id, type(e).__name__)
            traj = bare_trajectory(trace)
            traj.errors.append({"part": "trajectory", "error": type(e).__name__})
        if history is not None:
            try:
                infer_agent(traj, history)
            except Exception as e:  # the store's failure: the agent stays unknown
                self.failed_line("reading the agent history for trace %s failed: %s",
                                 trace.trace_id, type(e).__name__)
        if outcome is None:
            outcome = normalize_outcome(traj.root_attributes.get(
                self.config.trajectory.outcome_attribute))
        findings, verdict = self.detectors.evaluate(traj, outcome)
        evaluation = Evaluation(traj, findings, verdict,
                                evaluated_at_ns=int(self._wall_clock() * 1e9))
        if self.predictor is not None:
            evaluation.prediction = self._predict(evaluation)
        if bounded:
            bound(evaluation, self.config.trajectory, self.failure_log)
        return evaluation

    def failed_line(self, what: str, *args: object) -> None:
        """Log a per-trace failure ``what % args``, unless ``failure_log`` leaves it out."""
        failed_line(self.failure_log, log, what, *args)

    def _predict(self, evaluation: Evaluation) -> Any:
        """The predictor's boundary: when it raises, the trace has no prediction and keeps
        its findings (before, its failure became the whole evaluation's)."""
        assert self.predictor is not None
        try:
            return self.predictor.predict(evaluation)
        except Exception as e:
            self.failed_line("predicting the outcome of trace %s failed: %s",
                             evaluation.trace_id, type(e).__name__)
            return None

    def with_outcome(self, body: dict[str, Any], outcome: str) -> dict[str, Any]:
        """A stored per-trace object re-judged with an outcome learnt later (POST /v1/feedback):
        the findings that depend on the outcome are what the detectors give with it (a
        failure nothing recovered from: ``recovery`` ``gave_up`` or ``unrecovered``), the
        lucky-pass check re-runs on the stored findings and the verdict follows."""
        from otel_eval.evaluate.detectors import lucky_pass, recovery
        from otel_eval.evaluate.detectors.calls import Context

        cfg = self.config.detectors
        findings = [recovery.with_outcome(Finding(**f), outcome, cfg)
                    for f in body.get("findings", []) if f.get("detector") != "lucky_pass"]
        if "lucky_pass" in self.detectors.enabled_for(body.get("agent")):
            stub = Trajectory(body["trace_id"], body.get("source", ""), body["status"], [])
            seen = (*findings, *_unseen_findings(body))
            findings += lucky_pass.detect(stub, cfg, Context(outcome=outcome, findings=seen))
        old = body.get("verdict") or {}
        extra = {k: v for k, v in old.items() if k not in ("passed", "reasons", "outcome")}
        verdict = verdict_of(findings, outcome, extra)
        verdict.reasons += _unseen_reasons(body)
        verdict.passed = not verdict.reasons
        return {**body, "findings": [f.to_json() for f in findings],
                "verdict": verdict.to_json()}

    def failed(self, trace: Trace, error: BaseException) -> Evaluation:
        """A stand-in stored when evaluation raised: the trace is accounted for, not lost,
        with a verdict and the ``evaluation_error`` finding that says why (never null)."""
        finding = evaluation_error("evaluate", error)
        return Evaluation(bare_trajectory(trace), [finding],
                          verdict_of([finding]),
                          evaluated_at_ns=int(self._wall_clock() * 1e9),
                          error=valid_text(f"{type(error).__name__}: {str(error)[:200]}"))
