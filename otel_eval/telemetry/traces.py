"""Self-metrics of each evaluated trace (``otel_eval_traces_*``, ``otel_eval_trace_*``,
``otel_eval_detector_*``, the completion-to-verdict latency): derived from one stored
evaluation, labelled within the budget of ``labels.SeriesCap``. The metric list and the
invariants between them: ``telemetry.metrics``."""

from __future__ import annotations

import threading
from typing import Any

from otel_eval.base.results import NOT_ENDED_KINDS, Evaluation, Finding, budget_exceeded
from otel_eval.base.steps import Trajectory, tokens_total
from otel_eval.telemetry.declare import Declarer
from otel_eval.telemetry.labels import UNKNOWN, CappedNames, SeriesCap

TOOL_ERROR_KINDS = ("selection", "arguments", "runtime")

_STEPS_BUCKETS = (0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233)
_TOKEN_BUCKETS = (100, 300, 1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000)
_COST_BUCKETS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
_DURATION_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class TraceMetrics:
    def __init__(self, d: Declarer, cap: SeriesCap, max_tools_per_agent: int) -> None:
        self.cap = cap
        self._max_tools = max_tools_per_agent
        # (service, agent) labels -> its tool names: keyed by the agent alone, two services'
        # agents of one name shared one budget (the first one's tools made the other's _other)
        self._tools: dict[tuple[str, str], CappedNames] = {}
        self._tools_lock = threading.Lock()
        cap.on_expired(self._forget_tools)
        c, sa = d.counter, ("service", "agent")
        self.c_completed = c("traces_completed", "Traces evaluated.", [*sa, "status"])
        self.c_superseded = c("traces_superseded",
                              "Re-evaluations of an already counted trace (late spans).", sa)
        self.c_loop = c("traces_with_loop", "Traces with a loop finding.", sa)
        self.c_nonterm = c("traces_non_terminated",
                           "Traces of runs that did not end (non-termination findings).", sa)
        self.c_budget = c("traces_budget_overruns",
                          "Budget overrun findings (*_exceeded), by budget.", [*sa, "budget"])
        self.c_over_budget = c("traces_over_budget", "Traces with a budget overrun finding "
                               "(*_exceeded), once however many budgets they overran.", sa)
        self.c_verdicts = c("traces_verdicts", "Verdicts, passed or failed.", [*sa, "verdict"])
        self.c_lucky = c("traces_lucky_passes", "Passed traces flagged as lucky passes.", sa)
        self.c_agent_source = c("traces_agent_source",
                                "Traces evaluated, by where their agent's name came from "
                                "(span, child_span, inferred_history, unknown).",
                                ["service", "source"])
        self.c_findings = c("detector_findings", "Detector findings.",
                            [*sa, "detector", "kind", "severity"])
        self.c_tool_errors = c("detector_tool_errors", "Tool-call errors, by kind and tool.",
                               [*sa, "kind", "tool"])
        h = d.histogram
        self.h_steps = h("trace_steps", "Steps per trace: top-level tool calls, a code action "
                         "once (counts.steps, --budget steps; a trace whose evaluation failed "
                         "is not observed).", sa, _STEPS_BUCKETS)
        self.h_tokens = h("trace_tokens", "Input + output tokens per trace (a trace none of "
                          "whose spans recorded tokens is not observed).", sa, _TOKEN_BUCKETS)
        self.h_cost = h("trace_cost_usd", "Cost per trace, USD.", sa, _COST_BUCKETS)
        self.h_duration = h("trace_duration_seconds", "Duration of the agent run.", sa,
                            _DURATION_BUCKETS)
        self.h_verdict_latency = h("evaluation_completion_to_verdict_seconds",
                                   "Trace release to stored verdict.", (), LATENCY_BUCKETS)

    def _series(self, metric: Any, *values: str) -> Any:
        return self.cap.series(metric, *values)

    def evaluation_stored(self, evaluation: Evaluation, completion_to_verdict_s: float,
                          superseded: bool) -> tuple[str, str]:
        """Every per-trace metric of one stored evaluation (``telemetry.metrics``'s docstring);
        the trace's (service, agent) labels after the budget."""
        t = evaluation.trajectory
        exemplar = {"trace_id": t.trace_id}
        self.h_verdict_latency.observe(max(0.0, completion_to_verdict_s), exemplar)
        service, agent = self.cap.pair(t.service, t.agent)
        if superseded:
            self._series(self.c_superseded, service, agent).inc()
            return service, agent
        self._series(self.c_completed, service, agent, t.status).inc()
        self._series(self.c_agent_source, service, t.agent_source).inc()
        self._count_findings(evaluation, service, agent, exemplar)
        verdict = evaluation.verdict
        if verdict is not None:
            outcome = "passed" if verdict.passed else "failed"
            self._series(self.c_verdicts, service, agent, outcome).inc()
        self._observe_trace(t, service, agent, exemplar)
        return service, agent

    def _count_findings(self, evaluation: Evaluation, service: str, agent: str,
                        exemplar: dict[str, str]) -> None:
        detectors: set[str] = set()
        not_ended = over_budget = False
        for f in evaluation.findings:
            detectors.add(f.detector)
            not_ended = not_ended or (f.detector == "non_termination"
                                      and f.kind in NOT_ENDED_KINDS)
            self._series(self.c_findings, service, agent, f.detector, f.kind,
                         f.severity).inc()
            if budget_exceeded(f.detector, f.kind):
                budget = str(f.attributes.get("budget") or f.kind or UNKNOWN)[:64]
                self._series(self.c_budget, service, agent, budget).inc(exemplar=exemplar)
                over_budget = True
            elif f.detector == "tool_call" and f.kind in TOOL_ERROR_KINDS:
                tool = self._tool((service, agent),
                                  self._tool_name(evaluation.trajectory, f))
                self._series(self.c_tool_errors, service, agent, f.kind, tool).inc()
        if "loop" in detectors:
            self._series(self.c_loop, service, agent).inc(exemplar=exemplar)
        if not_ended:
            self._series(self.c_nonterm, service, agent).inc(exemplar=exemplar)
        if over_budget:
            self._series(self.c_over_budget, service, agent).inc(exemplar=exemplar)
        if "lucky_pass" in detectors:
            self._series(self.c_lucky, service, agent).inc(exemplar=exemplar)

    def _observe_trace(self, t: Trajectory, service: str, agent: str,
                       exemplar: dict[str, str]) -> None:
        usage = t.usage()
        if t.steps:  # none at all: the stand-in of a run whose evaluation failed
            # (``bare_trajectory``): its steps are unknown, not 0
            self._series(self.h_steps, service, agent).observe(len(t.action_steps), exemplar)
        tokens = tokens_total(usage)
        if tokens is not None:  # unknown (no LLM step recorded any) is no 0-token run
            self._series(self.h_tokens, service, agent).observe(tokens, exemplar)
        if usage["cost_usd"] is not None:
            self._series(self.h_cost, service, agent).observe(usage["cost_usd"], exemplar)
        self._series(self.h_duration, service, agent).observe(t.duration_s, exemplar)

    @staticmethod
    def _tool_name(t: Trajectory, f: Finding) -> str | None:
        name = f.attributes.get("tool") or f.attributes.get("tool_name")
        if isinstance(name, str) and name:
            return name
        by_span = {s.span_id: s for s in t.steps}
        for sid in f.span_ids:
            step = by_span.get(sid)
            if step is not None and step.tool_name:
                return step.tool_name
        for i in f.step_indexes:
            if 0 <= i < len(t.steps) and t.steps[i].tool_name:
                return t.steps[i].tool_name
        return None

    def _forget_tools(self, pairs: set[tuple[str, str]]) -> None:
        """Expired pairs' tool names: a pair admitted again starts its tool budget anew."""
        with self._tools_lock:
            for pair in pairs:
                self._tools.pop(pair, None)

    def _tool(self, pair: tuple[str, str], tool: str | None) -> str:
        capped = self._tools.get(pair)
        if capped is None:
            with self._tools_lock:
                capped = self._tools.setdefault(pair, CappedNames(self._max_tools))
        return capped(tool)
