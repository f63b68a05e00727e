"""A rolling restart of two ``otel-eval serve`` replicas behind the real collector running the
shipped loadbalancing.yaml, under load: nothing lost, nothing judged early (issue 30).

    SDK exporter (agent) -> collector (load_balancing, routing_key traceID, static list)
        -> replica a / replica b (serve, own SQLite store and spool, fixed gRPC port)

Split runs: the first half of each (its model and tool calls so far, no root) is delivered to
its replica before any stop. Then replica a gets SIGTERM and is restarted on the same port,
store and spool, then replica b; meanwhile a background agent keeps sending whole runs (one
request per run, which the collector queues and retries for the replica that is down), and the
second halves of half the split runs go out while a is down, the rest once both are back.
Each run must be evaluated exactly once, on one replica, with every span, revision 0, without
a non-termination finding; a stop stores no split run that has not ended.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import topology
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanContext, TraceFlags
from support import served as serve_process
from support.otel_collector import Collector, render
from support.poll import poll
from support.ports import free_port
from support.served import RESOURCE, Served, exporter

pytestmark = pytest.mark.slow
SPLIT_RUNS, STEPS = 40, 6  # 13 spans per run: 6 model calls, 6 tool calls, the root
# Only a stop could judge a split run early: its idle timeout is far beyond the test.
CONFIG = {"assembly": {"grace_s": 2.0, "idle_timeout_s": 600.0,
                       "max_trace_duration_s": 3600.0}, "evaluation": {"workers": 1}}


def agent_run() -> tuple[str, list[ReadableSpan]]:
    """One run in SDK export order: per step a model call and a tool call, the root last."""
    tid, root = os.urandom(16), os.urandom(8)
    t0 = time.time_ns()

    def ctx(sid: bytes) -> SpanContext:
        return SpanContext(int.from_bytes(tid), int.from_bytes(sid), is_remote=False,
                           trace_flags=TraceFlags(TraceFlags.SAMPLED))

    def span(name: str, sid: bytes, parent: bytes, start: int, end: int,
             attrs: dict[str, Any]) -> ReadableSpan:
        return ReadableSpan(name, context=ctx(sid), parent=ctx(parent) if parent else None,
                            resource=RESOURCE, attributes=attrs, start_time=start,
                            end_time=end)

    spans = []
    for i in range(STEPS):
        at = t0 + 1_000_000 * (2 * i + 1)
        spans.append(span("chat gpt-4o", os.urandom(8), root, at, at + 500_000,
                          {"gen_ai.operation.name": "chat"}))
        spans.append(span(f"execute_tool lookup{i}", os.urandom(8), root, at + 600_000,
                          at + 900_000, {"gen_ai.operation.name": "execute_tool",
                                         "gen_ai.tool.name": f"lookup{i}"}))
    spans.append(span("invoke_agent planner", root, b"", t0, t0 + 1_000_000 * (2 * STEPS + 2),
                      {"gen_ai.operation.name": "invoke_agent",
                       "gen_ai.agent.name": "planner"}))
    return tid.hex(), spans


class Replica:
    """One serve that can be stopped with SIGTERM and started again on its port and files."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.port = tmp, 0
        self._stack: ExitStack | None = None
        self.served: Served | None = None

    def start(self) -> Served:
        self.tmp.mkdir(parents=True, exist_ok=True)
        self._stack = ExitStack()
        self.served = self._stack.enter_context(serve_process.serve(
            self.tmp, CONFIG, grpc_endpoint=f"127.0.0.1:{self.port}"))
        self.port = int(self.served.grpc_target.rsplit(":", 1)[1])
        return self.served

    def sigterm(self) -> dict[str, dict[str, Any]]:
        """Stop it as a deploy does; what its store holds then."""
        assert self.served is not None and self._stack is not None
        self.served.proc.send_signal(signal.SIGTERM)
        assert self.served.proc.wait(60) == 0, self.served.log_tail()
        self._stack.close()
        return serve_process.stored(self.served.store)

    def close(self) -> None:
        if self._stack is not None:
            self._stack.close()


