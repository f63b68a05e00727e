"""passthrough.yaml for real: otel-eval in the trace path of a real collector.

The agent (every conformance recording, official SDK exporters, traces and logs) sends to the
collector's first receiver; the collector passes traces and the agent's log records to a real
``otel-eval serve`` started with ``--forward-endpoint`` and ``--events-endpoint`` at the
collector's second receiver (as the file's comment says), which sends the stamped spans on to
the trace backend and the ``gen_ai.evaluation.result`` events (with the agent's own log
records) to the logs backend, here one capture server speaking OTLP/gRPC and OTLP/HTTP.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import topology
from recording_agent import replay, requests
from support.otel_collector import Collector, render
from support.otlp_capture import Capture
from support.poll import poll
from support.ports import free_port

pytestmark = pytest.mark.slow
EVENT = "gen_ai.evaluation.result"


def _attrs(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        kind = kv.value.WhichOneof("value")
        value = getattr(kv.value, kind) if kind else None
        out[kv.key] = ([getattr(v, v.WhichOneof("value")) for v in value.values]
                       if kind == "array_value" else value)
    return out


def test_stamped_spans_and_evaluation_events_come_back_through_the_collector(
        otelcol_bin: Path, tmp_path: Path) -> None:
    recs = topology.recordings()
    agent, stamped = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    export = {"forward_endpoint": stamped, "events_endpoint": stamped}
    with Capture() as backend, topology.serve(tmp_path / "serve", export=export) as served:
        cfg = render("passthrough.yaml", {
            "0.0.0.0:4317": agent, "0.0.0.0:4319": stamped,
            "otel-eval:4317": served.grpc_target, "tempo:4317": backend.grpc_target,
            "http://loki:3100/otlp": f"{backend.http_url}/otlp"})
        with Collector(otelcol_bin, cfg, tmp_path):
            spans = logs = 0
            for rec in recs:
                sent = replay(rec, agent)
                spans, logs = spans + sent.spans, logs + sent.log_records
            evaluations = poll(lambda: topology.stored_at_least(served, len(topology.runs(recs))),
                               "serve to evaluate every recording", timeout_s=topology.DEADLINE_S)
            events = sum(len(e["findings"]) + (e["verdict"] is not None)
                         for e in evaluations.values())
            poll(lambda: len(backend.spans()) >= spans
                              and len(backend.log_records()) >= logs + events,
                 "the stamped spans and the events at the backend", timeout_s=topology.DEADLINE_S)
    assert not backend.errors
    # Every span the agent sent, once, from otel-eval (stamped), none straight from the agent.
    sent_ids = Counter((s.trace_id.hex(), s.span_id.hex()) for rec in recs
                       for signal, req in requests(rec) if signal == "traces"
                       for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans)
    got = {(s.trace_id.hex(), s.span_id.hex()): _attrs(s) for s in backend.spans()}
    assert Counter((s.trace_id.hex(), s.span_id.hex()) for s in backend.spans()) == sent_ids
    for tid, ev in evaluations.items():
        summary = [a for (t, _), a in got.items() if t == tid and "otel_eval.trace.status" in a]
        assert len(summary) == 1, tid
        assert summary[0]["otel_eval.trace.status"] == ev["status"]
        if ev["verdict"] is not None:
            assert summary[0]["otel_eval.verdict"] == ("pass" if ev["verdict"]["passed"]
                                                       else "fail")
        for f in ev["findings"]:
            for span_id in f["span_ids"]:
                assert f"{f['detector']}/{f['kind']}" in got[(tid, span_id)]["otel_eval.findings"]
    # One event per finding and per verdict, on the evaluated trace; the agent's own records
    # reached the logs backend too.
    records = backend.log_records()
    per_trace = Counter(r.trace_id.hex() for r in records if r.event_name == EVENT)
    assert per_trace == Counter({tid: len(e["findings"]) + (e["verdict"] is not None)
                                 for tid, e in evaluations.items()})
    assert sum(1 for r in records if r.event_name != EVENT) == logs
