"""The agent of a run, and where it came from (``agent_source``): a span that names it, a name
stamped on the spans under it, the service's history of completed runs, or unknown; never a
framework's default name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from otel_eval.app.config import Config, replace
from otel_eval.assemble.engine import Engine
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.base.model import Span, Trace
from otel_eval.evaluate.agent_inference import SERVICE_FINGERPRINT, fingerprints, learned
from otel_eval.evaluate.conventions.agent_names import FRAMEWORK_DEFAULT_AGENT_NAMES, agent_name
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.stage import InProcess
from otel_eval.store import SqliteStore, Store
from otel_eval.telemetry.metrics import Metrics

T = 1_764_547_200 * 10**9
_ids = iter(range(1, 10**6))


def _span(trace: str, name: str, attrs: dict[str, Any], parent: str | None = None,
          service: str = "shop") -> Span:
    return Span(trace, f"{next(_ids):016x}", parent, name, T, T + 10**6, attributes=attrs,
                resource={"service.name": service})


def _chat(trace: str, system: str, tools: list[str], parent: str | None = None,
          **extra: Any) -> Span:
    messages = [{"role": "system", "parts": [{"type": "text", "content": system}]},
                {"role": "user", "parts": [{"type": "text", "content": f"task {trace}"}]}]
    defs = [{"type": "function", "name": t, "parameters": {}} for t in tools]
    return _span(trace, "chat gpt-4o", {"gen_ai.operation.name": "chat",
                                        "gen_ai.input.messages": json.dumps(messages),
                                        "gen_ai.tool.definitions": json.dumps(defs),
                                        **extra}, parent)


def _run(trace: str, agent: str, system: str, tools: list[str],
         ended: bool = True, service: str = "shop") -> Trace:
    """A run of ``agent``: its invoke_agent span (never exported when not ``ended``), one
    chat span under it with the agent's system prompt and tools."""
    root = _span(trace, f"invoke_agent {agent}", {"gen_ai.operation.name": "invoke_agent",
                                                  "gen_ai.agent.name": agent}, None, service)
    chat = _chat(trace, system, tools, root.span_id)
    chat.resource = {"service.name": service}
    spans = [root, chat] if ended else [chat]
    return Trace(trace, spans, "complete" if ended else "incomplete")


@pytest.fixture
def history() -> Any:
    store = SqliteStore(":memory:").open()
    yield store
    store.close()


def _evaluate(evaluator: Evaluator, store: SqliteStore, trace: Trace) -> Any:
    ev = evaluator.evaluate(trace, history=store)
    store.remember_agents(learned([ev]))
    return ev.trajectory


@pytest.mark.parametrize(("value", "name"), [
    ("weather_agent", "weather_agent"), ("OpenAI Agent", None), (" agent ", None),
    ("LangGraph", None), ("CodeAgent", None), ("", None), (None, None),
    ("x" * 1000, "x" * 256)])
def test_a_framework_default_is_no_name(value: str | None, name: str | None) -> None:
    assert agent_name(value) == name
    assert all(n == n.casefold() for n in FRAMEWORK_DEFAULT_AGENT_NAMES)


def test_agent_source_span_child_span_unknown() -> None:
    ev = Evaluator(Config())
    t = ev.evaluate(_run("a" * 32, "planner", "plan", ["search"])).trajectory
    assert (t.agent, t.agent_source) == ("planner", "span")
    # the default name on the agent span gives way to the name the chat span carries
    trace = _run("b" * 32, "OpenAI Agent", "plan", ["search"])
    trace.spans[1].attributes["gen_ai.agent.name"] = "planner"
    t = ev.evaluate(trace).trajectory
    assert (t.agent, t.agent_source) == ("planner", "child_span")
    t = ev.evaluate(_run("c" * 32, "OpenAI Agent", "plan", ["search"])).trajectory
    assert (t.agent, t.agent_source) == (None, "unknown")
    assert ev.evaluate(_run("d" * 32, "", "p", [])).to_json()["agent_source"] == "unknown"


def test_a_hung_run_gets_the_agent_whose_runs_it_resembles(history: SqliteStore) -> None:
    ev = Evaluator(Config())
    for i, (agent, system, tools) in enumerate([("planner", "You plan.", ["search"]),
                                                ("coder", "You code.", ["run_tests"])]):
        t = _evaluate(ev, history, _run(f"{i + 1:032x}", agent, system, tools))
        assert t.agent_source == "span"
    # same system prompt as the coder's runs, its agent span never exported
    t = _evaluate(ev, history, _run("e" * 32, "coder", "You code.", ["run_tests"], False))
    assert (t.agent, t.agent_source) == ("coder", "inferred_history")
    # a new prompt, the planner's tools
    t = _evaluate(ev, history, _run("f" * 32, "x", "New prompt.", ["search"], False))
    assert (t.agent, t.agent_source) == ("planner", "inferred_history")
    # nothing that tells the two agents apart: unknown, not a guess
    t = _evaluate(ev, history, _run("1" * 32, "x", "Other.", ["other"], False))
    assert (t.agent, t.agent_source) == (None, "unknown")
    # an inferred run teaches nothing, a hung one neither
    assert learned([ev.evaluate(_run("2" * 32, "x", "You code.", [], False),
                                history=history)]) == []


