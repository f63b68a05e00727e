"""Issue 11 (verdict integrity): feedback only for evaluated traces; re-opening a stored trace
needs the sender that sent it. Holding a trace id (it travels in ``traceparent``) is not
enough to decide or replace a verdict."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from support.harness import running_service
from test_receivers import _post

from otel_eval.assemble.assembler import TraceAssembler
from otel_eval.assemble.config import AssemblyConfig
from otel_eval.base.model import Span
from otel_eval.decode import encode

TRACE = "ab" * 16
PB = "application/x-protobuf"


def _root(trace: str = TRACE, span: int = 1) -> Span:
    return Span(trace, f"{span:016x}", None, "invoke_agent", 1, 10,
                attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"})


def _child(span: int, trace: str = TRACE) -> Span:
    return Span(trace, f"{span:016x}", f"{1:016x}", "chat", 2, 3,
                attributes={"gen_ai.operation.name": "chat"})


def test_feedback_before_the_trace_is_refused_and_decides_nothing(tmp_path: Path) -> None:
    with running_service(tmp_path) as h:
        fb = json.dumps({"trace_id": TRACE, "outcome": "failure"}).encode()
        code, body, _ = _post(f"{h.admin_url}/v1/feedback", fb, "application/json")
        assert code == 404 and b"nothing recorded" in body
        assert h.svc.store.feedback(TRACE) is None
        _post(h.http_url, encode.encode_spans([_root(), _child(2)]).SerializeToString(), PB)
        assert h.release() == 1
        stored = h.svc.store.get(TRACE)
        assert stored is not None and stored["verdict"]["outcome"] is None
        code, body, _ = _post(f"{h.admin_url}/v1/feedback", fb, "application/json")
        assert code == 200 and json.loads(body)["verdict"]["outcome"] == "failure"


def test_only_the_first_sender_re_opens_a_stored_trace(tmp_path: Path) -> None:
    tokens = {"agents": "token-of-agents", "intruder": "token-of-intruder"}
    with running_service(tmp_path, **{"receiver.bearer_tokens": tokens}) as h:
        def send(spans: list[Span], token: str) -> tuple[int, bytes]:
            code, body, _ = _post(h.http_url, encode.encode_spans(spans).SerializeToString(), PB,
                                  Authorization=f"Bearer {token}")
            return code, body

        assert send([_root(), _child(2)], "token-of-agents")[0] == 200
        assert h.release() == 1
        code, body = send([_child(3)], "token-of-intruder")
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts
        resp = ts.ExportTraceServiceResponse.FromString(body)
        assert code == 200 and resp.partial_success.rejected_spans == 1
        assert "foreign_sender" in resp.partial_success.error_message
        assert h.svc.engine.open_traces() == 0
        assert h.sample("otel_eval_receiver_spans_rejected_total", protocol="http",
                        reason="foreign_sender") == 1
        assert send([_child(4)], "token-of-agents")[0] == 200
        assert h.svc.engine.open_traces() == 1  # re-opened by its own sender
        assert h.release() == 1
        stored = h.svc.store.get(TRACE)
        assert stored is not None and stored["counts"]["spans"] == 3


def test_assembler_keeps_the_sender_across_releases() -> None:
    asm = TraceAssembler(AssemblyConfig(grace_s=1.0))
    assert asm.add([_root(), _child(2)], 0.0, sender="a").accepted == 2
    assert len(asm.tick(5.0)) == 1
    res = asm.add([_child(3)], 6.0, sender="b")
    assert res.rejected == {"foreign_sender": 1} and len(asm) == 0
    res = asm.add([_child(3)], 6.0, sender="a")
    assert res.accepted == 1 and res.reopened == 1
    # without authentication every sender is "" and re-opening works as before
    asm.add([_root("cd" * 16)], 7.0)
    asm.tick(9.0)
    assert asm.add([_child(2, "cd" * 16)], 9.5).reopened == 1
    # an unknown first sender (replayed from the spool after a restart) is no one to match
    asm.add([_root("ef" * 16)], 10.0)
    asm.tick(12.0)
    assert asm.add([_child(2, "ef" * 16)], 12.5, sender="a").reopened == 1


def test_calibration_reads_the_recorded_outcomes_and_publishes_the_gauges(
        tmp_path: Path) -> None:
    """GET /v1/calibration on a running service: the judge's score of a run against the
    outcome recorded through POST /v1/feedback, and the agreement gauges on /metrics."""
    with running_service(tmp_path) as h:
        _post(h.http_url, encode.encode_spans([_root(), _child(2)]).SerializeToString(), PB)
        assert h.release() == 1
        judge = {"judges": {"trace": {"status": "ok", "scores": {"trace": 0.8}}}}
        assert h.svc.store.put_judge(TRACE, h.svc.store.get(TRACE)["revision"], judge)
        with urllib.request.urlopen(f"{h.admin_url}/v1/calibration", timeout=30) as r:
            assert json.loads(r.read())["labelled_runs"] == 0  # cached for 5 minutes, but
        fb = json.dumps({"trace_id": TRACE, "outcome": "failure"}).encode()  # an outcome:
        assert _post(f"{h.admin_url}/v1/feedback", fb, "application/json")[0] == 200
        with urllib.request.urlopen(f"{h.admin_url}/v1/calibration", timeout=30) as r:
            found = json.loads(r.read())
        assert found["labelled_runs"] == 1  # counted at once
        # the default success model scores every run too: a p_success row beside the judge's
        assert {g["score"] for g in found["groups"] if g["agent"] == "a"} == {
            "trace", "p_success"}
        row = next(g for g in found["groups"] if (g["agent"], g["score"]) == ("a", "trace"))
        assert (row["runs"], row["failures"]) == (1, 1)
        assert row["auc"] is None  # one outcome only: nothing to rank
        assert row["kappa"] is None  # one outcome only: kappa is 0 whatever the score says
        assert row["service"] == ""  # no service.name: labelled as on every per-trace metric
        assert h.sample("otel_eval_judge_agreement_runs", service="unknown", agent="a",
                        score="trace") == 1
