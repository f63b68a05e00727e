"""Stage: assemble (spool rows). What a spool row's body holds, read back and written again.

    Spool.replay -> replay_one(body, signal) -> parse + decode (traces or logs) -> submit
        (the engine's, replayed=True) ; refused items counted by reason and logged
    Spool.append / settle (a re-opened trace) -> encoded(what it holds) -> a body per signal

A row's body is an OTLP request as received (never re-encoded), so a replay takes the normal
decode path: a span or log record of a replayed trace that this version's decoder refuses, or
its assembly does, is counted (``spool_spans_rejected_total{reason}``,
``spool_log_records_rejected_total{reason}``) and logged, never evaluated. Only what a trace
re-opened by late spans held is encoded here, a body per signal that holds any; and a row
whose other traces are done is ``thinned`` to what its pending traces hold (the spans and
records of the others taken out, each kept one as received). No state:
the ``Spool`` owns the file and what it holds.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_eval.base.model import Span
from otel_eval.decode import encode, otlp, otlp_logs
from otel_eval.decode.otlp_logs import HeldRecord
from otel_eval.telemetry.spool import SpoolMetrics

# The spool's logger, for all its parts: their lines keep the one name.
log = logging.getLogger("otel_eval.assemble.spool")

# What ``replay`` hands decoded items to, with their signal ("traces" or "logs") and how
# many seconds ago they were received: the engine's submit (replayed=True); returns how many
# it took and how many assembly refused, by reason.
Replay = Callable[[list[Span] | list[HeldRecord], str, float], tuple[int, Mapping[str, int]]]
# The spans and log records an open trace holds (``settle`` re-spools them when it re-opens).
# What a re-opened trace holds, per trace id: its spans, and its log records but the request's.
Held = Mapping[str, tuple[Collection[Span], Collection[HeldRecord]]]


def replay_one(body: bytes, signal: str, wanted: set[str], age_s: float, submit: Replay,
               metrics: SpoolMetrics, foreign: Collection[str] = (),
               charge: Callable[[list[Span] | list[HeldRecord]], None] = lambda _: None
               ) -> tuple[int, set[str]]:
    """One row through the decode path its signal takes: how many items assembly took,
    and the traces the decoder kept any item of. Raises MalformedRequest.
    ``foreign``: the traces whose spans in it were taken only to pass on, as another
    sender's (the replay knows no sender): marked so again (``Span.unevaluable``).
    ``charge``: handed the items decoded, before they are submitted (the row's bytes
    charged to their services, as ``append`` charges a live row: ``RowLoad``)."""
    if signal == "logs":
        held = otlp_logs.hold_logs(otlp_logs.parse_logs_request(body)[0], traces=wanted)
        _count_refused("log record(s)", held.rejected, metrics.log_records_rejected)
        charge(held.records)
        n, refused = submit(held.records, "logs", age_s)
        _count_refused("log record(s)", refused, metrics.log_records_rejected, "assembly")
        metrics.replayed_logs(n)
        return n, {r.trace_id for r in held.records}
    req, _ = otlp.parse_request(body)
    spans = [s for s in otlp.decode_request(req).spans if s.trace_id in wanted]
    for s in spans:
        if s.trace_id in foreign:
            s.unevaluable = "foreign_sender"
    _count_refused("span(s)", _refused(req, wanted, len(spans)), metrics.spans_rejected)
    charge(spans)
    n, refused = submit(spans, "traces", age_s)
    _count_refused("span(s)", refused, metrics.spans_rejected, "assembly")
    metrics.replayed(n)
    return n, {s.trace_id for s in spans}


def _count_refused(what: str, refused: Mapping[str, int], count: Callable[[str, int], None],
                   by: str = "this version's decoder") -> None:
    """Items of the traces replayed that were acknowledged by an earlier version and
    that this one's decoder (or assembly) refuses: counted by reason, and logged."""
    if not refused:
        return
    for reason, k in sorted(refused.items()):
        count(reason, k)
    log.warning("spool: %d %s of the traces replayed are refused by %s and not "
                "evaluated: %s", sum(refused.values()), what, by,
                ", ".join(f"{k} {r}" for r, k in sorted(refused.items())))


def _refused(req: ExportTraceServiceRequest, wanted: set[str], kept: int) -> Counter[str]:
    """The decoder's reasons for the spans of ``wanted`` traces in ``req`` it did not keep
    (``kept`` it did), by reason; empty, and nothing decoded again, when it kept them all.
    The other traces' spans are not counted: those were refused when received (counted
    then), or fed nothing the spool holds. A span's reason is its own (ids, links, times):
    those spans are decoded again together, under an empty resource and scope, once
    (each alone with a copy of its resource cost spans times the resource's bytes)."""
    raw = [pb for rs in req.resource_spans for ss in rs.scope_spans
           for pb in ss.spans if pb.trace_id.hex() in wanted]
    if len(raw) == kept:
        return Counter[str]()
    alone = ExportTraceServiceRequest()
    alone.resource_spans.add().scope_spans.add().spans.extend(raw)  # rare: refusals
    return Counter(otlp.decode_request(alone).reasons)


def encoded(held: Held, traces: list[str]) -> list[tuple[str, list[str], bytes]]:
    """What ``traces`` hold (``held``), re-encoded: (signal, its traces, bytes), a row per
    signal that holds any."""
    spans = [t for t in traces if held[t][0]]
    logs = [t for t in traces if held[t][1]]
    rows = []
    if spans:
        rows.append(("traces", spans, encode.encode_spans(
            s for t in spans for s in held[t][0]).SerializeToString()))
    if logs:
        rows.append(("logs", logs, otlp_logs.encode_logs(
            r for t in logs for r in held[t][1]).SerializeToString()))
    return rows


def thinned(body: bytes, signal: str, keep: Collection[str]) -> bytes | None:
    """``body`` with only the spans (or log records) of the ``keep`` traces, those as they
    were, their resources and scopes with them; None when it is no request at all (kept as
    it is, for the replay to count). Read with every string as bytes
    (``otlp.parse_as_received``): invalid UTF-8 anywhere in it (a span the receivers
    dropped) left the row whole, for as long as any of its traces was open."""
    try:
        if signal == "logs":
            req = otlp.parse_as_received(body, ExportLogsServiceRequest)
            for rl in req.resource_logs:
                for sl in rl.scope_logs:
                    _keep(sl.log_records, keep)
                _keep_nonempty(rl.scope_logs, "log_records")
            _keep_nonempty(req.resource_logs, "scope_logs")
        else:
            req = otlp.parse_as_received(body, ExportTraceServiceRequest)
            for rs in req.resource_spans:
                for ss in rs.scope_spans:
                    _keep(ss.spans, keep)
                _keep_nonempty(rs.scope_spans, "spans")
            _keep_nonempty(req.resource_spans, "scope_spans")
    except DecodeError:
        return None
    return req.SerializeToString()


def _keep(items: Any, keep: Collection[str]) -> None:
    kept = [x for x in items if x.trace_id.hex() in keep]
    del items[:]
    items.extend(kept)


def _keep_nonempty(entries: Any, field: str) -> None:
    kept = [e for e in entries if len(getattr(e, field))]
    del entries[:]
    entries.extend(kept)


def items_of(held: Held, trace_ids: list[str], signal: str) -> list[Span | HeldRecord]:
    """What ``held`` holds of ``trace_ids`` for a row of ``signal``."""
    k = 0 if signal == "traces" else 1
    return [item for tid in trace_ids for item in held[tid][k]]
