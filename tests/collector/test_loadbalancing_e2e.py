"""loadbalancing.yaml and loadbalancing-by-service.yaml for real: one collector, its
``load_balancing`` exporter routing spans and log records (by trace id, or by service) over two
``otel-eval serve`` replicas.

The agent sends more than 1,000 traces: every conformance recording under fresh trace ids, each
trace cut into pieces of a few spans or log records, and the pieces of 50 traces at a time
mixed into shared export batches (so a batch holds many traces and a trace arrives in several
batches). Each trace must be evaluated exactly once, on one replica, with all its spans; and
with its log records, i.e. its evaluation equals the direct evaluation of its recording.

By trace id, that last part fails with the collector we build (v0.160.0): its exporter keys
a span by the trace id's 16 bytes and a log record by the id's 32-character hex text
(``splitLogsByTraceID``: ``key = traceID.String()``), two different positions on the hash
ring, so a trace's records go to a replica chosen independently of its spans' (v0.157.0 reads
the same; v0.152.0, still named ``loadbalancing``, keys both by the bytes). There the test is
a strict xfail: it fails loudly once a manifest bump brings a release that fixed it. By service
(the shipped workaround) a span and a record are keyed by the same service.name and the
records follow their spans.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import topology
from recording_agent import Sent, interleaved, requests, retraced, send, trace_ids
from support.otel_collector import Collector, render
from support.poll import poll
from support.ports import free_port

pytestmark = pytest.mark.slow
TRACES = 1000
# Traces mixed per batch and spans (or log records) per piece of a trace.
PER_BATCH, CHUNK = 50, 3
# A trace's pieces come through the collector's per-replica queues; the default grace absorbs
# their delays on a loaded machine (a shorter one would re-open traces, not lose them).
GRACE_S, IDLE_S = 10.0, 15.0
UPSTREAM_BUG = ("collector v0.160.0 load_balancing routes a log record by the hex text of its "
                "trace id and a span by the id's bytes: the records reach another replica")


@dataclass
class Run:
    config: str                              # the shipped collector config
    want: dict[str, dict[str, Any]]          # direct evaluation by recorded trace id
    origin: dict[str, str]                   # sent trace id -> recorded trace id
    span_ids: dict[str, set[str]]            # sent trace id -> its span ids
    on: list[dict[str, dict[str, Any]]]      # per replica: stored evaluations by trace id
    sent: Sent
    dropped_no_spans: int                    # log records the replicas held for no span


def _new_id(old: str, copy: int) -> str:
    return hashlib.sha256(f"{old}/{copy}".encode()).hexdigest()[:32]


def _quiet(replicas: list[Any], spans: int, logs: int) -> bool:
    """Every span and record received (at least: a batch the collector retried counts again),
    and nothing left to assemble or evaluate."""
    metrics = [r.metrics() for r in replicas]
    busy = sum(m.get(g, 0) for m in metrics for g in (
        "otel_eval_assembly_open_traces", "otel_eval_assembly_pending_spans",
        "otel_eval_assembly_pending_log_records"))
    got = [topology.received(r) for r in replicas]
    return busy == 0 and sum(g[0] for g in got) >= spans and sum(g[1] for g in got) >= logs


@pytest.fixture(scope="module", params=["loadbalancing.yaml", "loadbalancing-by-service.yaml"])
def run(otelcol_bin: Path, tmp_path_factory: pytest.TempPathFactory,
        request: pytest.FixtureRequest) -> Run:
    config: str = request.param
    tmp = tmp_path_factory.mktemp(config.removesuffix(".yaml"))
    recs = topology.recordings()
    want = topology.direct(recs, tmp / "direct")
    traces, origin, span_ids = [], {}, {}
    for copy in range(math.ceil(TRACES / len(want))):
        for rec in recs:  # a recording's traces (usually one) go out together, as recorded
            reqs = requests(rec)
            ids = {old: _new_id(old, copy) for old in trace_ids(reqs)}
            origin.update({new: old for old, new in ids.items() if old in want})
            traces.append(retraced(reqs, ids))
            for s in (s for signal, req in reqs if signal == "traces"
                      for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans):
                span_ids.setdefault(ids[s.trace_id.hex()], set()).add(s.span_id.hex())
    agent = f"127.0.0.1:{free_port()}"
    timings = {"assembly": {"grace_s": GRACE_S, "idle_timeout_s": IDLE_S}}
    with topology.serve(tmp / "a", **timings) as a, topology.serve(tmp / "b", **timings) as b:
        cfg = render(config, {
            "0.0.0.0:4317": agent, "0.0.0.0:4318": f"127.0.0.1:{free_port()}",
            "otel-eval-0.otel-eval-headless:4317": a.grpc_target,
            "otel-eval-1.otel-eval-headless:4317": b.grpc_target})
        with Collector(otelcol_bin, cfg, tmp):
            sent = send(interleaved(traces, PER_BATCH, CHUNK), agent)
            poll(lambda: _quiet([a, b], sent.spans, sent.log_records),
                 "both replicas to receive and evaluate everything", timeout_s=600)
            dropped = sum(int(r.metrics().get("otel_eval_assembly_log_records_dropped_total",
                                               0)) for r in (a, b))
            on = [topology.stored(a), topology.stored(b)]
    return Run(config, want, origin, span_ids, on, sent, dropped)


def _evaluated(run: Run) -> dict[str, list[int]]:
    return {tid: [i for i, store in enumerate(run.on) if tid in store] for tid in run.origin}


def test_each_trace_is_evaluated_once_with_all_its_spans_on_one_replica(run: Run) -> None:
    evaluated = _evaluated(run)
    lost = [tid for tid, where in evaluated.items() if not where]
    twice = [tid for tid, where in evaluated.items()
             if len(where) > 1 or any(run.on[i][tid]["revision"] != 0 for i in where)]
    stray = (set(run.on[0]) | set(run.on[1])) - set(run.origin)
    print(f"{run.config}: traces sent {len(run.origin)}, evaluated "
          f"{len(run.origin) - len(lost)} (replica a {len(run.on[0])}, b {len(run.on[1])}), "
          f"lost {len(lost)}, twice {len(twice)}; {run.sent.spans} spans in "
          f"{run.sent.batches['traces']} batches, {run.sent.log_records} log records in "
          f"{run.sent.batches['logs']} batches; log records dropped for want of their spans: "
          f"{run.dropped_no_spans}")
    assert len(run.origin) >= TRACES
    # each trace cut over several batches: more than one per PER_BATCH traces sent whole
    # (compared once with the number of recordings, which the corpus outgrew)
    assert run.sent.batches["traces"] > math.ceil(len(run.origin) / PER_BATCH) \
        and run.sent.batches["logs"] > 1
    assert not lost and not twice and not stray, (lost[:5], twice[:5], sorted(stray)[:5])
    assert run.on[0] and run.on[1], "both replicas got traces"
    partial = [tid for tid, (i,) in evaluated.items()
               if {s["span_id"] for s in run.on[i][tid]["steps"] if not s.get("rebuilt")}
               != run.span_ids[tid]]
    assert not partial, partial[:5]


def _as(body: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """``body`` (an evaluation) with trace id ``new`` written as ``old``."""
    out: dict[str, Any] = json.loads(json.dumps(body).replace(new, old))
    return out


def test_each_trace_is_evaluated_with_its_log_records(run: Run,
                                                     request: pytest.FixtureRequest) -> None:
    if run.config == "loadbalancing.yaml":
        request.applymarker(pytest.mark.xfail(reason=UPSTREAM_BUG, strict=True))
    wrong = [tid for tid, where in _evaluated(run).items() if len(where) == 1
             and _as(run.on[where[0]][tid], run.origin[tid], tid) != run.want[run.origin[tid]]]
    print(f"{run.config}: {len(wrong)} of {len(run.origin)} traces evaluated without (some "
          f"of) their log records")
    assert not wrong, (len(wrong), wrong[:3])
    assert run.dropped_no_spans == 0
