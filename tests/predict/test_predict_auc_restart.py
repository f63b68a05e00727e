"""The rolling AUC after a restart. Its windows live in memory; before, a restart emptied them
and ``otel_eval_prediction_rolling_auc`` stayed absent until ``auc_min_per_class`` new outcomes
of each class arrived (a dashboard lost the figure, an alert on it misfired at every deploy).
Now ``serve`` rebuilds them at start from the outcomes the store holds (POST /v1/feedback),
the last ``auc_window`` of each (service, agent) in one query, of the serving model only; a
pair's gauge is back with its first trace, as its other series are (the budget is the traces
seen: a stored window admits no pair)."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode
from prometheus_client import CollectorRegistry
from sklearn.metrics import roc_auc_score
from support.harness import Harness, running_service

from otel_eval.base.results import Evaluation, Verdict
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.predict.config import PredictionConfig
from otel_eval.telemetry.auc import RollingAuc, auc
from otel_eval.telemetry.metrics import OTHER, Metrics

AUC = "otel_eval_prediction_rolling_auc"
LABELLED = "otel_eval_prediction_labelled_total"
PAIR = {"service": "travel", "agent": "booker"}


def _run(h: Harness, tool_errors: int) -> str:
    """One run of travel/booker (three tool calls, ``tool_errors`` of them failing: the
    default model's p_success falls with them), sent by the SDK's OTLP/gRPC exporter."""
    provider = TracerProvider(resource=Resource.create({"service.name": "travel"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=h.grpc_target,
                                                                     insecure=True)))
    tracer = provider.get_tracer("test-agent")
    with tracer.start_as_current_span("invoke_agent booker", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "booker"}) as root:
        for i in range(3):
            with tracer.start_as_current_span("execute_tool book", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "book",
                    "gen_ai.tool.call.arguments": f'{{"seat": {i}}}'}) as tool:
                if i < tool_errors:
                    tool.set_status(Status(StatusCode.ERROR, "no such seat"))
        trace_id = f"{root.get_span_context().trace_id:032x}"
    provider.shutdown()
    return trace_id


def _labelled_then_restarted(tmp_path: Path, **changes: object) -> None:
    settings = {"prediction.auc_min_per_class": 1, **changes}
    outcomes = {0: "failure", 1: "success", 2: "failure", 3: "success"}  # ranked half wrong
    with running_service(tmp_path, **settings) as h:
        ids = {errors: _run(h, errors) for errors in outcomes}
        assert h.release() == len(ids)
        p = {}
        for errors, tid in ids.items():
            stored = h.svc.feedback(tid, outcomes[errors])
            assert stored is not None
            p[errors] = stored["prediction"]["p_success"]
        want = roc_auc_score([outcomes[e] == "success" for e in ids], [p[e] for e in ids])
        assert h.sample(AUC, **PAIR) == pytest.approx(want)
    with running_service(tmp_path, **settings) as h:  # the same store, a new process
        assert h.svc.registry.get_sample_value(AUC, PAIR) is None  # no trace of it seen yet
        _run(h, 1)  # the pair's first trace since the restart: no outcome yet
        assert h.release() == 1
        assert h.svc.registry.get_sample_value(AUC, PAIR) == pytest.approx(want)
        # a corrected outcome replaces its stored entry (one entry per trace, as before)
        h.svc.feedback(ids[0], "success")
        want = roc_auc_score([e != 2 for e in ids], [p[e] for e in ids])
        assert h.sample(AUC, **PAIR) == pytest.approx(want)


def test_the_rolling_auc_is_rebuilt_from_the_store_at_start(tmp_path: Path) -> None:
    _labelled_then_restarted(tmp_path)


def test_the_rolling_auc_is_rebuilt_from_postgresql_at_start(tmp_path: Path,
                                                              postgresql_url: str) -> None:
    _labelled_then_restarted(tmp_path, **{"store.url": postgresql_url})


def _stored(i: int, agent: str, p: float, outcome: str) -> tuple[dict[str, object], str]:
    """A row of ``store.labelled``: the parts of a stored body it reads, and the outcome."""
    return {"trace_id": f"{i:032x}", "service": "shop", "agent": agent,
            "prediction": {"p_success": p, "model": "m"}}, outcome


def _trace(i: int, agent: str) -> Evaluation:
    traj = Trajectory(trace_id=f"{i:032x}", source="otlp", status="complete", steps=[],
                      service="shop", agent=agent)
    evaluation = Evaluation(traj, [], Verdict(True, []))
    evaluation.prediction = {"p_success": 0.5, "model": "m"}
    return evaluation


def test_a_restored_window_takes_no_place_and_keeps_up_with_outcomes() -> None:
    registry = CollectorRegistry()
    m = Metrics(registry, max_pairs=1, prediction=PredictionConfig(auc_min_per_class=1))
    m.prediction.restore([_stored(1, "planner", 0.9, "success"),  # newest first
                          _stored(2, "planner", 0.2, "failure"),
                          _stored(3, "retired", 0.7, "success"),
                          _stored(4, "retired", 0.1, "failure")])
    auc = {"service": "shop", "agent": "planner"}
    assert registry.get_sample_value(AUC, auc) is None  # no trace of it seen yet
    # an outcome for a stored run before the pair's first trace: under _other, as before,
    # and the pair's restored window holds it when the pair is admitted
    m.prediction.labelled(_stored(2, "planner", 0.2, "success")[0], "success")
    m.prediction.labelled(_stored(5, "planner", 0.1, "failure")[0], "failure")
    other = {"service": OTHER, "agent": OTHER}
    assert registry.get_sample_value(LABELLED, {**other, "outcome": "success"}) == 1
    m.evaluation_stored(_trace(9, "planner"), 0.1, False)  # the pair's first trace
    assert registry.get_sample_value(AUC, auc) == 1.0  # 0.9 and 0.2 over 0.1
    # restored entries are no new labels: none counted under the pair, and the same
    # outcome sent again for a restored run is still none
    m.prediction.labelled(_stored(1, "planner", 0.9, "success")[0], "success")
    assert registry.get_sample_value(LABELLED, {**auc, "outcome": "success"}) is None
    # the restored windows took no place in the budget of one pair: the first trace did
    m.evaluation_stored(_trace(10, "retired"), 0.1, False)
    assert registry.get_sample_value(AUC, {"service": "shop", "agent": "retired"}) is None
    assert set(m.prediction.rolling_auc()) == {("shop", "planner"), (OTHER, OTHER)}


def test_restored_entries_go_behind_the_labels_taken_since() -> None:
    window = RollingAuc(window=3, min_per_class=1)
    window.add("a", 0.9, True)  # taken since the start
    window.restore([("a", 0.1, False), ("b", 0.2, False), ("c", 0.3, True), ("d", 0.4, False)])
    assert len(window) == 3 and window.value() == auc([0.9, 0.2, 0.3], [True, False, True])
    window.add("e", 0.5, False)  # the oldest goes first: the last restored, c
    assert window.value() == auc([0.9, 0.2, 0.5], [True, False, False])
