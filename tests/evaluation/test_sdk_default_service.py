"""The SDK's default ``service.name`` (``unknown_service`` or ``unknown_service:<executable>``,
what the resource conventions make SDKs send when the app set none) is no service: separate
apps that never set OTEL_SERVICE_NAME share no agent history, no pending-budget entry and
no metric series as if they were one service."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from otel_eval.app.config import Config
from otel_eval.assemble.service_load import service_of
from otel_eval.base.model import Span
from otel_eval.decode.encode import dict_to_attributes
from otel_eval.decode.otlp_logs import hold_logs
from otel_eval.evaluate.agent_inference import learned
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.store import SqliteStore
from tests.evaluation.test_agent_inference import _run

DEFAULTS = ["unknown_service", "unknown_service:python", "unknown_service:java"]


@pytest.fixture
def history() -> Any:
    store = SqliteStore(":memory:").open()
    yield store
    store.close()


@pytest.mark.parametrize("default", DEFAULTS)
def test_an_sdk_default_service_name_names_no_service(default: str) -> None:
    t = Evaluator(Config()).evaluate(_run("a" * 32, "solo", "S.", ["a"], service=default))
    assert t.trajectory.service is None
    span = Span("a" * 32, "1" * 16, None, "x", 1, 2, resource={"service.name": default})
    assert service_of(span) == ""
    req = ExportLogsServiceRequest()
    rl = req.resource_logs.add()
    rl.resource.attributes.extend(dict_to_attributes({"service.name": default}))
    record = rl.scope_logs.add().log_records.add(event_name="gen_ai.client.inference.operation"
                                                 ".details", time_unix_nano=1)
    record.trace_id, record.span_id = bytes.fromhex("a" * 32), bytes.fromhex("1" * 16)
    assert [r.service for r in hold_logs(req, every=True).records] == [""]


@pytest.mark.parametrize("name", ["unknown_services", "unknown_service_x", "shop"])
def test_a_name_that_only_starts_alike_is_a_service(name: str) -> None:
    t = Evaluator(Config()).evaluate(_run("b" * 32, "solo", "S.", ["a"], service=name))
    assert t.trajectory.service == name


def test_apps_on_the_sdk_default_share_no_agent_history(history: SqliteStore) -> None:
    """One app's named runs never name another app's hung run: both sent only the SDK's
    default, so nothing says they are one service."""
    ev = Evaluator(Config())
    done = ev.evaluate(_run("c" * 32, "solo", "S.", ["a"], service="unknown_service:python"),
                       history=history)
    history.remember_agents(learned([done]))
    hung = ev.evaluate(_run("d" * 32, "x", "Unlike.", ["b"], False,
                            service="unknown_service:python"), history=history)
    assert hung.trajectory.agent_source == "unknown"
