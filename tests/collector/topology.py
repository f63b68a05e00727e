"""The pieces the end-to-end collector tests share: the conformance recordings, the direct
evaluation each is compared to, ``otel-eval serve`` as a real subprocess, waiting on counters.

The direct evaluation is the conformance test's path: the recorded OTLP/JSON requests posted in
recorded order to an in-process ``Service`` (no SDK, no collector), released by its hand-driven
clock first past the grace period (runs whose root ended) and then past the idle timeout (runs
that never ended), the order a real clock releases them in. serve runs with the same assembly
timings, short so that the tests wait seconds, not minutes.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.request
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from conformance import corpus
from support import served as serve_process
from support.harness import running_service

T = TypeVar("T")
# serve's (and the direct Service's) assembly timings: a finished run is released GRACE_S
# after its last span, one that never ended IDLE_S after it.
GRACE_S = 5.0
IDLE_S = 8.0
SERVE_CONFIG: dict[str, Any] = {
    "assembly": {"grace_s": GRACE_S, "idle_timeout_s": IDLE_S},
    "evaluation": {"workers": 1},
}
# Long enough for a loaded 2-core machine; the waits end as soon as their condition holds.
DEADLINE_S = 180.0


def _trace_ids(rec: dict[str, Any]) -> set[str]:
    return set(re.findall(r'"traceId": "([0-9a-f]{32})"', json.dumps(rec["requests"])))


@cache
def recordings() -> tuple[dict[str, Any], ...]:
    """Every conformance recording, in stack then scenario order, no trace id in two of them.
    The remote_parent scenario of every stack continues the same remote trace (the W3C example
    traceparent), so there a recording's trace gets an id of its own (sha256 of the id, its
    stack and scenario): sent together, they would be one trace. (A recording may hold more
    than one trace: autogen's create_agent span is a trace of its own.)"""
    recs = [corpus.recording(stack, scenario) for stack, scenario in corpus.recorded()]
    uses = Counter(tid for rec in recs for tid in _trace_ids(rec))
    out = []
    for rec in recs:
        text = json.dumps(rec["requests"])
        for tid in sorted(_trace_ids(rec)):
            if uses[tid] > 1:
                new = hashlib.sha256(f"{tid}/{rec['stack']}/{rec['scenario']}".encode())
                text = text.replace(f'"traceId": "{tid}"', f'"traceId": "{new.hexdigest()[:32]}"')
        out.append({**rec, "requests": json.loads(text)})
    return tuple(out)


def traces_with_spans(recs: Sequence[dict[str, Any]]) -> set[str]:
    """The trace ids of every span of the recordings."""
    return set(re.findall(r'"traceId": "([0-9a-f]{32})"', json.dumps(
        [item for rec in recs for item in rec["requests"] if item["signal"] == "traces"])))


def setup_only(recs: Sequence[dict[str, Any]]) -> set[str]:
    """Traces whose every span is a GenAI ``create_agent`` (an agent being built, e.g.
    AutoGen's, in a trace of its own): no agent run, so not evaluated."""
    ops: dict[str, set[str]] = {}
    for rec in recs:
        for item in rec["requests"]:
            if item["signal"] != "traces":
                continue
            for rs in item["body"].get("resourceSpans", []):
                for ss in rs.get("scopeSpans", []):
                    for span in ss.get("spans", []):
                        op = next((a["value"].get("stringValue") for a in span.get(
                            "attributes", []) if a["key"] == "gen_ai.operation.name"), None)
                        ops.setdefault(span["traceId"], set()).add(str(op))
    return {tid for tid, seen in ops.items() if seen == {"create_agent"}}


def runs(recs: Sequence[dict[str, Any]]) -> set[str]:
    """The trace ids otel-eval evaluates: every trace with spans that is an agent run."""
    return traces_with_spans(recs) - setup_only(recs)


def post_recording(base_url: str, rec: dict[str, Any]) -> None:
    """POST the recorded OTLP/JSON requests in order (what the conformance test does)."""
    for i, item in enumerate(rec["requests"]):
        req = urllib.request.Request(f"{base_url}/v1/{item['signal']}", method="POST",
                                     data=json.dumps(item["body"]).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200, (rec["stack"], rec["scenario"], i)


def direct(recs: Sequence[dict[str, Any]], tmp: Path) -> dict[str, dict[str, Any]]:
    """Each recording's stored evaluation by trace id, evaluated without the collector."""
    with running_service(tmp, **{"assembly.grace_s": GRACE_S,
                                 "assembly.idle_timeout_s": IDLE_S}) as h:
        for rec in recs:
            post_recording(h.http_url.removesuffix("/v1/traces"), rec)
        h.release(after_s=GRACE_S + 0.001)
        h.release(after_s=IDLE_S + 1)
        return {e["trace_id"]: e for e in h.svc.store.latest(100_000)}


@contextmanager
def serve(tmp: Path, **extra: Any) -> Iterator[serve_process.Served]:
    """``otel-eval serve`` (OTLP/gRPC on a port it picked, SQLite store in ``tmp``)."""
    tmp.mkdir(parents=True, exist_ok=True)
    with serve_process.serve(tmp, {**SERVE_CONFIG, **extra}) as process:
        yield process


def received(served: serve_process.Served) -> tuple[int, int]:
    """(spans, log records) serve has received so far."""
    m = served.metrics()
    return (int(m.get("otel_eval_receiver_spans_received_total", 0)),
            int(m.get("otel_eval_receiver_log_records_received_total", 0)))


def received_all(served: serve_process.Served, spans: int, log_records: int) -> bool:
    """serve has received at least that many spans and log records (at least: a batch the
    collector retried after a timeout or a throttle counts again)."""
    got_spans, got_logs = received(served)
    return got_spans >= spans and got_logs >= log_records


def stored(served: serve_process.Served) -> dict[str, dict[str, Any]]:
    return serve_process.stored(served.store)


def stored_at_least(served: serve_process.Served, n: int) -> dict[str, dict[str, Any]] | None:
    """The stored evaluations once there are ``n`` of them, else None."""
    out = stored(served)
    return out if len(out) >= n else None


def differences(got: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """Top-level keys whose values differ (for a readable failure)."""
    return [f"{k}: {got.get(k)!r} != {want.get(k)!r}"[:400]
            for k in sorted(set(got) | set(want)) if got.get(k) != want.get(k)]
