"""Stage: evaluate (after the fact). The judge checked against people: how well every judge
score and the predictor's ``p_success`` agree with the outcomes users recorded.

    store.labelled (feedback outcome + stored evaluation) -> scores_of(body) per run
      -> per (service, agent, score) and per score over every agent:
         AUC (ties half) with its 95 % score interval (Hanley-McNeil variance),
         Cohen's kappa of "score >= pass threshold" against the outcome, with its 95 % interval
         (Wilson's on the observed agreement); p_success per model label (the serving
         model's first): a model swap leaves the old model's runs in the store

Plain Python (``otel-eval calibrate`` and ``GET /v1/calibration`` run it at serve time; the
service computes it at most once per ``refresh_s``, shared by the API and the gauges, and
answers with ``MAX_GROUPS`` rows at most). A score is read from a run only when the run has
it: the counts say how many runs each figure rests on. The verdict is never read: once an
outcome is recorded it decides the verdict, so agreeing with it would prove nothing. AUC needs
both outcomes among a group's runs (else None), and so does kappa (with one outcome it is 0
whatever the score says).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.outputs.deps import Deps
from otel_eval.store.base import EvaluationStore
from otel_eval.telemetry.auc import auc

Z95 = 1.959964  # two-sided 95 % normal quantile
P_SUCCESS = "p_success"
ALL_AGENTS = "*"  # the group of every agent's runs (service "*" too)
# process-grader scores are held to tau_process, everything else to tau_task
_PROCESS_SCORES = frozenset({"process", "goal_alignment", "efficiency",
                             "information_utilization", "result_verification"})


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Pass thresholds the kappa is computed at (``JudgeConfig`` / ``PredictionConfig``)."""

    tau_task: float = 0.5  # judge scores other than the process grader's (0-1)
    tau_process: float = 0.6  # the process grader's scores (0-1)
    p_success: float = 0.5  # the predictor's probability of success

    def of(self, score: str) -> float:
        if score == P_SUCCESS:
            return self.p_success
        return self.tau_process if score in _PROCESS_SCORES else self.tau_task


def model_of(body: dict[str, Any]) -> str:
    """The label of the model that made the stored ``p_success`` ("" when not recorded)."""
    model = (body.get("prediction") or {}).get("model")
    return model if isinstance(model, str) else ""


def scores_of(body: dict[str, Any]) -> dict[str, float]:
    """Every judge score and ``p_success`` a stored evaluation carries, by name (a judge's
    dimensions: ``step``, ``step_min``, ``process`` and its four, ``trace``, ``outcome``,
    ``rubric``)."""
    out: dict[str, float] = {}
    judges = (body.get("judge") or {}).get("judges") or {}
    for entry in judges.values():
        for name, value in (entry.get("scores") or {}).items() if isinstance(entry, dict) \
                else ():
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[name] = float(value)
    p = (body.get("prediction") or {}).get(P_SUCCESS)
    if isinstance(p, int | float) and not isinstance(p, bool):
        out[P_SUCCESS] = float(p)
    return out


def hanley_mcneil_variance(area: float, positives: int, negatives: int) -> float:
    """The variance of an AUC over ``positives`` x ``negatives`` runs (Hanley & McNeil 1982)."""
    q1, q2 = area / (2 - area), 2 * area * area / (1 + area)
    return max(0.0, (area * (1 - area) + (positives - 1) * (q1 - area * area)
                     + (negatives - 1) * (q2 - area * area)) / (positives * negatives))


def hanley_mcneil(area: float, positives: int, negatives: int) -> tuple[float, float]:
    """95 % interval of an AUC: the AUCs ``t`` in [0, 1] the observed one is within 1.96
    standard errors of, the Hanley-McNeil variance taken at ``t`` (a score interval, as
    Wilson's for a proportion; Newcombe 2006). The variance taken at the observed AUC (the
    Wald interval) is 0 at an AUC of 0 or 1, so 1 success and 1 failure ranked right gave
    [1, 1]; this gives [0.21, 1]. Found by bisection on each side (the bounds to 1e-9)."""
    def inside(t: float) -> bool:
        return (area - t) ** 2 <= Z95 * Z95 * hanley_mcneil_variance(t, positives, negatives)

    def bound(out: float, into: float) -> float:  # out is outside (or the edge), into inside
        if inside(out):
            return out
        for _ in range(30):
            mid = (out + into) / 2
            out, into = (out, mid) if inside(mid) else (mid, into)
        return into
    return bound(0.0, area), bound(1.0, area)


