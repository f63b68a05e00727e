"""The chart's default config holds, at worst, no more memory than its default limit.

Each bound of the config lets serve hold so much (``app.memory.worst_case``, figures measured
in tests/test_assembly.py); all of them may be full at once (a slow store fills pending while
traffic goes on), so the container's limit must hold their sum, or the pod is OOM-killed
under load instead of throttling the exporters as the bounds promise. No helm needed: the
chart renders ``config`` over what it adds (endpoints, store path, workers), none of them a
memory bound.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from deploy_files import (
    CHART,
    VALUES_FILES,
    Helm,
    main_container,
    pod_config,
    sidecar_config,
    sidecar_container,
    sidecar_docs,
    values_args,
)

from otel_eval.app.config import Config, build
from otel_eval.app.memory import worst_case

_UNITS = {"Mi": 1024 ** 2, "Gi": 1024 ** 3}


def _quantity(text: str) -> int:
    return int(text[:-2]) * _UNITS[text[-2:]]


def test_the_chart_config_fits_its_memory_limit() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    limit = _quantity(values["resources"]["limits"]["memory"])
    _fits(worst_case(build(Config, values["config"])), limit)


# The share of a limit the worst case leaves free: the parts are measured figures times
# bounds (an item's size varies around its measured mean, the allocator keeps freed arenas)
# and some holdings go uncounted (app/memory.py: a first record batch fetched whole, an
# evaluation worker's trace); the Kafka workers example at 2036 of its 2048 MiB had none.
MARGIN = 0.05


def _fits(parts: dict[str, int], limit: int) -> None:
    total = sum(parts.values())
    room = int(limit * (1 - MARGIN))
    assert total <= room, "\n".join(
        [f"worst case {total >> 20} MiB over {room >> 20} MiB ({MARGIN:.0%} of the limit "
         f"{limit >> 20} MiB left free):"]
        + [f"  {n >> 20:>5} MiB  {name}" for name, n in parts.items()])


def test_the_architecture_doc_gives_the_worst_cases() -> None:
    """docs/architecture.md (Memory at worst) states the totals the code computes: the
    defaults' and the chart's."""
    text = " ".join((CHART.parents[1] / "docs" / "architecture.md").read_text().split())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for config in (Config(), build(Config, values["config"])):
        total = sum(worst_case(config).values())
        assert f"~{total / 1024 ** 3:.1f} GiB" in text, total


def test_grpc_calls_waiting_for_a_worker_thread_are_counted() -> None:
    """grpc's C core reads ~8 MiB of each call's message while the call waits for one of the
    ``grpc_workers`` threads, up to ``grpc_max_concurrent_rpcs`` calls taken at once: with the
    defaults 56 x 8 MiB the worst case left out."""
    base = Config()
    more = build(Config, {"receiver": {"grpc_max_concurrent_rpcs": 72}})
    assert sum(worst_case(more).values()) - sum(worst_case(base).values()) == 8 * 8 * 2**20
    small = build(Config, {"receiver": {"max_message_bytes": 2**20}})
    grpc_parts = {k: n for k, n in worst_case(small).items() if "gRPC" in k}
    assert sum(grpc_parts.values()) == 64 * 2**20  # each call at most its message


def test_a_request_the_chart_takes_fits_its_decoding_budget() -> None:
    """A request of LLM agent spans as large as ``max_message_bytes`` is not refused
    ``too_large`` by ``max_decoding_bytes`` alone (charged by content, ``receive.decoding``):
    the conformance recordings as one request stand for such spans (~10x charged). The
    chart's 16 MiB under 128 MiB refused them: ~152 MiB charged."""
    from cost import work
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from otel_eval.receive.decoding import DecodeBudget
    request = ExportTraceServiceRequest()
    for requests in work.conformance_requests():
        for signal, one in requests:
            if signal == "traces":
                request.MergeFrom(one)
    body = request.SerializeToString()
    receiver = build(Config, yaml.safe_load((CHART / "values.yaml").read_text())["config"]
                     ).receiver
    per_byte = DecodeBudget(1 << 40).cost(body) / len(body)
    assert per_byte * receiver.max_message_bytes <= receiver.max_decoding_bytes, per_byte


def test_a_receiver_counts_what_a_front_end_holds() -> None:
    """``serve --kafka-publish`` builds no engine, no spool, sinks nor issues job
    (``Service.front_end``): its requests go to Kafka as they come. Counted as an evaluator,
    the receiver example's ~1.9 GiB stood against its 1Gi limit for parts it never holds; what
    it does hold beyond the requests is their records being published."""
    evaluator = build(Config, {"kafka": {"brokers": "kafka:9092"},
                               "judge": {"model": "openai/gpt-4o-mini"},
                               "export": {"events_endpoint": "collector:4317"}})
    receiver = build(Config, {"kafka": {"brokers": "kafka:9092", "publish": True},
                              "judge": {"model": "openai/gpt-4o-mini"},
                              "export": {"events_endpoint": "collector:4317"}})
    held = worst_case(evaluator)
    front = worst_case(receiver)
    assert not [n for n in front if any(
        word in n for word in ("pending", "released", "trace ids", "issues", "judge", "export"))]
    assert front["records being published (max_decoding_bytes)"] == \
        receiver.receiver.max_decoding_bytes
    receiving = [n for n in held if "OTLP" in n]
    assert receiving and all(front[n] == held[n] for n in receiving)
    assert sum(front.values()) < sum(held.values()) - 2 * 2**30


