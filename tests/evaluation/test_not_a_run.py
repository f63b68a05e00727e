"""A trace made only of setup operations (GenAI ``create_agent``: the span some frameworks
make when the agent object is built, in a trace of its own) is no agent run: no evaluation
row, no trace metric, counted in ``otel_eval_evaluation_skipped_total{reason="not_a_run"}``
(``trajectory.is_run``, decided once by convention). Offline ``eval`` skips it the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from otel_eval.app.config import Config, replace
from otel_eval.app.offline import EvalRun
from otel_eval.assemble.engine import Engine
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.base.model import Span, Trace
from otel_eval.decode.encode import encode_spans
from otel_eval.decode.otlp_json import request_to_json
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.stage import InProcess
from otel_eval.evaluate.trajectory import is_run
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics

SETUP, RUN = "a" * 32, "b" * 32


def _span(trace: str, sid: int, attrs: dict[str, Any], parent: int | None = None,
          name: str = "span") -> Span:
    return Span(trace, f"{sid:016x}", f"{parent:016x}" if parent is not None else None, name,
                1, 2, attributes=attrs)


CREATE = {"gen_ai.operation.name": "create_agent", "gen_ai.agent.name": "weather_agent"}
INVOKE = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather_agent"}
CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}


@pytest.mark.parametrize(("spans", "run"), [
    pytest.param([(CREATE, None)], False, id="create_agent alone"),
    pytest.param([(CREATE, None), (CREATE, None)], False, id="two agents built"),
    pytest.param([(CREATE, None), (INVOKE, None), (CHAT, 2)], True,
                 id="create_agent under a remote parent, with the run"),
    pytest.param([(INVOKE, None)], True, id="an invocation"),
    pytest.param([(CHAT, None)], True, id="a model call"),
    pytest.param([({}, None)], True, id="a span no convention knows: not known to be setup"),
    # the marker decides the convention: an OpenInference AGENT span is an action, whatever
    # GenAI key it also carries
    pytest.param([({**CREATE, "openinference.span.kind": "AGENT"}, None)], True,
                 id="another convention's marker"),
    pytest.param([({"gen_ai.operation.name": ["create_agent"]}, None)], True,
                 id="an operation that is not a string"),
])
def test_a_trace_is_a_run_unless_every_span_is_a_setup_operation(
        spans: list[tuple[dict[str, Any], int | None]], run: bool) -> None:
    trace = Trace(SETUP, [_span(SETUP, i + 1, a, p) for i, (a, p) in enumerate(spans)],
                  "complete")
    assert is_run(trace) is run


def test_a_trace_with_no_spans_is_still_evaluated() -> None:
    assert is_run(Trace(SETUP, [], "complete"))
    assert Evaluator(Config()).evaluate(Trace(SETUP, [], "complete")) is not None


class _Sink:
    """What the sinks are handed: evaluations, and the traces passed on without one."""

    def __init__(self) -> None:
        self.exported: list[str] = []
        self.passed_on: list[list[str]] = []

    def export(self, trace: Trace, evaluation: Any) -> None:
        self.exported.append(evaluation.trace_id)

    def pass_on(self, trace: Trace) -> None:
        self.passed_on.append([s.span_id for s in trace.spans])


def _engine(tmp_path: Path, sink: _Sink | None = None
            ) -> tuple[Engine, Store, Metrics, list[float]]:
    now = [0.0]
    metrics = Metrics(CollectorRegistry())
    cfg = replace(Config(), **{"assembly.grace_s": 1.0})
    store = Store(str(tmp_path / "store.db"))
    engine = Engine(InProcess(Evaluator(cfg), store),
                    StoreHealth(store.location, clock=lambda: now[0]), metrics,
                    assembly=cfg.assembly, clock=lambda: now[0], sinks=[sink] if sink else ())
    return engine, store, metrics, now


def test_a_setup_only_trace_is_counted_skipped_not_evaluated(tmp_path: Path) -> None:
    sink = _Sink()
    engine, store, metrics, now = _engine(tmp_path, sink)
    setup = [_span(SETUP, 1, CREATE, name="create_agent weather_agent")]
    run = [_span(RUN, 1, INVOKE, name="invoke_agent weather_agent"),
           _span(RUN, 2, CHAT, parent=1, name="chat gpt-4o")]
    engine.submit(setup + run)
    now[0] += 1000
    engine.tick()
    assert engine.process() == 2  # both released and done
    assert [b["trace_id"] for b in store.latest(10)] == [RUN]  # one row: the run's

    def sample(name: str, **labels: str) -> float:
        return metrics.registry.get_sample_value(name, labels) or 0.0

    assert sample("otel_eval_evaluation_skipped_total", reason="not_a_run") == 1
    assert sample("otel_eval_evaluation_skipped_total", reason="already_evaluated") == 0
    completed = sum(s.value for m in metrics.registry.collect() for s in m.samples
                    if s.name == "otel_eval_traces_completed_total")
    assert completed == 1  # the run only
    assert engine.finishing.queued_spans == 0  # done all the same: its budget released
    # the sinks get the run's evaluation, and the setup trace's spans to pass on (pass-through
    # forwards them unstamped: otel-eval in the trace path swallows no span)
    assert sink.exported == [RUN] and sink.passed_on == [[f"{1:016x}"]]
    store.close()


def test_offline_eval_gives_no_evaluation_for_a_setup_only_trace(tmp_path: Path) -> None:
    path = tmp_path / "otlp.json"
    spans = [_span(SETUP, 1, CREATE, name="create_agent weather_agent"),
             _span(RUN, 2, INVOKE, name="invoke_agent weather_agent")]
    path.write_text(json.dumps(request_to_json(encode_spans(spans))), encoding="utf-8")
    run = EvalRun(Config(), [str(path)])
    assert [e.trace_id for e in run.evaluations()] == [RUN]
    assert run.not_runs == 1
