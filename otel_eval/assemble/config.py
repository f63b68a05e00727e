"""Configuration of trace assembly (stage: assemble), the ``assembly:`` section: when a trace
counts as finished, and the bounds on what is held open."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from otel_eval.base.configcheck import validate


@dataclass(frozen=True)
class AssemblyConfig:
    # A trace whose root span has ended is released after this many seconds without a new span.
    # Children of an agent run usually end before the root; a short wait absorbs batching delay
    # of SDK exporters (BatchSpanProcessor flushes every 5 s by default).
    grace_s: float = 10.0
    # A trace without an ended root is released as `incomplete` after this long with no new span.
    # Datadog closes traces after 3 min idle; the collector's tail sampling waits 30 s total.
    # A span is exported when it ends, so a tool or LLM call longer than this with no other
    # span of the run ending meanwhile is such a silence: the run is judged `incomplete`
    # (non_termination, counted in the non-termination metric and alert) and re-judged
    # whole only when its next spans come within reopen_window_s of that release (a call
    # up to idle_timeout_s + reopen_window_s, 480 s by default; the first judgement's
    # metrics stay counted). Longer: its later spans are `late` and the `incomplete`
    # verdict stands. Set it above your longest call.
    idle_timeout_s: float = 180.0
    # A trace open longer than this (first span seen to now) is cut and released `truncated`.
    max_trace_duration_s: float = 3600.0
    # Late spans for a trace released less than this long ago re-open it (re-evaluated,
    # superseding the earlier result). Later ones are rejected as `late`; with pass-through
    # on (export.forward_endpoint) they are taken and forwarded unstamped, never evaluated.
    # It also bounds the silence a run released while it went on survives (cut at
    # max_trace_duration_s, pushed out by release_oldest or pressure, or idle): below
    # idle_timeout_s, a silence an open run would wait out (a long tool call) loses the
    # rest of a run so released, which keeps its cut verdict.
    reopen_window_s: float = 300.0
    # Upper bound on traces being assembled at once.
    max_open_traces: int = 50_000
    # Spans kept per trace; more are rejected (partial success) with reason `trace_too_large`;
    # with pass-through on (export.forward_endpoint) they are taken and forwarded unstamped,
    # never evaluated (otel_eval_evaluation_spans_skipped_total{reason="trace_too_large"}).
    # The ended root (entry span) of a run past it is still taken, one span past the limit:
    # it ends the run (an SDK sends it last), refused the run would read as never ended.
    # A run that ended with spans past it is released `truncated` (reason
    # `trace_too_large`: not the whole run, what came after the cut unknown), never
    # `complete`; one whose root never ended stays `incomplete`. A late span a run released
    # `complete` has no room for (within reopen_window_s) re-opens it: stored again `truncated`.
    max_spans_per_trace: int = 10_000
    # Spans accepted but not yet evaluated (open + released-but-queued). Past it receivers
    # throttle (gRPC RESOURCE_EXHAUSTED, HTTP 429) so exporters retry: nothing acked is dropped.
    max_pending_spans: int = 1_000_000
    # What to do when max_open_traces is reached: `throttle` refuses spans of new traces with a
    # retryable error; `release_oldest` releases the oldest open trace early as `truncated`
    # (`complete` when its run had ended: it waited only for its grace).
    overflow_policy: Literal["throttle", "release_oldest"] = "throttle"
    # Recently released traces kept (with their spans) for re-opening: bounds reopen memory.
    max_released_traces: int = 20_000
    # Bytes of the spans and GenAI log records those released traces hold (as received, and
    # 1 KiB more per span, 0.5 KiB per record: what each costs held beyond its bytes): the
    # oldest are forgotten past it (their late spans then refused `late`, as past
    # reopen_window_s), so reopen memory is bounded in bytes, not only in traces.
    max_released_bytes: int = 256 * 1024 * 1024
    # Ids of released traces remembered (no spans) so that very late spans are refused as
    # `late` instead of starting a fragment that would replace a full evaluation. Memory: up
    # to 256 bytes an id (a 32-character str in an ordered dict), ~250 MB for the default;
    # the ids refused for a service's share (max_service_share) are remembered as many again.
    max_tombstones: int = 1_000_000
    # Bytes of spans (as received, OTLP protobuf) accepted but not yet evaluated. Past it
    # receivers throttle spans (reason `pending_bytes`), as for max_pending_spans. Log
    # records have a budget of their own (max_pending_log_bytes): they never refuse spans.
    max_pending_bytes: int = 512 * 1024 * 1024
    # Bytes of GenAI log records (as received) held waiting for their trace's spans. Past it
    # receivers throttle log records (reason `pending_log_bytes`); spans are still taken
    # (records whose spans never come must not starve span ingest). Held records whose
    # trace gets no span are dropped after idle_timeout_s (`no_spans`).
    max_pending_log_bytes: int = 128 * 1024 * 1024
    # Under slot pressure (max_open_traces reached), traces holding a single span and idle
    # this long give way first: released early (reason `pressure`: `truncated`, a cut,
    # never judged `incomplete`; `complete` when the run had ended), seconds;
    # so do those holding only GenAI log records (dropped, `no_spans`).
    pressure_idle_s: float = 30.0
    # Largest share of max_open_traces, of max_pending_spans and max_pending_bytes, and of
    # max_pending_log_records and max_pending_log_bytes that one service.name may hold
    # (0..1]; 1.0: none. Slots: the traces its spans or its GenAI log records (their
    # resource's service.name) open; spans and bytes: the pending spans whose own resource
    # names it; log records: the pending records (held, or released with their trace and
    # not yet evaluated) whose resource names it, and the bytes of those held (a service
    # holding none may send one request of any size); and of store.spool_max_bytes: the
    # requests spooled for its runs (open, or evaluated and waiting on a slow sink; a
    # gateway's batch is charged to the services whose traces in it are not done).
    # Decided per trace, by the service that opens it (its root's when the request holds it,
    # else its first span's or record's): a service past a share opens no new trace; a
    # span or record of a trace open already is never refused for one (a run is never
    # cut). A request whose every new trace is an over-share service's is throttled
    # (reason `service_share`); in a request with others (a gateway's batch) only the
    # traces it would open are rejected whole (partial success, reason `service_share`),
    # the rest taken. Pass-through on: throttled whole (a span rejected for good would
    # never reach the backend). A run whose spans or records were so rejected (a callee's
    # span come before its root, in-share, opened the run) is released `truncated`
    # (reason `service_share`), never judged as whole (trace ids remembered: max_tombstones).
    max_service_share: float = 1.0
    # GenAI event log records (message content sent as OTLP logs) kept per trace; more are
    # dropped with reason `trace_too_large`; a run that ended so is released `truncated`
    # (reason `trace_too_large`, as for spans past max_spans_per_trace), never `complete`.
    max_log_records_per_trace: int = 10_000
    # GenAI event log records accepted but not yet evaluated. Past it the logs receivers
    # throttle (gRPC RESOURCE_EXHAUSTED, HTTP 429), as for spans.
    max_pending_log_records: int = 1_000_000

    def __post_init__(self) -> None:
        validate(self, minimum={
            "grace_s": 0, "idle_timeout_s": 0, "max_trace_duration_s": 0, "reopen_window_s": 0,
            "max_open_traces": 1, "max_spans_per_trace": 1, "max_pending_spans": 1,
            "max_released_traces": 0, "max_released_bytes": 0, "max_tombstones": 0,
            "max_pending_bytes": 1,
            "max_pending_log_bytes": 1,
            "pressure_idle_s": 0, "max_log_records_per_trace": 1,
            "max_pending_log_records": 1},
            above={"max_service_share": 0}, maximum={"max_service_share": 1})