def kappa(predicted: list[bool], actual: list[bool]) -> tuple[float, float, float] | None:
    """Cohen's kappa of two yes/no ratings of the same runs with a 95 % interval: Wilson's
    interval of the observed agreement po mapped through kappa = (po - pe) / (1 - pe), the
    chance agreement pe held fixed (as the large-sample SE sqrt(po (1 - po) / n) / (1 - pe)
    does, whose interval was 0 wide when the runs all agree or all disagree). None with one
    outcome only: against a constant rating every rating has kappa 0 (a judge wrong on every
    run and one right on all but one alike), so it says nothing of the score; a score on one
    side of its threshold with both outcomes keeps its 0 (a gate that lets everything by)."""
    n = len(actual)
    if not n:
        return None
    po = sum(p == a for p, a in zip(predicted, actual, strict=True)) / n
    yes_p, yes_a = sum(predicted) / n, sum(actual) / n
    if yes_a in (0, 1):
        return None
    pe = yes_p * yes_a + (1 - yes_p) * (1 - yes_a)
    z2 = Z95 * Z95
    centre = (po + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(po * (1 - po) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    k = (po - pe) / (1 - pe)
    return (k, max(-1.0, (centre - half - pe) / (1 - pe)),
            min(1.0, (centre + half - pe) / (1 - pe)))


def agreement(scores: list[float], successes: list[bool], threshold: float
              ) -> dict[str, Any]:
    """AUC and kappa of one score against the recorded outcomes, with counts."""
    pos = sum(successes)
    out: dict[str, Any] = {"runs": len(scores), "successes": pos,
                           "failures": len(scores) - pos, "threshold": threshold,
                           "auc": None, "auc_ci95": None, "kappa": None, "kappa_ci95": None}
    area = auc(scores, successes)
    if area is not None:
        lo, hi = hanley_mcneil(area, pos, len(scores) - pos)
        out.update(auc=round(area, 4), auc_ci95=[round(lo, 4), round(hi, 4)])
    found = kappa([s >= threshold for s in scores], successes)
    if found is not None:
        out.update(kappa=round(found[0], 4), kappa_ci95=[round(found[1], 4),
                                                         round(found[2], 4)])
    return out


def calibrate(labelled: Iterable[tuple[str, dict[str, Any]]],
              thresholds: Thresholds = Thresholds(), serving: str | None = None
              ) -> dict[str, Any]:
    """The agreement of every score with the recorded outcomes, per (service, agent, score)
    and per score over all agents (service and agent ``"*"``); ``p_success`` per model too
    (``model``: the label its runs were predicted by, None for a judge score; two models'
    predictions are not one score), the ``serving`` model's first; rows sorted."""
    groups: dict[tuple[str, str, str, str | None], tuple[list[float], list[bool]]] = \
        defaultdict(lambda: ([], []))
    runs = 0
    for outcome, body in labelled:
        if outcome not in ("success", "failure"):
            continue
        runs += 1
        who = (str(body.get("service") or ""), str(body.get("agent") or ""))
        for name, value in scores_of(body).items():
            model = model_of(body) if name == P_SUCCESS else None
            # once each: a run of service "*" and agent "*" is in every agent's row only
            for service, agent in dict.fromkeys((who, (ALL_AGENTS, ALL_AGENTS))):
                scores, labels = groups[(service, agent, name, model)]
                scores.append(value)
                labels.append(outcome == "success")

    def order(key: tuple[str, str, str, str | None]) -> tuple[Any, ...]:
        return (*key[:3], key[3] != serving, key[3] or "")
    rows = [{"service": service, "agent": agent, "score": name, "model": model,
             **agreement(scores, labels, thresholds.of(name))}
            for (service, agent, name, model), (scores, labels)
            in sorted(groups.items(), key=lambda kv: order(kv[0]))]
    return {"labelled_runs": runs, "thresholds": {"tau_task": thresholds.tau_task,
                                                  "tau_process": thresholds.tau_process,
                                                  P_SUCCESS: thresholds.p_success},
            "serving_model": serving, "groups": rows}


# Labelled runs read at most (the newest outcomes recorded).
MAX_LABELLED_RUNS = 10_000
# Rows GET /v1/calibration answers with at most (as many as /ui/calibration shows): 1,000
# labelled runs of 1,000 agents made 10,010 rows, 6.4 MB of JSON per request.
MAX_GROUPS = 2_000


def report(store: EvaluationStore, judge: JudgeConfig, limit: int = MAX_LABELLED_RUNS,
           p_success: float = 0.5, serving: str | None = None) -> dict[str, Any]:
    """``calibrate`` over the store's labelled runs, at the judge's pass thresholds and the
    predictor's (``prediction.pass_threshold``), the ``serving`` model's rows first."""
    return calibrate(store.labelled(limit),
                     Thresholds(judge.tau_task, judge.tau_process, p_success), serving)


def capped(found: dict[str, Any], max_groups: int = MAX_GROUPS) -> dict[str, Any]:
    """``found`` with at most ``max_groups`` rows: every agent's (``*``) first, then the rows
    resting on the most labelled runs, in the report's order; ``groups_left_out`` counts the
    rows left out (0 when none)."""
    rows = found.get("groups") or []
    if len(rows) <= max_groups:
        return {**found, "groups_left_out": 0}
    ranked = sorted(range(len(rows)), key=lambda i: (rows[i]["agent"] != ALL_AGENTS,
                                                     -rows[i]["runs"], i))
    kept = sorted(ranked[:max_groups])
    return {**found, "groups": [rows[i] for i in kept],
            "groups_left_out": len(rows) - len(kept)}


def build(config: JudgeConfig, deps: Deps, p_success: float = 0.5,
          serving: str | None = None,
          opened: Callable[[], bool] = lambda: True) -> Callable[[], dict[str, Any]]:
    """``GET /v1/calibration`` of ``serve``: ``report`` over the service's store, computed at
    most once per ``refresh_s`` by the agreement gauges (``metrics.calibration``), which
    serve the same report on scrapes (``p_success``: the ``serving`` model's rows); the
    answer capped (``capped``). ``opened``: whether the store is open (a scrape while it is
    migrated or closed computes nothing)."""
    gauges = deps.metrics.calibration
    gauges.serve_from(lambda: report(deps.store, config, p_success=p_success,
                                     serving=serving),
                      deps.store.feedback_version,  # an outcome another process recorded
                      opened=opened)
    return lambda: capped(gauges.report())
