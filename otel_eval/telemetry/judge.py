"""The judge's self-metrics (``otel_eval_judge_*``): its calls, tokens, spend, latency, scores,
skips and queue depth, as ``evaluate.judge.stage`` reports them through ``JudgeObserver``.
The metric list and its invariants: ``telemetry.metrics``."""

from __future__ import annotations

from collections.abc import Iterable

from otel_eval.telemetry.declare import Declarer
from otel_eval.telemetry.traces import LATENCY_BUCKETS


class JudgeMetrics:
    """The judge's ``JudgeObserver`` (otel_eval.evaluate.judge.observer) over Prometheus metrics."""

    def __init__(self, d: Declarer) -> None:
        c, h = d.counter, d.histogram
        self.c_calls = c("judge_calls", "LLM judge calls, by judge and status.",
                         ["judge", "status"])
        self.c_tokens = c("judge_tokens", "Judge tokens, by direction.", ["judge", "direction"])
        self.c_cost = c("judge_cost_usd", "Judge spend, USD (litellm's accounting; calls of a "
                        "model with no price are not in it: their cost is unknown).",
                        ["judge"])
        self.c_usage_implausible = c(
            "judge_usage_implausible", "Judge replies whose reported token usage was "
            "missing or implausible (no prompt tokens, negative, fractional, over twice the "
            "text's size), replaced by an estimate.", ["judge"])
        self.h_latency = h("judge_call_duration_seconds", "Judge call latency.", ["judge"],
                           LATENCY_BUCKETS)
        self.c_skipped = c("judge_skipped", "Traces and sessions not judged, by reason.",
                           ["reason"])
        self.h_score = h("judge_score", "Judge scores (0..1), by judge and dimension.",
                         ["judge", "dimension"], tuple(i / 10 for i in range(1, 11)))
        self.g_queue = d.gauge("judge_queue_depth", "Evaluations waiting for the judge.")

    def call(self, judge: str, status: str, input_tokens: int, output_tokens: int,
             cost_usd: float | None, latency_s: float) -> None:
        self.c_calls.labels(judge, status).inc()
        self.c_tokens.labels(judge, "input").inc(input_tokens)
        self.c_tokens.labels(judge, "output").inc(output_tokens)
        if cost_usd is not None:  # unknown (no price for the model): not counted as $0
            self.c_cost.labels(judge).inc(cost_usd)
        self.h_latency.labels(judge).observe(latency_s)

    def usage_implausible(self, judge: str, replies: int) -> None:
        self.c_usage_implausible.labels(judge).inc(replies)

    def skip(self, reason: str) -> None:
        self.c_skipped.labels(reason).inc()

    def call_statuses(self, judges: Iterable[str], statuses: Iterable[str]) -> None:
        """Declare each (call name, status) series at 0 (given by the judge stage), so
        increase() sees a judge's first failed call and OtelEvalJudgeFailing counts it."""
        for judge in judges:
            for status in statuses:
                self.c_calls.labels(judge, status)

    def skip_reasons(self, reasons: Iterable[str]) -> None:
        """Declare each skip reason's series at 0 (``reasons``: evaluate.judge.SKIP_REASONS,
        given by the judge stage: this package sits below it), so increase() sees the first
        skip and OtelEvalJudgeSkipping fires on it."""
        for reason in reasons:
            self.c_skipped.labels(reason)

    def score(self, judge: str, dimension: str, value: float) -> None:
        self.h_score.labels(judge, dimension).observe(value)

    def queue_depth(self, n: int) -> None:
        self.g_queue.set(n)
