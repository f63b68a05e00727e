"""OTLP files: an ``ExportTraceServiceRequest`` (or ``ExportLogsServiceRequest``) as
protobuf or OTLP/JSON, the collector file exporter's JSON lines (one request per line) and
its protobuf output (``format: proto``: each request's bytes after their size, 4 bytes
big-endian). Decoding is ``otel_eval.decode.otlp``'s, so a file gives the same spans as the
same request received over the network; spans the decoder rejects are reported (with the
decoder's reasons) and the good ones are kept.

One file exporter in the traces and the logs pipelines (and metrics) writes every signal to
the same file, a request per line (or per frame): the ``ExportLogsServiceRequest`` requests
(or an OTLP/JSON logs document) give the GenAI event records, held as ``serve``'s receivers
hold them (``otlp_logs.hold_logs``) to join their spans; requests of the other signals
(metrics; profiles in JSON, whose protobuf schema is still in development) are skipped, as
``serve`` takes none.
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeAlias

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_eval.base.model import Span
from otel_eval.decode.compressed import MAX_GUNZIPPED_BYTES, ZSTD_MAGIC, TooLarge, ZstdError, unzstd
from otel_eval.decode.otlp import MalformedRequest, decode_request, parse_request
from otel_eval.decode.otlp_json import (
    legacy_items,
    message_from_dict,
    request_from_dict,
    without_lone_surrogates,
)
from otel_eval.decode.otlp_logs import HeldRecord, hold_logs, parse_logs_request
from otel_eval.receive.loaders.files import LoaderError

OnError = Callable[[LoaderError], None]
# The top keys of the OTLP/JSON requests of the signals ``serve`` does not take.
_OTHER_SIGNALS = ("resourceMetrics", "resource_metrics", "resourceProfiles",
                  "resource_profiles")


def is_otlp_json(doc: Any) -> bool:
    return isinstance(doc, dict) and ("resourceSpans" in doc or "resource_spans" in doc)


def is_otlp_logs_json(doc: Any) -> bool:
    return isinstance(doc, dict) and ("resourceLogs" in doc or "resource_logs" in doc)


# OTLP/JSON logs requests hold one of these keys (a JSON key is its text, escapes aside)
_LOGS_KEYS = (b'"resourceLogs"', b'"resource_logs"')


def may_hold_logs(data: bytes) -> bool:
    """Whether a file's content may hold log records (an OTLP/JSON logs request or lines of
    them, without parsing them; OTLP protobuf requests: a logs request among them; the
    file exporter's zstd requests: decompressed first)."""
    try:
        data = unframe_zstd(data, Path(), _ignored)
    except LoaderError:
        return False
    if data.lstrip()[:1] in (b"{", b"["):
        return any(k in data for k in _LOGS_KEYS)
    try:
        return any(isinstance(req, ExportLogsServiceRequest)  # of the whole requests
                   for _, req, _ in _protobuf_requests(data, Path(), _ignored))
    except LoaderError:
        return False


def is_other_signal(doc: Any) -> bool:
    """An OTLP/JSON request of a signal ``serve`` does not take (metrics, profiles)."""
    return isinstance(doc, dict) and any(k in doc for k in _OTHER_SIGNALS)


def _decode(req: ExportTraceServiceRequest, path: Path, where: str, on_error: OnError,
            dropped: Counter[str] | None = None) -> list[Span]:
    result = decode_request(req).evaluable()
    result.reasons.update(dropped or {})
    if result.rejected:
        on_error(LoaderError(path, f"{where}{result.message}"))
    return result.spans


def from_json_doc(doc: Any, path: Path, on_error: OnError, where: str = "",
                  text: bytes | None = None) -> list[Span]:
    """The spans of an OTLP/JSON request (``text``: the JSON it was read from, when known);
    a span holding a lone surrogate is dropped and reported (``invalid_utf8``), as ``serve``
    drops it (``otlp_json.without_lone_surrogates``), the others read; so are those of a
    pre-1.0 exporter's ``instrumentationLibrarySpans`` (``instrumentation_library_spans``,
    as ``otlp_json.parse_request`` counts them), never dropped unseen."""
    dropped = without_lone_surrogates(text, doc, "resourceSpans", "scopeSpans", "spans")
    dropped += legacy_items(doc, "resourceSpans", "instrumentationLibrarySpans", "spans",
                            "instrumentation_library_spans")
    try:
        req = request_from_dict(doc)
    except ValueError as e:
        raise LoaderError(path, f"{where}{e}") from e
    except (TypeError, SystemError, RecursionError) as e:
        # protobuf's json_format leaks these on some inputs (a key holding a lone UTF-16
        # surrogate raises SystemError from upb); they are bad input all the same
        raise LoaderError(path, f"{where}not an OTLP ExportTraceServiceRequest: {e!r}") from e
    return _decode(req, path, where, on_error, dropped)


