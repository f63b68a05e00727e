"""The spool's self-metrics (``otel_eval_spool_*``): what it holds and its bound, what it
replayed at start, what failed, by operation. The metric list and its invariants:
``telemetry.metrics``."""

from __future__ import annotations

from otel_eval.telemetry.declare import Declarer

# What a spool operation failed at (``spool_failures_total{operation}``): a request's row,
# deleting evaluated traces' rows, marking what assembly took, opening the file, reading a
# row back at start.
SPOOL_OPERATIONS = ("append", "delete", "settle", "open", "replay")


class SpoolMetrics:
    """The spool (``otel_eval.assemble.spool``): what it holds, what it replayed, what failed."""

    def __init__(self, d: Declarer) -> None:
        self.g_bytes = d.gauge("spool_bytes", "Bytes of OTLP requests held until evaluated.")
        self.g_requests = d.gauge("spool_requests", "OTLP requests held until evaluated.")
        self.g_max_bytes = d.gauge("spool_max_bytes", "The spool's bound "
                                   "(store.spool_max_bytes): past it, exports are refused "
                                   "with spool_full.")
        self.c_replayed = d.counter("spool_spans_replayed",
                                     "Spans replayed from the spool at start (not received).")
        self.c_replayed_logs = d.counter(
            "spool_log_records_replayed",
            "GenAI event log records replayed from the spool at start (not received).")
        self.c_failed = d.counter("spool_failures", "Spool writes that failed, by operation.",
                                   ["operation"])
        self.c_rejected = d.counter(
            "spool_spans_rejected",
            "Spans of the traces replayed from the spool at start that this version's decoder "
            "or assembly refuses (acknowledged by an earlier one), by reason (as "
            "receiver_spans_rejected_total's): logged, not evaluated.", ["reason"])
        self.c_rejected_logs = d.counter(
            "spool_log_records_rejected",
            "GenAI event log records of the traces replayed from the spool at start that this "
            "version's decoder or assembly refuses (acknowledged by an earlier one), by reason (as "
            "receiver_log_records_rejected_total's): logged, not evaluated.", ["reason"])

    def held(self, n_requests: int, n_bytes: int) -> None:
        self.g_requests.set(n_requests)
        self.g_bytes.set(n_bytes)

    def bound(self, max_bytes: int) -> None:
        """The spool is open: its bound, and each failure at 0 (OtelEvalSpoolRefusingWrites
        reads increase(): a series born at 1 would take the first failure for its baseline)."""
        self.g_max_bytes.set(max_bytes)
        for operation in SPOOL_OPERATIONS:
            self.c_failed.labels(operation)

    def replayed(self, n_spans: int) -> None:
        self.c_replayed.inc(n_spans)

    def replayed_logs(self, n_records: int) -> None:
        self.c_replayed_logs.inc(n_records)

    def failed(self, operation: str) -> None:
        self.c_failed.labels(operation).inc()

    def spans_rejected(self, reason: str, n: int) -> None:
        self.c_rejected.labels(reason).inc(n)

    def log_records_rejected(self, reason: str, n: int) -> None:
        self.c_rejected_logs.labels(reason).inc(n)
