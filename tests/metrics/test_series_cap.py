"""Issue 11 (memory): /metrics is bounded per metric, label combinations included.

Capping each label (100 services, 100 agents) still let 10,000 traces make 500,056 series and
a 153 MB /metrics page; the per-metric combination cap folds the overflow into one
all-``_other`` series and counts it.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from otel_eval.base import model
from otel_eval.telemetry.metrics import OTHER, Metrics, render


def _evaluation(i: int, service: str, agent: str) -> model.Evaluation:
    steps = [model.Step(index=0, span_id="01" * 8, parent_span_id=None, kind="llm", name="chat",
                        input_tokens=10, output_tokens=2, cost_usd=0.001)]
    traj = model.Trajectory(trace_id=f"{i + 1:032x}", source="otlp", status="complete",
                            steps=steps, service=service, agent=agent, start_ns=0,
                            end_ns=1_000_000_000)
    finding = model.Finding("loop", "repeated_call", "warning", "loop")
    return model.Evaluation(traj, [finding], model.Verdict(False, []))


def _series_count(registry: CollectorRegistry) -> int:
    return sum(len(m.samples) for m in registry.collect())


def test_label_combinations_are_capped_per_metric_and_counted() -> None:
    m = Metrics(CollectorRegistry(), max_names=100, max_series_per_metric=200)
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
