"""What the bounds let ``serve``'s process tree hold in memory at worst, in one place.

Each part is a bound of the configuration times what one item it counts costs in memory
(measured: ``assembler.SPAN_HELD_BYTES``, ``ID_HELD_BYTES``, ``RECORD_HELD_BYTES``),
or a measured figure (the idle tree, the issues job's peak). The parts may all be full at
once (a slow store fills pending, the judge and the exporters while traffic goes on), so
their sum is what a container's memory limit must hold: the chart's default config is kept
under its default limit, and every chart example under its own (tests/deploy/
test_chart_memory.py). docs/architecture.md (Memory at worst) gives the figures for the
defaults. An upper bound: a span released and not yet evaluated is counted both pending and
kept for re-opening.

Only the parts the mode builds are counted (``app/service.py``): a receiver-mode front end
(``kafka.publish``) has no engine, spool, sinks, judge, evaluation worker nor issues job, and
holds, beyond the requests it receives, their records being published; the issues job runs
only with ``issues.interval_s`` > 0, the judge (litellm imported, its queue) only when
``judge.active``.

A Kafka worker's consumer (``kafka.brokers`` without ``publish``) is counted as far as the
configuration goes: aiokafka (0.14, ``consumer/fetcher.py``) has a response per broker in
flight (``kafka.fetch_max_bytes``; the brokers listed in ``kafka.brokers`` counted, a
cluster may have more; with the partitions given, at most one result per partition over them
all, as a response carries only partitions with no result kept) and a compressed batch
decompressed while its records are read (up to ``kafka.max_batch_bytes``), and what it holds
per assigned partition, two fetched results each (``KafkaConfig.fetched_bytes``:
``kafka.max_partition_fetch_bytes``, 1 MiB by default, or ``fetch_max_bytes`` when smaller,
the response carrying it; both topics' partitions; one kept by aiokafka until it is read,
``fetch_max_bytes`` capping one response, not what is kept; one read behind a stalled
partition's refused record, waiting undecoded with no decoding charge), counted when the
caller gives the partitions (``kafka_partitions``: only the group, or the topics' partition
count, gives them; the worker logs the figure on each assignment).
Not counted: a partition's first record batch, fetched whole when larger than either fetch
size (the brokers' record size, which the configuration does not give). Not counted either: an
evaluation worker's trace (``trajectory`` bounds). The requests being
decoded, protobuf and OTLP/JSON, and the Kafka records decoded and not yet taken by the engine
(waiting for a retry too) are within ``receiver.max_decoding_bytes``.
"""

from __future__ import annotations

from otel_eval.app.config import Config
from otel_eval.assemble.assembler import ID_HELD_BYTES, RECORD_HELD_BYTES, SPAN_HELD_BYTES

MIB = 1024 * 1024
# serve and one evaluation worker, no judge: serve ~63 MiB RSS measured (--workers 1), a
# worker ~29-40 MiB (pricing reads litellm's price map as JSON, the success model needs no
# scikit-learn: the issues job's clustering imports it, ISSUES_BYTES); bench/idle_memory.py,
# the chart's resources comment
IDLE_BYTES = 128 * MIB
# what the judge (judge.model) adds to the idle tree, litellm imported: serve ~235 MiB RSS
# idle with it (+172), ~265 MiB after a judged run (+~200); with IDLE_BYTES the ~300 MiB
# counted before for every evaluator, judge or none
JUDGE_IDLE_BYTES = 192 * MIB
# serve --kafka-publish, one process (no worker, no judge; aiokafka imported): 64 MiB RSS
# measured with the service started up to its publisher (no broker here, so not its
# connections nor the receivers' threads: the rest is their margin)
FRONT_END_IDLE_BYTES = 96 * MIB
# the issues job's peak over 3,000 distinct critiques (``issues.max_exact``), bench/README.md
ISSUES_BYTES = 432 * MIB
# what grpc's C core reads of a gRPC call's message while the call waits for a worker thread
# (its HTTP/2 stream window; the message whole when smaller): ~8 MiB measured per call,
# grpcio 1.85, 63 calls of 32 MiB queued behind one busy thread held +507 MiB
GRPC_QUEUED_CALL_BYTES = 8 * MIB


