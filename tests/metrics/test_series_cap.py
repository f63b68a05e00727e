"""/metrics is bounded: one budget of (service, agent) pairs shared by every per-trace metric
(issue 21), and a per-metric backstop on label combinations (issue 11).

Issue 11: capping each label (100 services, 100 agents) still let 10,000 traces make 500,056
series and a 153 MB /metrics page. Issue 21: with a cap per metric (1,000 combinations),
3,000 pairs still made ~50k-65k series lines (each of ~50 metrics its own 1,000), and a ratio
of two metrics that admitted different pairs was wrong.
"""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from otel_eval.base.results import Evaluation, Finding, Verdict
from otel_eval.base.steps import Step, Trajectory
from otel_eval.telemetry.metrics import OTHER, Metrics, render


def _evaluation(i: int, service: str, agent: str) -> Evaluation:
    steps = [Step(index=0, span_id="01" * 8, parent_span_id=None, kind="llm", name="chat",
                  input_tokens=10, output_tokens=2, cost_usd=0.001)]
    traj = Trajectory(trace_id=f"{i + 1:032x}", source="otlp", status="complete",
                      steps=steps, service=service, agent=agent, start_ns=0,
                      end_ns=1_000_000_000)
    finding = Finding("loop", "repeated_call", "warning", "loop")
    return Evaluation(traj, [finding], Verdict(False, []))


DOCS = Path(__file__).resolve().parents[2] / "docs"
# Where the docs give the size of /metrics for 3,000 pairs, as this file's
# test_one_pair_budget_for_every_per_trace_metric measures it.
FIGURES = {"metrics.md": r"3,000 pairs make ([0-9,]+) series lines, ([0-9.]+) MB",
           "transport-security.md": r"3,000 pairs: ([0-9,]+)\s+series lines, ([0-9.]+) MB"}


def _docs_say(lines: int, size: int) -> None:
    """The docs give the figures measured here (metrics.md said 16,323 series lines and
    transport-security.md 16,494, each of another day's metrics, neither today's)."""
    for doc, pattern in FIGURES.items():
        found = re.search(pattern, (DOCS / doc).read_text(encoding="utf-8"))
        assert found is not None, f"{doc} no longer gives the figures for 3,000 pairs"
        assert found.groups() == (f"{lines:,}", f"{size / 1e6:.2f}"), (
            f"{doc}: 3,000 pairs make {lines:,} series lines, {size / 1e6:.2f} MB")


def _series_count(registry: CollectorRegistry) -> int:
    return sum(len(m.samples) for m in registry.collect())


def test_label_combinations_are_capped_per_metric_and_counted() -> None:
    m = Metrics(CollectorRegistry(), max_pairs=100_000, max_series_per_metric=200)
    for i in range(10_000):  # 100 services x 100 agents, each within the per-label cap
        m.evaluation_stored(_evaluation(i, f"svc-{i % 100}", f"agent-{i // 100}"), 0.1, False)
    r = m.registry
    completed = [s for fam in r.collect() if fam.name == "otel_eval_traces_completed"
                 for s in fam.samples if s.name.endswith("_total")]
    assert len(completed) == 201  # 200 combinations + the _other series
    assert sum(s.value for s in completed) == 10_000  # nothing lost, only folded
    assert r.get_sample_value("otel_eval_traces_completed_total", {
        "service": OTHER, "agent": OTHER, "status": OTHER}) == 9_800
    assert r.get_sample_value("otel_eval_metrics_series_overflow_total",
                              {"metric": "otel_eval_traces_completed"}) == 9_800
    page, _ = render(r, None)
    # every per-trace family is bounded: ~201 series each (histograms x buckets), not 10,000
    assert _series_count(r) < 40_000, _series_count(r)
    assert len(page) < 8_000_000, len(page)


def _samples(r: CollectorRegistry, family: str, suffix: str = "_total") -> dict[tuple[str, str],
                                                                             float]:
    out: dict[tuple[str, str], float] = {}
    for fam in r.collect():
        if fam.name == family:
            for s in fam.samples:
                if s.name.endswith(suffix):
                    key = (s.labels["service"], s.labels["agent"])
                    out[key] = out.get(key, 0.0) + s.value
    return out


def test_one_pair_budget_for_every_per_trace_metric() -> None:
    """3,000 (service, agent) pairs: 65,342 series lines before (per-metric caps, each metric
    admitting pairs of its own); one budget of 250 pairs: under 20k, the same pairs on every
    per-trace metric, the rest folded into (_other, _other) on all of them alike."""
    m = Metrics(CollectorRegistry())  # the default budget
    n = 3_000
    for i in range(n):
        ev = _evaluation(i, f"svc-{i % 60}", f"agent-{i // 60}")
        if i % 3:  # a third of the runs loop, the others do not: per-metric sets would differ
            ev.findings = []
        m.evaluation_stored(ev, 0.1, False)
    r = m.registry
    page, _ = render(r, None)
    lines = [ln for ln in page.decode().splitlines() if ln and not ln.startswith("#")]
    assert len(lines) < 20_000, len(lines)
    _docs_say(len(lines), len(page))
    completed = _samples(r, "otel_eval_traces_completed")
    loops = _samples(r, "otel_eval_traces_with_loop")
    steps = _samples(r, "otel_eval_trace_steps", "_count")
    verdicts = _samples(r, "otel_eval_traces_verdicts")
    assert len(completed) == 251 and (OTHER, OTHER) in completed
    assert set(steps) == set(verdicts) == set(completed) >= set(loops)
    # ratios hold per pair and in sum: loops / completed = 1/3 over the folded pairs too
    assert sum(completed.values()) == sum(steps.values()) == sum(verdicts.values()) == n
    assert sum(loops.values()) == n // 3
    assert completed[(OTHER, OTHER)] == n - 250
    assert loops[(OTHER, OTHER)] == sum(1 for i in range(250, n) if i % 3 == 0)
    assert r.get_sample_value("otel_eval_metrics_series_overflow_total",
                              {"metric": "otel_eval_traces_completed"}) is None
