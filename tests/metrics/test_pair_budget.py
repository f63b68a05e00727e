"""No sender may lock the others out of the (service, agent) pair budget (issue r223).

The budget (``admin.metrics_max_pairs``) was first come, first served for the process's life:
250 junk agent names put every later agent under ``_other``/``_other`` until a restart, and
an alert then paged without naming the agent. Agents the configuration names are admitted
outside the budget."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from support.clock import ManualClock
from test_series_cap import _evaluation

from otel_eval.app.config import Config, build
from otel_eval.app.service import Service
from otel_eval.base.results import Evaluation, Verdict
from otel_eval.telemetry.metrics import OTHER, Metrics


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


def test_a_configured_name_under_many_services_fills_a_budget_of_its_own() -> None:
    # a sender spoofing a configured agent's name under junk service names: held pairs stay
    # bounded (they were admitted without limit), and the other budget's agents keep theirs
    m = Metrics(CollectorRegistry(), max_pairs=3, reserved_agents=("planner",))
    m.evaluation_stored(_evaluation(0, "shop", "searcher"), 0.1, False)
    for i in range(1, 50):
        m.evaluation_stored(_evaluation(i, f"junk-{i}", "planner"), 0.1, False)
    m.evaluation_stored(_evaluation(50, "shop", "critic"), 0.1, False)
    assert [_completed(m, f"junk-{i}", "planner") for i in (1, 3, 4)] == [1, 1, None]
    assert [_completed(m, "shop", a) for a in ("searcher", "critic")] == [1, 1]
    assert _completed(m, OTHER, OTHER) == 46


def test_the_service_admits_the_agents_its_configuration_names(tmp_path: Path) -> None:
    config = build(Config, {"store": {"path": str(tmp_path / "store.db")},
                            "detectors": {"agents": {"planner": {}}},
                            "judge": {"sampling": {"rate_by_agent": {"critic": 0.5}}}})
    service = Service(config, registry=CollectorRegistry())  # constructed, nothing opened
    _flood(service.metrics)
    for i, agent in enumerate(("planner", "critic")):
        service.metrics.evaluation_stored(_evaluation(1_000 + i, "shop", agent), 0.1, False)
        assert _completed(service.metrics, "shop", agent) == 1, agent


HOUR = 3_600.0


def _families(m: Metrics) -> dict[str, set[tuple[str, str]]]:
    """Every family with a service label -> the (service, agent) pairs of its samples (agent
    "" for a family without one)."""
    out: dict[str, set[tuple[str, str]]] = {}
    for fam in m.registry.collect():
        for s in fam.samples:
            if "service" in s.labels:
                out.setdefault(fam.name, set()).add((s.labels["service"],
                                                     s.labels.get("agent", "")))
    return out


def _predicted(i: int, service: str, agent: str) -> Evaluation:
    ev = _evaluation(i, service, agent)
    ev.prediction = {"p_success": 0.2}
    ev.verdict = Verdict(False, [], outcome="failure")
    return ev


def test_an_idle_pair_gives_its_place_back_on_every_metric() -> None:
    clock = ManualClock()
    m = Metrics(CollectorRegistry(), max_pairs=2, metrics_expiration_s=2 * HOUR, clock=clock)
    m.evaluation_stored(_predicted(0, "junk", "junk-0"), 0.1, False)
    m.sessions.completed({"service": "junk", "agent": "junk-0", "turns": 2,
                          "verdict": {"passed": False}}, again=False)
    m.evaluation_stored(_predicted(1, "shop", "planner"), 0.1, False)
    clock.advance(HOUR)
    m.evaluation_stored(_predicted(2, "shop", "planner"), 0.1, False)  # planner stays busy
    m.evaluation_stored(_evaluation(3, "shop", "late"), 0.1, False)
    assert _completed(m, "shop", "late") is None  # the budget is full: _other
    assert m.prediction.rolling_auc() == {} and ("junk", "junk-0") in m.prediction._windows
    clock.advance(1.5 * HOUR)  # junk-0 idle 2.5 h, planner 1.5 h
    m.evaluation_stored(_evaluation(4, "shop", "late"), 0.1, False)
    assert _completed(m, "shop", "late") == 1  # junk-0's place
    assert _completed(m, "shop", "planner") == 2
    families = _families(m)
    # the idle pair is gone from every per-trace family together, so ratios stay right
    stale = {name for name, pairs in families.items() if ("junk", "junk-0") in pairs
             or ("junk", "") in pairs}
    assert stale == set()
    assert ("shop", "planner") in families["otel_eval_prediction_p_success"]
    assert ("junk", "junk-0") not in m.prediction._windows
    m.evaluation_stored(_evaluation(5, "shop", "third"), 0.1, False)
    assert _completed(m, "shop", "third") is None  # one place given back, and taken


def test_a_returning_pair_starts_its_counters_again() -> None:
    clock = ManualClock()
    m = Metrics(CollectorRegistry(), max_pairs=1, metrics_expiration_s=HOUR, clock=clock)
    m.evaluation_stored(_evaluation(0, "shop", "planner"), 0.1, False)
    clock.advance(2 * HOUR)
    m.evaluation_stored(_evaluation(1, "shop", "other"), 0.1, False)  # planner expired
    m.evaluation_stored(_evaluation(2, "shop", "planner"), 0.1, False)  # other holds it
    assert _completed(m, OTHER, OTHER) == 1
    clock.advance(2 * HOUR)
    m.evaluation_stored(_evaluation(3, "shop", "planner"), 0.1, False)
    assert _completed(m, "shop", "planner") == 1  # a counter reset: rate() takes it as one


def test_configured_agents_expire_but_always_come_back() -> None:
    clock = ManualClock()
    m = Metrics(CollectorRegistry(), max_pairs=1, metrics_expiration_s=HOUR, clock=clock,
                reserved_agents=("planner",))
    for i in range(50):  # a configured name under many services: its own budget's place
        m.evaluation_stored(_evaluation(i, f"svc-{i}", "planner"), 0.1, False)
    clock.advance(2 * HOUR)  # idle: given back
    m.evaluation_stored(_evaluation(99, "shop", "planner"), 0.1, False)
    assert set(_families(m)["otel_eval_traces_completed"]) == {("shop", "planner"),
                                                                (OTHER, OTHER)}


def test_the_expiry_check_is_amortised() -> None:
    clock = ManualClock()
    m = Metrics(CollectorRegistry(), metrics_expiration_s=HOUR, clock=clock)
    sweeps: list[float] = []
    pairs = m.traces.cap._pairs
    expire = pairs.expire

    def counted(before: float, drop: Any) -> set[tuple[str, str]]:
        sweeps.append(before)
        return expire(before, drop)

    pairs.expire = counted  # type: ignore[method-assign]
    for i in range(3_000):  # 3,000 traces over 10 minutes: a scan each minute, not each trace
        clock.advance(0.2)
        m.evaluation_stored(_evaluation(i, "shop", f"agent-{i % 300}"), 0.1, False)
    assert 9 <= len(sweeps) <= 11, len(sweeps)


def test_expiry_off_keeps_every_pair() -> None:
    clock = ManualClock()
    m = Metrics(CollectorRegistry(), max_pairs=1, metrics_expiration_s=0, clock=clock)
    m.evaluation_stored(_evaluation(0, "shop", "planner"), 0.1, False)
    clock.advance(1_000 * HOUR)
    m.evaluation_stored(_evaluation(1, "shop", "other"), 0.1, False)
    assert _completed(m, "shop", "planner") == 1 and _completed(m, OTHER, OTHER) == 1


def test_the_service_expires_idle_pairs_on_its_clock(tmp_path: Path) -> None:
    clock = ManualClock()
    config = build(Config, {"store": {"path": str(tmp_path / "store.db")},
                            "admin": {"metrics_max_pairs": 1, "metrics_expiration_s": HOUR}})
    service = Service(config, registry=CollectorRegistry(), clock=clock)
    service.metrics.evaluation_stored(_evaluation(0, "junk", "junk-0"), 0.1, False)
    clock.advance(2 * HOUR)
    service.metrics.evaluation_stored(_evaluation(1, "shop", "planner"), 0.1, False)
    assert _completed(service.metrics, "shop", "planner") == 1
    assert _completed(service.metrics, "junk", "junk-0") is None
