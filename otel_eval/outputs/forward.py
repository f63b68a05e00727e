"""Sink: pass-through. Evaluated spans go on to a downstream OTLP/gRPC endpoint, stamped.

Each flagged step span (a finding's ``span_ids``) gets
    otel_eval.findings          list of "detector/kind" flagged on this span
    otel_eval.severity          the highest severity among them (info < warning < error)
and the root span gets the trace summary
    otel_eval.verdict           "pass" | "fail" (absent when there is no verdict)
    otel_eval.verdict.reasons   list of reasons
    otel_eval.finding_count     number of findings
    otel_eval.findings          sorted distinct "detector/kind" of the trace
    otel_eval.finding.<detector>.count   findings per detector
    otel_eval.trace.status      complete | incomplete | truncated
    otel_eval.trace.revision    > 0 when late spans re-opened the trace
    otel_eval.trace.release_reason  why assembly released a run not ``complete`` (``pressure``,
                                ``max_duration``, ...: the v1 object's ``release_reason``)
Everything else is forwarded as received, by construction: each span is written back from the
bytes it came in, under its resource and scope as they came (``encode.encode_spans``), with the
stamps appended to its attributes (an ``otel_eval.*`` key it already carried is replaced).
Delivery, bounds, retries and drop counting: ``outputs.sender`` (sink label ``forward``). A
request holds at most ``export.max_batch_bytes``: a trace larger than that arrives in several
requests, its spans under copies of their resource and scope entries (``outputs.batcher``).

A trace that is no agent run (only setup operations: not evaluated) is forwarded as received,
unstamped (``pass_on``), so pass-through never swallows spans; so are spans acknowledged after
their run was stored, by a process that no longer held it (``late``: ``evaluate.stage``), or
past ``assembly.reopen_window_s`` (which pass-through takes instead of refusing them as
``late``: ``TraceAssembler(pass_through=True)``). So are a trace's spans past
``assembly.max_spans_per_trace``, or longer than a year or with no start (``Trace.passed``:
taken instead of refused as ``trace_too_large`` or ``invalid_timestamp``, never evaluated),
with the trace's own, stamped as usual; so is a ``foreign_sender``'s span (a sender other
than the one that opened a released run, such as a second service of the trace: it may not
add to the run, so it is passed on alone, never evaluated; the run, not re-opened by it, is
not forwarded again). Only a ``duplicate_span`` is not taken, so not forwarded (downstream
has it).

A trace re-opened by late spans is evaluated again and forwarded again, whole (the root then
carries the new summary and ``otel_eval.trace.revision`` > 0): downstream receives its spans
twice, the later copy with the up-to-date stamps.

Forwarding is at least once. The spans are the user's telemetry and the queue is in memory, so
the spool keeps each trace until its spans are delivered or dropped for good
(``base.component.Held``, settled by the sender): a stop whose flush could not deliver them,
or a crash, replays the trace at the next start. The store already holds its evaluation, so
it is not evaluated again (``already_evaluated``) but forwarded again, stamped with the stored
evaluation (``base.component.DeliveringSink``). A crash after the delivery and before the
spool's delete sends it twice.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from otel_eval.base import model
from otel_eval.base.component import Held
from otel_eval.base.results import Evaluation, Finding
from otel_eval.decode.encode import encode_spans
from otel_eval.outputs.batcher import TRACES
from otel_eval.outputs.config import ExportConfig
from otel_eval.outputs.deps import Deps
from otel_eval.outputs.sender import OtlpSender, SenderSink
from otel_eval.telemetry.metrics import Metrics

SINK = "forward"
_RANK = {"info": 0, "warning": 1, "error": 2}


def stamps(trace: model.Trace, evaluation: Evaluation) -> dict[str, dict[str, Any]]:
    """span id -> ``otel_eval.*`` attributes to add to that span."""
    per_span: dict[str, list[Finding]] = {}
    for f in evaluation.findings:
        for sid in dict.fromkeys(f.span_ids):
            per_span.setdefault(sid, []).append(f)
    out: dict[str, dict[str, Any]] = {}
    for sid, fs in per_span.items():
        out[sid] = {
            "otel_eval.findings": [f"{f.detector}/{f.kind}" for f in fs],
            "otel_eval.severity": max((f.severity for f in fs), key=lambda s: _RANK.get(s, 0)),
        }
    root = model.run_span_id(trace.spans)
    if root:
        out[root] = {**out.get(root, {}), **_summary(evaluation)}
    return out


def _summary(evaluation: Evaluation) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "otel_eval.finding_count": len(evaluation.findings),
        "otel_eval.findings": sorted({f"{f.detector}/{f.kind}" for f in evaluation.findings}),
        "otel_eval.trace.status": evaluation.trajectory.status,
        "otel_eval.trace.revision": evaluation.trajectory.revision,
    }
    if evaluation.trajectory.cut_reason:
        summary["otel_eval.trace.release_reason"] = evaluation.trajectory.cut_reason
    for detector, n in sorted(Counter(f.detector for f in evaluation.findings).items()):
        summary[f"otel_eval.finding.{detector}.count"] = n
    v = evaluation.verdict
    if v is not None:
        summary["otel_eval.verdict"] = "pass" if v.passed else "fail"
        summary["otel_eval.verdict.reasons"] = list(v.reasons)
    return summary


class Forwarder(SenderSink):
    """Sink forwarding each evaluated trace's spans to ``config.forward_endpoint``."""

    name = SINK

    def __init__(self, config: ExportConfig, metrics: Metrics) -> None:
        if not config.forward_endpoint:
            raise ValueError("export.forward_endpoint is empty: pass-through is off")
        self._sender: OtlpSender[trace_service_pb2.ExportTraceServiceRequest] = OtlpSender(
            SINK, config.forward_endpoint,
            lambda ch: trace_service_pb2_grpc.TraceServiceStub(ch).Export,
            trace_service_pb2.ExportTraceServiceRequest, TRACES,
            lambda resp: int(resp.partial_success.rejected_spans),
            metrics.sinks.forwarded, metrics, config)

    def items(self, trace: model.Trace, evaluation: Evaluation | None) -> int:
        return len(trace.spans) + len(trace.passed)  # stamped or passed on, every span goes

    def export(self, trace: model.Trace, evaluation: Evaluation,
               held: Held | None = None) -> None:
        self._submit(trace, stamps(trace, evaluation), held)

    def pass_on(self, trace: model.Trace, held: Held | None = None) -> None:
        self._submit(trace, None, held)

    def _submit(self, trace: model.Trace, extra: dict[str, dict[str, Any]] | None,
                held: Held | None) -> None:
        spans = [*trace.spans, *trace.passed]  # those passed on carry no stamp
        if spans:
            self._sender.submit(encode_spans(spans, extra=extra), len(spans),
                                (held,) if held is not None else ())


def build(config: ExportConfig, deps: Deps) -> Forwarder | None:
    """Pass-through when ``export.forward_endpoint`` is set."""
    return Forwarder(config, deps.metrics) if config.forward_endpoint else None
