"""No sender may lock the others out of the (service, agent) pair budget (issue r223).

The budget (``admin.metrics_max_pairs``) was first come, first served for the process's life:
250 junk agent names put every later agent under ``_other``/``_other`` until a restart, and
an alert then paged without naming the agent. Agents the configuration names are admitted
outside the budget."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from otel_eval.app.config import Config, build
from otel_eval.app.service import Service
from otel_eval.base.results import Evaluation, Finding, Verdict
from otel_eval.base.steps import Step, Trajectory
from otel_eval.telemetry.metrics import OTHER, Metrics


def _evaluation(i: int, service: str, agent: str) -> Evaluation:
    steps = [Step(index=0, span_id="01" * 8, parent_span_id=None, kind="llm", name="chat",
                  input_tokens=10, output_tokens=2, cost_usd=0.001)]
    traj = Trajectory(trace_id=f"{i + 1:032x}", source="otlp", status="complete",
                      steps=steps, service=service, agent=agent, start_ns=0,
                      end_ns=1_000_000_000)
    return Evaluation(traj, [Finding("loop", "repeated_call", "warning", "loop")],
                      Verdict(False, []))


def _completed(m: Metrics, service: str, agent: str) -> float | None:
    return m.registry.get_sample_value("otel_eval_traces_completed_total", {
        "service": service, "agent": agent, "status": "complete"})


def _flood(m: Metrics, n: int = 250, start: int = 0) -> None:
    for i in range(start, start + n):
        m.evaluation_stored(_evaluation(i, "junk", f"junk-{i}"), 0.1, False)


def test_a_configured_agent_is_admitted_past_a_full_budget() -> None:
    m = Metrics(CollectorRegistry(), reserved_agents=("planner",))
    _flood(m)
    m.evaluation_stored(_evaluation(1_000, "shop", "planner"), 0.1, False)
    m.evaluation_stored(_evaluation(1_001, "shop", "stranger"), 0.1, False)
    assert _completed(m, "shop", "planner") == 1
    assert _completed(m, "shop", "stranger") is None  # the budget still holds for the rest
    assert _completed(m, OTHER, OTHER) == 1


def test_configured_agents_take_no_place_in_the_budget() -> None:
    m = Metrics(CollectorRegistry(), max_pairs=2, reserved_agents=("planner", "critic"))
    for i, agent in enumerate(("planner", "critic", "a", "b", "c")):
        m.evaluation_stored(_evaluation(i, "shop", agent), 0.1, False)
    assert [_completed(m, "shop", a) for a in ("planner", "critic", "a", "b", "c")] == [
        1, 1, 1, 1, None]


def test_the_service_admits_the_agents_its_configuration_names(tmp_path: Path) -> None:
    config = build(Config, {"store": {"path": str(tmp_path / "store.db")},
                            "detectors": {"agents": {"planner": {}}},
                            "judge": {"sampling": {"rate_by_agent": {"critic": 0.5}}}})
    service = Service(config, registry=CollectorRegistry())  # constructed, nothing opened
    _flood(service.metrics)
    for i, agent in enumerate(("planner", "critic")):
        service.metrics.evaluation_stored(_evaluation(1_000 + i, "shop", agent), 0.1, False)
        assert _completed(service.metrics, "shop", agent) == 1, agent
