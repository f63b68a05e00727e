"""What the bounds let ``serve``'s process tree hold in memory at worst, in one place.

Each part is a bound of the configuration times what one item it counts costs in memory
(measured: ``assembler.SPAN_HELD_BYTES``, ``ID_HELD_BYTES``, ``RECORD_HELD_BYTES``),
or a measured figure (the idle tree, the issues job's peak). The parts may all be full at
once (a slow store fills pending, the judge and the exporters while traffic goes on), so
their sum is what a container's memory limit must hold: the chart's default config is kept
under its default limit (tests/deploy/test_chart_memory.py). docs/architecture.md (Memory at
worst) gives the figures for the defaults. An upper bound: a span released and not yet
evaluated is counted both pending and kept for re-opening.

Not counted: an evaluation worker's trace (``trajectory`` bounds); the requests being decoded,
protobuf and OTLP/JSON, are within ``receiver.max_decoding_bytes``.
"""

from __future__ import annotations

from otel_eval.app.config import Config
from otel_eval.assemble.assembler import ID_HELD_BYTES, RECORD_HELD_BYTES, SPAN_HELD_BYTES

MIB = 1024 * 1024
# serve and one evaluation worker, the judge's litellm imported (judge.model): serve ~265 MiB
# RSS measured after a judged run, a worker ~40 MiB; ~65 MiB without the judge (pricing reads
# litellm's price map as JSON, the success model needs no scikit-learn: the issues job's
# clustering imports it, ISSUES_BYTES); bench/idle_memory.py, the chart's resources comment
IDLE_BYTES = 300 * MIB
# the issues job's peak over 3,000 distinct critiques (``issues.max_exact``), bench/README.md
ISSUES_BYTES = 432 * MIB
# what grpc's C core reads of a gRPC call's message while the call waits for a worker thread
# (its HTTP/2 stream window; the message whole when smaller): ~8 MiB measured per call,
# grpcio 1.85, 63 calls of 32 MiB queued behind one busy thread held +507 MiB
GRPC_QUEUED_CALL_BYTES = 8 * MIB


def worst_case(config: Config) -> dict[str, int]:
    """Bytes each part may hold at once, at worst (module docstring)."""
    a, r = config.assembly, config.receiver
    parts = {
        "idle process tree (serve, one worker)": IDLE_BYTES,
        "OTLP/HTTP request bodies in flight": max(r.max_body_bytes_in_flight,
                                                  r.max_message_bytes),
        "OTLP/gRPC messages being read (grpc_workers x max_message_bytes)":
            r.grpc_workers * r.max_message_bytes,
        "OTLP/gRPC calls waiting for a worker thread (grpc_max_concurrent_rpcs - grpc_workers)":
            max(0, r.grpc_max_concurrent_rpcs - r.grpc_workers)
            * min(r.max_message_bytes, GRPC_QUEUED_CALL_BYTES),
        "OTLP requests being decoded (max_decoding_bytes)": r.max_decoding_bytes,
        "pending spans (max_pending_bytes + max_pending_spans x SPAN_HELD_BYTES)":
            a.max_pending_bytes + a.max_pending_spans * SPAN_HELD_BYTES,
        "pending log records (max_pending_log_bytes + records x RECORD_HELD_BYTES)":
            a.max_pending_log_bytes + a.max_pending_log_records * RECORD_HELD_BYTES,
        "released traces kept for re-opening (max_released_bytes)": a.max_released_bytes,
        "remembered trace ids (tombstones and cut marks, 2 x max_tombstones)":
            2 * a.max_tombstones * ID_HELD_BYTES,
        "issues job": ISSUES_BYTES,
    }
    exporters = sum(bool(e) for e in (config.export.events_endpoint,
                                      config.export.forward_endpoint))
    if exporters:
        parts["export queues (max_queue_bytes each)"] = (
            exporters * config.export.max_queue_bytes)
    if config.judge.model:
        parts["judge queue (max_queue_bytes)"] = config.judge.max_queue_bytes
    return parts
