"""Judge replies -> the ``judge`` object of the per-trace JSON.

    {"mode": "combined" | "separate", "model": ...,
     "judges": {name: {status, scores, critiques, tokens, cost_usd, latency_s, model, calls,
                       [error], [via], [steps | turns | criteria | by_node]}},
     "overall": {status, process_score, outcome_score, outcome_source, passed, lucky_pass,
                 tau_task, tau_process},
     "totals": {tokens, cost_usd, latency_s, calls, failed_calls}}

``cost_usd`` is null (unknown) when a call's was: litellm has no price for the model and none
is configured (``judge.input_cost_per_token_usd``); never $0 for it.

Every score has a critique: ``critiques`` items are {dimension, score, text, span_id, node,
step_index} (span_id/node/step_index None for trace-level ones), the shape the issue-clustering
stage reads. A judge whose call failed has its failure status and no scores.
"""

from __future__ import annotations

from collections.abc import Iterable
from statistics import fmean
from typing import Any

from otel_eval.base.judgement import OK_STATUSES
from otel_eval.evaluate.judge.client import CallResult
from otel_eval.evaluate.judge.prompting import Request
from otel_eval.evaluate.judge.render import StepRef
from otel_eval.evaluate.judge.schemas import PROCESS_DIMENSIONS


def _critique(dimension: str, score: float, text: str, ref: StepRef | None = None,
              **extra: Any) -> dict[str, Any]:
    return {"dimension": dimension, "score": score, "text": text,
            "span_id": ref.span_id if ref else None, "node": ref.node if ref else None,
            "step_index": ref.index if ref else None, **extra}