def test_the_issues_job_is_counted_only_when_it_runs() -> None:
    """``issues.interval_s`` 0 builds no issues job (``issues_job.build``)."""
    on, off = Config(), build(Config, {"issues": {"interval_s": 0}})
    assert sum(worst_case(on).values()) - sum(worst_case(off).values()) == 432 * 2**20


def test_the_judges_imports_are_counted_only_when_it_is_built() -> None:
    """``judge.model`` empty builds no judge (``judge.build``) and imports no litellm: serve
    idled at ~63 MiB RSS without it, ~235 MiB with it (bench/idle_memory.py --workers 1),
    yet the idle figure counted the judge's ~300 MiB tree either way."""
    def idle(config: Config) -> int:
        return sum(n for name, n in worst_case(config).items() if name.startswith("idle"))

    off, on = Config(), build(Config, {"judge": {"model": "openai/gpt-4o-mini"}})
    assert idle(off) <= 128 * 2**20
    assert idle(on) - idle(off) >= 172 * 2**20
    assert idle(on) >= 300 * 2**20  # ~265 MiB serve after a judged run, a worker ~40


def test_the_sidecar_example_fits_its_memory_limit(tmp_path: Path) -> None:
    """The sidecar ran serve on the code's defaults (~4.9 GiB at worst) under a 1Gi limit:
    the bounds of a fleet's evaluator, not of one agent's runs."""
    docs = sidecar_docs()
    limit = _quantity(sidecar_container(docs)["resources"]["limits"]["memory"])
    _fits(worst_case(sidecar_config(docs, tmp_path)), limit)


@pytest.mark.parametrize("values", [None, *VALUES_FILES],
                         ids=["defaults", *(p.stem for p in VALUES_FILES)])
def test_every_chart_example_fits_its_memory_limit(helm: Helm, values: Path | None,
                                                   tmp_path: Path) -> None:
    """What each example's pod runs (helm's merge of the example over values.yaml, the
    config the rendered pod loads, its mode) held at worst under the limit it renders: the
    evaluator example raised max_pending_spans to the code's 1,000,000 (~2.7 GiB) and the
    judge example added the judge's queue (~2.2 GiB), both under the chart's 2Gi. A Kafka
    worker's fetched records are counted for the partitions the example gives it: the Kafka
    workers example, counted without them, stood at 2028 MiB of its 2Gi (2036 with them)."""
    docs = helm.template(*values_args(values))
    limit = _quantity(main_container(docs)["resources"]["limits"]["memory"])
    config = pod_config(docs, tmp_path)
    _fits(worst_case(config, kafka_partitions=_kafka_partitions(values, config)), limit)


def _kafka_partitions(values: Path | None, config: Config) -> int:
    """The partitions a Kafka worker of the example is assigned, both topics' (the logs topic
    co-partitioned with the topic): the chart's ``kafka.partitions`` of the topic, those p %
    worker_count == worker_index with ``static`` (the pod rendered is ordinal 0, which takes
    the most), all of them with ``group`` (a worker holds every partition while the others
    are away). 0 for a pod that consumes nothing."""
    k = config.kafka
    if not k.enabled or k.publish:
        return 0
    chart = yaml.safe_load((CHART / "values.yaml").read_text())["kafka"]
    given = {} if values is None else yaml.safe_load(values.read_text()).get("kafka", {})
    partitions = int(given.get("partitions", chart["partitions"]))
    assert partitions, "a Kafka worker example gives kafka.partitions: its fetches count them"
    mine = [p for p in range(partitions) if k.assignment == "group"
            or p % k.worker_count == k.worker_index]
    return len(mine) * (2 if k.logs_topic else 1)


def test_a_kafka_workers_fetch_buffers_are_counted() -> None:
    """A Kafka worker's consumer holds aiokafka's fetch responses (``kafka.fetch_max_bytes``
    each, one in flight per broker: the brokers listed counted) and a record batch being
    decompressed (``kafka.max_batch_bytes``); neither was counted. What it keeps per
    assigned partition (``max_partition_fetch_bytes``) is counted when the partitions are
    given (tests/kafka/test_kafka_fetch_buffers.py)."""
    worker = build(Config, {"kafka": {"brokers": "a:9092,b:9092", "fetch_max_bytes": 8 << 20,
                                      "max_partition_fetch_bytes": 1 << 20,
                                      "max_batch_bytes": 16 << 20}})
    parts = worst_case(worker)
    assert parts["Kafka fetch responses (brokers listed x fetch_max_bytes, at most partitions "
                 "x fetch_result_bytes)"] == 16 << 20
    assert parts["Kafka record batch being decompressed (max_batch_bytes)"] == 16 << 20
    for config in (Config(), build(Config, {"kafka": {"brokers": "a:9092", "publish": True}})):
        assert not [n for n in worst_case(config) if n.startswith("Kafka")]


def test_a_kafka_workers_responses_are_at_most_its_partitions_results() -> None:
    """A fetch response carries only the worker's partitions, one result each
    (``KafkaConfig.fetch_result_bytes``; aiokafka asks a broker only for the partitions it
    leads with no result kept), so the responses in flight hold at most partitions x a
    result, however many brokers there are: the Kafka workers example counted 3 x 50 MiB
    for its 4 partitions of 1 MiB."""
    worker = build(Config, {"kafka": {"brokers": "a:9092,b:9092,c:9092"}})

    def responses(partitions: int) -> int:
        (n,) = [n for name, n in worst_case(worker, partitions).items()
                if name.startswith("Kafka fetch responses")]
        return n

    assert responses(0) == 3 * 50 << 20  # the partitions not given
    assert responses(4) == 4 << 20
    assert responses(400) == 3 * 50 << 20