class Agents:
    """A background agent fleet: whole runs, one export each, about 50 a second (a load, not
    a flood: the collector's queue for a replica that is down must hold them), until stopped
    or ``MAX_RUNS`` sent. Only runs the collector acknowledged count as sent."""

    MAX_RUNS = 1500

    def __init__(self, target: str) -> None:
        self.sent: dict[str, int] = {}
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(target,))

    def _run(self, target: str) -> None:
        client = exporter(target)
        try:
            while len(self.sent) < self.MAX_RUNS and not self._stop.wait(0.02):  # pacing
                tid, spans = agent_run()
                if client.export(spans) == SpanExportResult.SUCCESS:
                    self.sent[tid] = len(spans)
                else:
                    self.refused += 1
        finally:
            client.shutdown()

    def __enter__(self) -> Agents:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)


def _wait_stored(replicas: list[Replica], want: dict[str, int]) -> list[dict[str, Any]]:
    def all_stored() -> list[dict[str, Any]] | None:
        on = [serve_process.stored(r.tmp / "otel-eval.db") for r in replicas]
        return on if set(want) <= set(on[0]) | set(on[1]) else None
    return poll(all_stored, "every run to be stored", timeout_s=300, interval_s=0.1)


def test_a_rolling_restart_under_load_loses_nothing_and_judges_nothing_early(
        otelcol_bin: Path, tmp_path: Path) -> None:
    split = dict(agent_run() for _ in range(SPLIT_RUNS))
    replicas = [Replica(tmp_path / "a"), Replica(tmp_path / "b")]
    agent = f"127.0.0.1:{free_port()}"
    with ExitStack() as stack:
        for r in replicas:
            r.start()
            stack.callback(r.close)
        cfg = render("loadbalancing.yaml", {
            "0.0.0.0:4317": agent, "0.0.0.0:4318": f"127.0.0.1:{free_port()}",
            "otel-eval-0.otel-eval-headless:4317": f"127.0.0.1:{replicas[0].port}",
            "otel-eval-1.otel-eval-headless:4317": f"127.0.0.1:{replicas[1].port}"})
        stack.enter_context(Collector(otelcol_bin, cfg, tmp_path))
        client = exporter(agent)
        stack.callback(client.shutdown)
        half = STEPS  # the first 3 model calls and 3 tool calls of each run, no root
        for spans in split.values():
            assert client.export(spans[:half]) == SpanExportResult.SUCCESS
        poll(lambda: sum(topology.received(r.served)[0] for r in replicas
                         if r.served) >= SPLIT_RUNS * half,
             "the first halves delivered", timeout_s=topology.DEADLINE_S, interval_s=0.1)
        with Agents(agent) as fleet:
            late = list(split.values())
            for i, r in enumerate(replicas):
                at_stop = r.sigterm()  # a split run stored by then has ended: whole
                assert all(at_stop[t]["counts"]["spans"] == len(split[t])
                           for t in set(split) & set(at_stop)), r.tmp
                if i == 0:  # no split run had ended before the first stop
                    assert not set(split) & set(at_stop)
                for spans in late[i::2]:  # second halves while this replica is down
                    assert client.export(spans[half:]) == SpanExportResult.SUCCESS
                r.start()
            poll(lambda: len(fleet.sent) >= 200, "load through the restarts",
                 timeout_s=topology.DEADLINE_S, interval_s=0.1)
        want = {**{tid: len(spans) for tid, spans in split.items()}, **fleet.sent}
        on = _wait_stored(replicas, want)
        metrics = [r.served.metrics() for r in replicas if r.served]
    twice = [t for t in want if t in on[0] and t in on[1]]
    body = {t: (on[0].get(t) or on[1][t]) for t in want}
    partial = [t for t, n in want.items() if body[t]["counts"]["spans"] != n]
    revised = [t for t in want if body[t]["revision"] != 0]
    hung = [t for t in want if body[t]["status"] != "complete" or any(
        f["detector"] == "non_termination" for f in body[t]["findings"])]
    print(f"rolling restart: {len(split)} split runs, {len(fleet.sent)} whole runs under "
          f"load ({fleet.refused} refused by the collector); replica a stored {len(on[0])}, "
          f"b {len(on[1])}")
    assert not (twice or partial or revised or hung), (twice[:3], partial[:3], revised[:3],
                                                       hung[:3])
    assert all(m.get("otel_eval_traces_non_terminated_total", 0) == 0 for m in metrics)
    assert all(m.get("otel_eval_traces_superseded_total", 0) == 0 for m in metrics)
    assert on[0] and on[1]