def worst_case(config: Config, kafka_partitions: int = 0) -> dict[str, int]:
    """Bytes each part the mode builds may hold at once, at worst (module docstring);
    ``kafka_partitions``: those a Kafka worker is assigned, both topics', when known."""
    front_end = config.kafka.enabled and config.kafka.publish
    judge = config.judge.active and not front_end  # judge.build: a model, not switched off
    parts = {"idle process (serve --kafka-publish)" if front_end
             else "idle process tree (serve, one worker)":
             FRONT_END_IDLE_BYTES if front_end else IDLE_BYTES}
    if judge:
        parts["idle judge (litellm imported)"] = JUDGE_IDLE_BYTES
    parts.update(_receiving(config))
    if front_end:
        # decoded spans encoded again, a request of several traces parsed again to split it,
        # one record per trace and the producer's copy, held until Kafka acknowledged: ~0.6
        # of the request's decoding charge at most, measured (LLM agent spans ~0.62, small
        # spans of 6,000 traces ~0.24; bounded here by the whole charge): the charge is held
        # until the publish returns, so max_decoding_bytes bounds the requests being published
        parts["records being published (max_decoding_bytes)"] = \
            config.receiver.max_decoding_bytes
        return parts
    parts.update(_evaluating(config))
    if config.kafka.enabled:
        parts.update(_consuming(config, kafka_partitions))
    return parts


def _consuming(config: Config, partitions: int) -> dict[str, int]:
    """A Kafka worker's consumer, what its configuration and ``partitions`` bound (module
    docstring)."""
    k = config.kafka
    brokers = sum(1 for b in k.brokers.split(",") if b.strip())
    responses = brokers * k.fetch_max_bytes
    if partitions:
        # aiokafka asks a broker only for the partitions it leads that have no result kept,
        # each up to one result: the responses carry at most the partitions' results
        responses = min(responses, partitions * k.fetch_result_bytes)
    parts = {"Kafka fetch responses (brokers listed x fetch_max_bytes, at most partitions x "
             "fetch_result_bytes)": responses,
             "Kafka record batch being decompressed (max_batch_bytes)": k.max_batch_bytes}
    if partitions:
        parts["Kafka fetched records (2 x partitions x fetch_result_bytes)"] = \
            k.fetched_bytes(partitions)
    return parts


def _receiving(config: Config) -> dict[str, int]:
    """The OTLP receivers' requests, in either mode."""
    r = config.receiver
    return {
        "OTLP/HTTP request bodies in flight": max(r.max_body_bytes_in_flight,
                                                  r.max_message_bytes),
        "OTLP/gRPC messages being read (grpc_workers x max_message_bytes)":
            r.grpc_workers * r.max_message_bytes,
        "OTLP/gRPC calls waiting for a worker thread (grpc_max_concurrent_rpcs - grpc_workers)":
            max(0, r.grpc_max_concurrent_rpcs - r.grpc_workers)
            * min(r.max_message_bytes, GRPC_QUEUED_CALL_BYTES),
        "OTLP requests being decoded (max_decoding_bytes)": r.max_decoding_bytes,
    }


def _evaluating(config: Config) -> dict[str, int]:
    """Assembly, the issues job and the sinks' queues of an evaluator."""
    a = config.assembly
    parts = {
        "pending spans (max_pending_bytes + max_pending_spans x SPAN_HELD_BYTES)":
            a.max_pending_bytes + a.max_pending_spans * SPAN_HELD_BYTES,
        "pending log records (max_pending_log_bytes + records x RECORD_HELD_BYTES)":
            a.max_pending_log_bytes + a.max_pending_log_records * RECORD_HELD_BYTES,
        "released traces kept for re-opening (max_released_bytes)": a.max_released_bytes,
        "remembered trace ids (tombstones and cut marks, 2 x max_tombstones)":
            2 * a.max_tombstones * ID_HELD_BYTES,
    }
    if config.issues.interval_s > 0:
        parts["issues job"] = ISSUES_BYTES
    exporters = sum(bool(e) for e in (config.export.events_endpoint,
                                      config.export.forward_endpoint))
    if exporters:
        parts["export queues (max_queue_bytes each)"] = (
            exporters * config.export.max_queue_bytes)
    if config.judge.active:
        parts["judge queue (max_queue_bytes)"] = config.judge.max_queue_bytes
    return parts
