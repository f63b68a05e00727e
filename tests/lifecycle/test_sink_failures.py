"""A sink that raises is logged and counted, and the others still run (``assemble.finishing``):
counted as ``otel_eval_sink_dropped_total`` with the sink's own name (the label its sender's
drops carry: ``forward``, ``events``) and a reason from the senders' closed set
(``outputs.sender.DROP_REASONS``), by the items that call dropped (the trace's spans for
pass-through, its log records for the events), never by a class name and a count of one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from otel_eval.app.config import Config, replace
from otel_eval.assemble.engine import Engine
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.base.model import Span
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.stage import InProcess
from otel_eval.outputs.config import ExportConfig
from otel_eval.outputs.events import EvaluationEvents
from otel_eval.outputs.forward import Forwarder
from otel_eval.outputs.sender import DROP_REASONS
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics

T = "7c" * 16


def _run() -> list[Span]:
    """A run of 5 spans: a root agent span over two model calls, one a failed tool call."""
    def span(i: int, parent: int | None, op: str, **attrs: Any) -> Span:
        return Span(T, f"{i:016x}", f"{parent:016x}" if parent else None, f"{op} {i}",
                    10 * i, 10 * i + 5, attributes={"gen_ai.operation.name": op, **attrs})
    return [span(2, 1, "chat"), span(3, 1, "chat"),
            span(4, 1, "execute_tool", **{"gen_ai.tool.name": "search"}),
            span(5, 1, "execute_tool", **{"gen_ai.tool.name": "search"}),
            span(1, None, "invoke_agent", **{"gen_ai.agent.name": "planner"})]


class _Exploding(Exception):
    pass


def _raise(*_: Any, **__: Any) -> Any:
    raise _Exploding("a sink's bug")


def _dropped(metrics: Metrics) -> dict[tuple[str, str], float]:
    return {(s.labels["sink"], s.labels["reason"]): s.value
            for m in metrics.registry.collect() for s in m.samples
            if s.name == "otel_eval_sink_dropped_total"}


@pytest.mark.parametrize("which", ["forward", "events"])
def test_a_raising_sink_counts_its_items_under_its_name_and_a_known_reason(
        tmp_path: Path, which: str) -> None:
    metrics = Metrics(CollectorRegistry())
    export = ExportConfig(forward_endpoint="127.0.0.1:1", events_endpoint="127.0.0.1:1")
    forward, events = Forwarder(export, metrics), EvaluationEvents(export, metrics)
    broken = forward if which == "forward" else events
    broken._sender.submit = _raise  # type: ignore[method-assign]  # never started: no I/O
    now = [0.0]
    cfg = replace(Config(), **{"assembly.grace_s": 1.0})
    store = Store(str(tmp_path / "store.db"))
    engine = Engine(InProcess(Evaluator(cfg), store),
                    StoreHealth(store.location, clock=lambda: now[0]), metrics,
                    assembly=cfg.assembly, clock=lambda: now[0], sinks=[forward, events])
    spans = _run()
    engine.submit(spans)
    now[0] += 1000
    engine.tick()
    assert engine.process() == 1
    stored = store.get(T)
    assert stored is not None
    records = len(stored["findings"]) + 1  # one per finding, one for the verdict
    expected = len(spans) if which == "forward" else records
    dropped = _dropped(metrics)
    assert dropped == {(which, "internal_error"): expected}
    assert all(reason in DROP_REASONS for _, reason in dropped)
    # the other sink still ran: its request is queued (never started, so still there)
    other = events if which == "forward" else forward
    assert other._sender.queued_items == (records if which == "forward" else len(spans))
    store.close()


def test_every_sink_is_named_from_the_closed_set() -> None:
    from otel_eval.evaluate.judge.stage import JudgeStage
    from otel_eval.outputs.kafka import ResultsPublisher
    from otel_eval.outputs.sender import SINK_NAMES

    names = [Forwarder.name, EvaluationEvents.name, JudgeStage.name, ResultsPublisher.name]
    assert sorted(names) == sorted(SINK_NAMES)
