"""Output (part): what the run list and the run page say about whether a run worked, beside
the detectors' verdict: the predictor's ``p_success`` (against ``prediction.pass_threshold``),
the judge's own outcome and what it cost, the outcome people recorded, where they disagree,
and an agent the service's history named (``agent_inference``) marked as inferred.

Every figure is read from the stored per-trace object as it is; a value that is missing or
not a number is unknown and says nothing (never a pass or a fail).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otel_eval.outputs.ui.html import Html, h
from otel_eval.outputs.ui.text import usd
from otel_eval.outputs.ui.values import short

# what the judge's own outcome is read from, first found: the outcome grader's score, else
# its verdict when the outcome score was the judge's (not a label)
OUTCOME_SCORE = "outcome"


def number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value == value
    return float(value) if ok else None


def p_success(body: Mapping[str, Any]) -> float | None:
    prediction = body.get("prediction")
    return number(prediction.get("p_success")) if isinstance(prediction, dict) else None


def p_badge(body: Mapping[str, Any], threshold: float) -> Html:
    """``0.31`` marked as predicted to fail below ``threshold``; "" without a prediction."""
    p = p_success(body)
    if p is None:
        return Html("")
    fails = p < threshold
    return h("span", f"{p:.2f}", class_="p " + ("p-fail" if fails else "p-pass"),
             title=(f"predicted to {'fail' if fails else 'pass'}: p_success {p:.3f} "
                    f"{'<' if fails else '>='} prediction.pass_threshold {threshold:g}"))


def agent_name(body: Mapping[str, Any], limit: int = 60) -> Html:
    """The agent, marked ``inferred`` when the service's history named it (no span did)."""
    agent = short(body.get("agent") or "", limit)
    if body.get("agent_source") != "inferred_history" or not agent:
        return h("span", agent)
    return h("span", agent, " ", h("span", "inferred", class_="mark inferred",
                                   title="no span of this run named its agent: inferred "
                                         "from the service's completed runs "
                                         "(agent_source inferred_history)"))


def judge_scores(judge: Mapping[str, Any] | None) -> dict[str, float]:
    """Every judge's scores by name (the stored ``judge.judges``, not ``overall``)."""
    out: dict[str, float] = {}
    for entry in ((judge or {}).get("judges") or {}).values():
        scores = entry.get("scores") if isinstance(entry, dict) else None
        for name, value in (scores or {}).items() if isinstance(scores, dict) else ():
            found = number(value)
            if found is not None:
                out[str(name)] = found
    return out


def judge_outcome(judge: Mapping[str, Any] | None) -> tuple[bool, str] | None:
    """(the judge says the run succeeded, why) from its own outcome score at ``tau_task``;
    None when the judge gave none (no judge, a failed call, a label decided it)."""
    overall = (judge or {}).get("overall") or {}
    tau = number(overall.get("tau_task")) if isinstance(overall, dict) else None
    tau = 0.5 if tau is None else tau
    score = judge_scores(judge).get(OUTCOME_SCORE)
    if score is not None:
        return score >= tau, f"outcome score {score:.2f} {'>=' if score >= tau else '<'} {tau:g}"
    return None


def recorded(body: Mapping[str, Any]) -> str | None:
    """The outcome recorded for the run (``POST /v1/feedback`` or the outcome attribute)."""
    verdict = body.get("verdict")
    outcome = verdict.get("outcome") if isinstance(verdict, dict) else None
    return outcome if outcome in ("success", "failure") else None


def disagreement(body: Mapping[str, Any], threshold: float) -> list[str]:
    """Sentences, one per grader (the judge, the predictor) whose view of the run is not the
    outcome recorded for it; empty when none is recorded or every one agrees."""
    outcome = recorded(body)
    if outcome is None:
        return []
    success = outcome == "success"
    out = []
    judged = judge_outcome(body.get("judge"))
    if judged is not None and judged[0] != success:
        out.append(f"The judge disagrees with the recorded outcome ({outcome}): it says the "
                   f"run {'succeeded' if judged[0] else 'failed'} ({judged[1]}).")
    p = p_success(body)
    if p is not None and (p >= threshold) != success:
        out.append(f"The success predictor disagrees with the recorded outcome ({outcome}): "
                   f"p_success {p:.2f} against a pass threshold of {threshold:g}.")
    return out


def judge_cost(body: Mapping[str, Any]) -> str | None:
    """What judging this run cost: tokens in+out, USD, calls, and its input as a share of the
    run's own input tokens; None when the judge recorded no totals."""
    judge = body.get("judge")
    totals = judge.get("totals") if isinstance(judge, dict) else None
    if not isinstance(totals, dict):
        return None
    found = totals.get("tokens")
    tokens: dict[str, Any] = found if isinstance(found, dict) else {}
    tin, tout = number(tokens.get("input")) or 0, number(tokens.get("output")) or 0
    calls = number(totals.get("calls")) or 0
    text = (f"judge: {tin:,.0f}+{tout:,.0f} tokens, {usd(number(totals.get('cost_usd')))}, "
            f"{calls:,.0f} call{'s' if calls != 1 else ''}")
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    agent_in = number((usage or {}).get("input_tokens"))
    if agent_in:
        text += f" ({tin / agent_in * 100:.1f} % of the run's input tokens)"
    return text