class Collector:
    """Accumulates the entries of one trace's judges as calls complete."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.judges: dict[str, dict[str, Any]] = {}
        self.failed_calls = 0  # calls whose status is not "ok" (the run's summary counts them)

    def entry(self, name: str) -> dict[str, Any]:
        if name not in self.judges:
            self.judges[name] = {"status": "ok", "scores": {}, "critiques": [],
                                 "tokens": {"input": 0, "output": 0}, "cost_usd": 0.0,
                                 "latency_s": 0.0, "model": self.model, "calls": 0}
        return self.judges[name]

    def skipped(self, name: str, reason: str) -> dict[str, Any]:
        e = self.entry(name)
        e["status"], e["reason"] = "skipped", reason
        return e

    def add_call(self, name: str, result: CallResult) -> dict[str, Any]:
        e = self.entry(name)
        e["tokens"]["input"] += result.input_tokens
        e["tokens"]["output"] += result.output_tokens
        e["cost_usd"] = _added(e["cost_usd"], result.cost_usd)
        e["latency_s"] = round(e["latency_s"] + result.latency_s, 6)
        e["calls"] += 1
        self.failed_calls += result.status != "ok"
        if result.status != "ok" and e["status"] == "ok":  # the first failure names the status
            e["status"], e["error"] = result.status, result.error
        return e

    def apply(self, request: Request, result: CallResult) -> None:
        """Record one call: figures on the call's entry, scores on each part's entry."""
        self.add_call(request.name if request.name == "combined" else request.parts[0], result)
        for part in request.parts:
            e = self.entry(part)
            if request.name == "combined":
                e["via"] = "combined"
                if result.status != "ok" and e["status"] == "ok":
                    e["status"], e["error"] = result.status, result.error
            if result.data is None:
                continue
            data = result.data
            if part == "step":
                self._steps(e, request.steps, data["steps"])
            elif part == "process":
                self._turns(e, request.steps, data["turns"])
            else:
                reply = data if request.name != "combined" else data[part]
                text = reply.get("critique", reply.get("reasoning", ""))
                e["scores"][part] = float(reply["score"])
                e["critiques"].append(_critique(part, float(reply["score"]), text))

    def _steps(self, e: dict[str, Any], refs: tuple[StepRef, ...], items: list[Any]) -> None:
        by_index = {i["step"]: i for i in items}
        for ref in refs:
            item = by_index[ref.index]
            e["critiques"].append(_critique("step", float(item["score"]), item["critique"], ref))

    def _turns(self, e: dict[str, Any], refs: tuple[StepRef, ...], items: list[Any]) -> None:
        by_index = {i["turn"]: i for i in items}
        turns = e.setdefault("turns", [])
        for ref in refs:
            item = by_index[ref.index]
            scores = {d: float(item[d]["score"]) for d in PROCESS_DIMENSIONS}
            turns.append({"step_index": ref.index, "span_id": ref.span_id, "node": ref.node,
                          "span_ids": list(ref.span_ids), "stage": item["stage"],
                          "scores": scores, "score": round(fmean(scores.values()), 6)})
            for d in PROCESS_DIMENSIONS:
                e["critiques"].append(_critique(d, scores[d], item[d]["reasoning"], ref,
                                                stage=item["stage"]))

    def finish_stepwise(self) -> None:
        """Aggregate step and process scores once all chunks are in (only if all succeeded)."""
        step = self.judges.get("step")
        if step and step["status"] == "ok" and step["critiques"]:
            values = [c["score"] for c in step["critiques"]]
            step["scores"] = {"step": round(fmean(values), 6), "step_min": min(values)}
            nodes: dict[str, list[float]] = {}
            for c in step["critiques"]:
                nodes.setdefault(c["node"] or "(main)", []).append(c["score"])
            step["by_node"] = {n: round(fmean(v), 6) for n, v in nodes.items()}
        proc = self.judges.get("process")
        if proc and proc["status"] == "ok" and proc.get("turns"):
            turns = proc["turns"]
            proc["scores"] = {d: round(fmean(t["scores"][d] for t in turns), 6)
                              for d in PROCESS_DIMENSIONS}
            proc["scores"]["process"] = round(fmean(t["score"] for t in turns), 6)
        for e in self.judges.values():  # a failed judge reports no partial scores
            if e["status"] not in OK_STATUSES:
                e["scores"] = {}

    def spent(self) -> dict[str, Any]:
        """``{"totals": ...}`` when any call was made, else nothing: what a judgement that
        ended before its object was written (it raised, or was cut) paid, for the object
        that says so (``workqueue.skipped_judge``)."""
        return {"totals": self.totals()} if any(e["calls"] for e in self.judges.values()) \
            else {}

    def totals(self) -> dict[str, Any]:
        es = self.judges.values()
        return {"tokens": {"input": sum(e["tokens"]["input"] for e in es),
                           "output": sum(e["tokens"]["output"] for e in es)},
                "cost_usd": _total(e["cost_usd"] for e in es),
                "latency_s": round(sum(e["latency_s"] for e in es), 6),
                "calls": sum(e["calls"] for e in es), "failed_calls": self.failed_calls}


def _added(a: float | None, b: float | None) -> float | None:
    """A cost plus another; unknown (None) when either is."""
    return None if a is None or b is None else round(a + b, 8)


def _total(costs: Iterable[float | None]) -> float | None:
    total: float | None = 0.0
    for cost in costs:
        total = _added(total, cost)
    return total


def overall(judges: dict[str, dict[str, Any]], label: float | None, tau_task: float,
            tau_process: float) -> dict[str, Any]:
    """Dual-threshold verdict: passed = outcome >= tau_task and process >= tau_process
    (None when either score is missing); lucky_pass = outcome passes, process does not."""
    process = judges.get("process", {}).get("scores", {}).get("process")
    outcome, source = (label, "label") if label is not None else (
        judges.get("outcome", {}).get("scores", {}).get("outcome"), "judge")
    statuses = [e["status"] for e in judges.values()]
    failed = [s for s in statuses if s not in OK_STATUSES]
    status = "ok" if not failed else ("partial" if len(failed) < len(statuses) else failed[0])
    passed = lucky = None
    if outcome is not None and process is not None:
        passed = outcome >= tau_task and process >= tau_process
        lucky = outcome >= tau_task and process < tau_process
    return {"status": status, "process_score": process, "outcome_score": outcome,
            "outcome_source": source if outcome is not None else None, "passed": passed,
            "lucky_pass": lucky, "tau_task": tau_task, "tau_process": tau_process}