def test_a_service_with_one_agent_is_that_agent(history: SqliteStore) -> None:
    ev = Evaluator(Config())
    _evaluate(ev, history, _run("3" * 32, "solo", "S.", ["a"], service="one"))
    t = _evaluate(ev, history, _run("4" * 32, "x", "Unlike.", ["b"], False, service="one"))
    assert (t.agent, t.agent_source) == ("solo", "inferred_history")
    t = _evaluate(ev, history, _run("5" * 32, "x", "S.", ["a"], False, service="two"))
    assert t.agent_source == "unknown"  # another service's history is not this one's


def test_fingerprints_are_hashes_strongest_first() -> None:
    t = Evaluator(Config()).evaluate(_run("6" * 32, "a", "Secret prompt", ["t"])).trajectory
    fps = fingerprints(t)
    assert [f.split(":")[0] for f in fps] == ["system", "tools", "steps", SERVICE_FINGERPRINT]
    assert all("Secret" not in f and len(f) <= 40 for f in fps)


def test_a_batch_recalls_each_kind_of_unnamed_run_once(history: SqliteStore) -> None:
    from otel_eval.evaluate.agent_inference import RecallOnce

    calls: list[str] = []

    class Counting:
        def recall_agent(self, service: str, fps: Any) -> str | None:
            calls.append(service)
            return history.recall_agent(service, fps)

        def remember_agents(self, runs: Any) -> None:
            history.remember_agents(runs)

    ev = Evaluator(Config())
    _evaluate(ev, history, _run("7" * 32, "solo", "S.", ["a"]))
    batch = RecallOnce(Counting())
    for i in range(50):  # an instrumentation that never names the agent: same kind of run
        t = ev.evaluate(_run(f"{i + 1000:032x}", "", "S.", ["a"]), history=batch).trajectory
        assert (t.agent, t.agent_source) == ("solo", "inferred_history")
    assert calls == ["shop"]


def test_runs_remembered_in_batches_are_written_before_any_recall(history: SqliteStore) -> None:
    from otel_eval.evaluate.agent_inference import RememberInBatches

    writes: list[int] = []

    class Counting:
        def recall_agent(self, service: str, fps: Any) -> str | None:
            return history.recall_agent(service, fps)

        def remember_agents(self, runs: Any) -> None:
            writes.append(len(runs))
            history.remember_agents(runs)

    batched = RememberInBatches(Counting(), runs=3)
    batched.remember_agents([("shop", "solo", ["steps:1", SERVICE_FINGERPRINT])])
    batched.remember_agents([])  # a run no span named teaches nothing
    assert writes == []  # held back
    assert batched.recall_agent("shop", ["steps:1"]) == "solo"  # written first
    assert writes == [1]
    for i in range(3):
        batched.remember_agents([("shop", "solo", [f"steps:{i + 2}"])])
    assert writes == [1, 3]  # a full batch in one write
    batched.remember_agents([("shop", "other", ["steps:9"])])
    batched.flush()
    assert writes == [1, 3, 1]
    assert history.recall_agent("shop", ["steps:9"]) == "other"


def test_offline_eval_infers_from_the_runs_before_it_in_the_same_invocation() -> None:
    """``eval`` holds back what named runs teach its history (RememberInBatches): a run that
    no span names still gets the agent of an earlier run of the same invocation."""
    from otel_eval.app.offline import EvalRun

    runs = [_run("a" * 32, "planner", "Plan.", ["plan"]), _run("b" * 32, "coder", "Code.", ["x"]),
            _run("c" * 32, "", "Code.", ["x"], ended=False)]
    evs = list(EvalRun(Config())._evaluated(runs))
    assert [(e.trajectory.agent, e.trajectory.agent_source) for e in evs] == [
        ("planner", "span"), ("coder", "span"), ("coder", "inferred_history")]


def test_the_rows_the_history_bounds_delete_are_counted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store deletes agent history rows to keep its bounds as a batch teaches it: the
    engine counts them by reason (``otel_eval_agent_history_evicted_total``), whichever
    process stored the batch (the count rides on the batch's outcomes). Before, nothing
    counted them: a service whose runs read as ``unknown`` after a flood left no trace why."""
    from otel_eval.store import sqlite as sqlite_store

    monkeypatch.setattr(sqlite_store, "AGENT_HISTORY_ROWS", 1)
    monkeypatch.setattr(sqlite_store, "AGENT_HISTORY_PRUNE_EVERY", 1)
    now = [0.0]
    metrics = Metrics(CollectorRegistry())
    cfg = replace(Config(), **{"assembly.grace_s": 1.0})
    store = Store(str(tmp_path / "store.db"))
    engine = Engine(InProcess(Evaluator(cfg), store),
                    StoreHealth(store.location, clock=lambda: now[0]), metrics,
                    assembly=cfg.assembly, clock=lambda: now[0])
    run = _run(f"{1:032x}", "planner", "You plan.", ["search"])
    taught = len(learned([Evaluator(cfg).evaluate(run)])[0][2])  # rows the run teaches
    engine.submit(run.spans)
    now[0] += 1000
    engine.tick()
    assert engine.process() == 1
    assert taught == 4 and store._db.execute("SELECT COUNT(*) FROM agent_history").fetchone()[
        0] == 1
    assert metrics.registry.get_sample_value("otel_eval_agent_history_evicted_total",
                                             {"reason": "max_rows"}) == taught - 1
    store.close()