def logs_from_json_doc(doc: Any, path: Path, on_error: OnError, where: str = "",
                       text: bytes | None = None) -> list[HeldRecord]:
    """The GenAI event records of an OTLP/JSON logs request, held as ``serve`` holds them;
    records with invalid ids or times, or holding a lone surrogate, or under a pre-1.0
    exporter's ``instrumentationLibraryLogs`` (``otlp_logs.parse_logs_json``), are reported
    (the others, not GenAI events of a span, are not for us)."""
    dropped = without_lone_surrogates(text, doc, "resourceLogs", "scopeLogs", "logRecords")
    dropped += legacy_items(doc, "resourceLogs", "instrumentationLibraryLogs", "logRecords",
                            "instrumentation_library_logs")
    try:
        req = message_from_dict(doc, ExportLogsServiceRequest(), "resourceLogs")
    except ValueError as e:
        raise LoaderError(path, f"{where}{e}") from e
    return _held(req, path, where, on_error, dropped)


def _held(req: ExportLogsServiceRequest, path: Path, where: str, on_error: OnError,
          dropped: Counter[str] | None = None) -> list[HeldRecord]:
    held = hold_logs(req)
    rejected = held.rejected + (dropped or Counter())
    if rejected:
        reasons = ", ".join(f"{n} {r}" for r, n in sorted(rejected.items()))
        on_error(LoaderError(path, f"{where}{sum(rejected.values())} log record(s) "
                                   f"rejected: {reasons}"))
    return held.records


def from_json_lines(data: bytes, path: Path, on_error: OnError,
                    ) -> tuple[list[Span], list[HeldRecord]]:
    """The spans and the GenAI event records of the requests, one per line, of any signal.
    A line that is not valid JSON (the last one of a file the exporter is still writing, or
    stopped writing, is cut short) is reported once the file is read, with how many more
    there were; so is a line of JSON that is no request of any signal (as ``serve`` refuses
    such a request, not the others): the other lines are read."""
    spans: list[Span] = []
    logs: list[HeldRecord] = []
    invalid, first_invalid = 0, ""  # lines not valid JSON, the first one's problem
    unread, first_unread = 0, ""  # lines of JSON that are no request, the first's problem
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except (ValueError, RecursionError) as e:  # JSONDecodeError, invalid UTF-8, an
            # integer past the digit limit, nesting past the recursion limit
            invalid += 1
            first_invalid = first_invalid or f"line {number}: not valid JSON: {e}"
            continue
        try:
            if is_otlp_json(doc):
                spans.extend(from_json_doc(doc, path, on_error, f"line {number}: ", line))
            elif is_otlp_logs_json(doc):
                logs.extend(logs_from_json_doc(doc, path, on_error, f"line {number}: ", line))
            elif not is_other_signal(doc):
                raise LoaderError(path, f"line {number}: not an OTLP "
                                        "ExportTraceServiceRequest (nor another signal's "
                                        "request)")
        except LoaderError as e:
            unread += 1
            first_unread = first_unread or e.problem
    if invalid:
        more = f" (and {invalid - 1} more lines not valid JSON)" if invalid > 1 else ""
        on_error(LoaderError(path, first_invalid + more))
    if unread:
        more = f" (and {unread - 1} more lines not read)" if unread > 1 else ""
        on_error(LoaderError(path, first_unread + more))
    return spans, logs


def from_protobuf(data: bytes, path: Path, on_error: OnError,
                  ) -> tuple[list[Span], list[HeldRecord]]:
    """The spans and GenAI event records of a protobuf request, or of the requests of the
    file exporter's ``format: proto`` output (other signals' requests skipped). A span or
    record with invalid UTF-8 is dropped and reported (``invalid_utf8``), as ``serve``
    drops it (``otlp.parse_salvaged``), the rest of its request read."""
    spans: list[Span] = []
    logs: list[HeldRecord] = []
    for where, req, dropped in _protobuf_requests(data, path, on_error):
        if isinstance(req, ExportTraceServiceRequest):
            spans.extend(_decode(req, path, where, on_error, dropped))
        else:
            logs.extend(_held(req, path, where, on_error, dropped))
    return spans, logs


Request: TypeAlias = ExportTraceServiceRequest | ExportLogsServiceRequest
_SKIPPED = ExportTraceServiceRequest()  # a request of another signal (metrics), or empty


def _ignored(error: LoaderError) -> None:
    del error


