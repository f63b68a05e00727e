"""A fleet on one PostgreSQL store: two running services (each its own receivers, engine,
spool and admin API) write to the same database. Either's /v1/evaluations lists both
traces, feedback posted to one reaches a trace the other evaluated, one issues job runs at a
time, and the agent history is the fleet's: a run killed before its agent span was sent,
evaluated by one, gets the agent of the completed runs the other evaluated."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from support.harness import Harness, emit_agent_run, running_service


@pytest.fixture
def fleet(tmp_path: Path, postgresql_url: str) -> Iterator[tuple[Harness, Harness]]:
    with ExitStack() as stack:
        a, b = (stack.enter_context(running_service(
            tmp_path / name, **{"store.url": postgresql_url, "issues.interval_s": 3600.0}))
            for name in ("a", "b"))
        yield a, b


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def _post(url: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(url, json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


def test_either_service_shows_the_fleet_and_takes_its_feedback(
        fleet: tuple[Harness, Harness]) -> None:
    a, b = fleet
    on_a = emit_agent_run(OTLPSpanExporter(endpoint=a.grpc_target, insecure=True))
    on_b = emit_agent_run(OTLPSpanExporter(endpoint=b.grpc_target, insecure=True),
                          tool_error=True)
    assert (a.svc.engine.open_traces(), b.svc.engine.open_traces()) == (1, 1)
    assert a.release() == 1 and b.release() == 1
    for h in (a, b):
        listed = _get(f"{h.admin_url}/v1/evaluations?limit=10")["evaluations"]
        assert {e["trace_id"] for e in listed} == {on_a, on_b}
        assert _get(f"{h.admin_url}/v1/evaluations/{on_b}")["steps"][2]["status"] == "error"
    assert b.svc.store.get(on_b) is not None and b.svc.store.feedback(on_b) is None
    answer = _post(f"{a.admin_url}/v1/feedback", {"trace_id": on_b, "outcome": "failure"})
    assert answer["trace_id"] == on_b and answer["verdict"]["outcome"] == "failure"
    seen_by_b = _get(f"{b.admin_url}/v1/evaluations/{on_b}")
    assert seen_by_b["verdict"]["outcome"] == "failure" and seen_by_b["verdict"]["passed"] is False
    assert b.svc.store.feedback(on_b) == "failure"  # b's engine applies it on a re-evaluation
    failed = _get(f"{b.admin_url}/v1/evaluations?passed=false")["evaluations"]
    assert [e["trace_id"] for e in failed] == [on_b]


def test_one_issues_job_at_a_time_over_the_fleets_critiques(
        fleet: tuple[Harness, Harness]) -> None:
    a, b = fleet
    emit_agent_run(OTLPSpanExporter(endpoint=a.grpc_target, insecure=True), tool_error=True)
    emit_agent_run(OTLPSpanExporter(endpoint=b.grpc_target, insecure=True), tool_error=True)
    a.release()
    b.release()
    assert a.svc.issues is not None and b.svc.issues is not None
    first = a.svc.issues.run_once()
    assert first is not None and first.traces == 2  # both services' traces
    assert b.svc.issues.run_once() is None  # a holds the lock
    assert b.sample("otel_eval_issues_runs_total", status="skipped") == 1
    assert a.sample("otel_eval_issues_runs_total", status="ok") == 1
    a.svc.issues.close(5.0)  # a stops: its session, and the lock, end
    assert b.svc.issues.run_once() is not None
    assert b.sample("otel_eval_issues_runs_total", status="ok") == 1


def _replay_recording(h: Harness, stack: str, scenario: str) -> None:
    from conformance import corpus

    base = h.http_url.removesuffix("/v1/traces")
    for item in corpus.recording(stack, scenario)["requests"]:
        req = urllib.request.Request(f"{base}/v1/{item['signal']}",
                                     json.dumps(item["body"]).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200


def test_the_agent_history_is_the_fleets(fleet: tuple[Harness, Harness]) -> None:
    a, b = fleet
    _replay_recording(a, "openai-v2-spans", "clean")  # a completed run, on worker a
    assert a.release(after_s=a.svc.config.assembly.idle_timeout_s + 1) == 1
    _replay_recording(b, "openai-v2-spans", "non_terminating")  # killed, on worker b
    assert b.release(after_s=b.svc.config.assembly.idle_timeout_s + 1) == 1
    (killed,) = [e for e in b.svc.store.latest(10) if e["status"] == "incomplete"]
    assert (killed["agent"], killed["agent_source"]) == ("weather_agent", "inferred_history")
    assert b.sample("otel_eval_traces_non_terminated_total",
                    service="conformance-openai-v2-spans", agent="weather_agent") == 1