def _protobuf_requests(data: bytes, path: Path, on_error: OnError,
                       ) -> Iterator[tuple[str, Request, Counter[str]]]:
    """(where, request, what was dropped from it by reason) of each traces or logs request:
    the file's frames when it is the file exporter's output (sizes and requests fill the
    file; a frame's first byte is its size's highest, 0 below 16 MiB, never a protobuf
    field's tag), else the file as one request. The exporter's output whose last request
    is cut short (a file it is still writing, or stopped writing) is reported
    (``on_error``) and its whole requests read."""
    frames, whole = _frames(data)
    if not whole and data[:1] == b"\x00":
        on_error(LoaderError(path, "OTLP protobuf requests cut short (the file exporter's "
                                   "output, the last request incomplete?): the "
                                   f"{len(frames)} whole requests before it read"))
    elif not (whole and frames):
        req, dropped = _signal(data)
        if req is None or req is _SKIPPED:
            raise LoaderError(path, "neither JSON nor an OTLP protobuf request holding spans "
                                    "or log records: not a recognised trace file")
        yield "", req, dropped
        return
    for number, frame in enumerate(frames, 1):
        req, dropped = _signal(frame) if frame else (_SKIPPED, Counter())
        if req is None:
            raise LoaderError(path, f"request {number}: not an OTLP protobuf request")
        if req is not _SKIPPED:
            yield f"request {number}: ", req, dropped


def unframe_zstd(data: bytes, path: Path, on_error: OnError) -> bytes:
    """The collector file exporter's ``compression: zstd`` output (each request a zstd
    frame after its 4-byte size, whatever the ``format``) as the file it writes without
    compression: JSON lines for ``format: json``, size-prefixed requests for ``proto``;
    any other ``data`` as it is. The requests decompress to ``MAX_GUNZIPPED_BYTES`` in all
    (``unzstd``: a bomb is cut off, naming the file); a last request cut short is reported
    (``on_error``) and the whole ones before it read."""
    frames, whole = _frames(data)
    if not frames or frames[0][:4] != ZSTD_MAGIC:
        return data
    if not whole:
        on_error(LoaderError(path, "zstd requests cut short (the file exporter's output, the "
                                   f"last request incomplete?): the {len(frames)} whole "
                                   "requests before it read"))
    out: list[bytes] = []
    left = MAX_GUNZIPPED_BYTES
    for number, frame in enumerate(frames, 1):
        try:
            request = unzstd(frame, left)
        except (TooLarge, ZstdError) as e:
            raise LoaderError(path, f"request {number}: cannot read: {e}") from e
        left -= len(request)
        out.append(request)
    if out[0].lstrip()[:1] == b"{":  # format: json
        return b"\n".join(out) + b"\n"
    return b"".join(len(r).to_bytes(4, "big") + r for r in out)


def _frames(data: bytes) -> tuple[list[bytes], bool]:
    """The file exporter's requests, each after its size (4 bytes, big-endian), as far as
    they are whole; and whether they fill the file (else the file is not such a sequence,
    or its last request is cut short)."""
    frames: list[bytes] = []
    at = 0
    while at < len(data):
        if at + 4 > len(data):
            return frames, False
        end = at + 4 + struct.unpack_from(">I", data, at)[0]
        if end > len(data):
            return frames, False
        frames.append(data[at + 4:end])
        at = end
    return frames, True


def _signal(frame: bytes) -> tuple[Request | None, Counter[str]]:
    """The request a frame holds (a protobuf message does not say its type), and what was
    dropped from it by reason (``invalid_utf8``, as ``serve`` parses it: ``_salvaged``):
    traces when a span has ids of a span's sizes (no other signal's message has them in
    those fields), ``_SKIPPED`` for metrics (a named metric with data), else logs when it
    holds records, else traces when it holds spans; None when it is none of them."""
    traces, dropped = _salvaged(frame, parse_request)
    spans = [] if traces is None else [s for rs in traces.resource_spans
                                       for ss in rs.scope_spans for s in ss.spans]
    if any(len(s.trace_id) == 16 and len(s.span_id) == 8 for s in spans):
        return traces, dropped
    metrics = _parsed(frame, ExportMetricsServiceRequest)
    if metrics is not None and any(m.name and m.WhichOneof("data")
                                   for rm in metrics.resource_metrics
                                   for sm in rm.scope_metrics for m in sm.metrics):
        return _SKIPPED, Counter()
    logs, logs_dropped = _salvaged(frame, parse_logs_request)
    if logs is not None and any(sl.log_records for rl in logs.resource_logs
                                for sl in rl.scope_logs):
        return logs, logs_dropped
    # spans of invalid ids: reported as the decoder's
    return (traces, dropped) if spans else (None, Counter())


def _salvaged(frame: bytes, parse: Callable[[bytes], tuple[Any, Counter[str]]],
              ) -> tuple[Any, Counter[str]]:
    """``serve``'s parse of a request (``otlp.parse_request``, ``otlp_logs.
    parse_logs_request``): the items with invalid UTF-8 dropped and counted; None when the
    frame is no such request at all."""
    try:
        return parse(frame)
    except (MalformedRequest, DecodeError, RecursionError):
        return None, Counter()


def _parsed(frame: bytes, cls: Any) -> Any:
    try:
        return cls.FromString(frame)
    except (DecodeError, RecursionError):
        return None
