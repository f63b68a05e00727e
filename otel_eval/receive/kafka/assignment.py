"""Stage: Kafka ingest, partition assignment. Which partitions of the spans and logs topics a
worker owns, and whether the two topics can be joined partition by partition.

Partition assignment: ``group`` (broker-coordinated rebalancing) or ``static`` (worker i of N,
no group membership; offsets still committed under the group id). Static is the path the
mock-cluster tests and ``bench/kafka.py`` run with more than one worker; group rebalancing
with two members is tested against the real broker the suite starts, because of this:

Why a two-member aiokafka group fails SyncGroup with InvalidRequest on librdkafka's mock
cluster (librdkafka 2.16, ``rdkafka_mock_cgrp.c``): not protocol versions (aiokafka 0.14 sends
JoinGroup v5 / SyncGroup v3, which the mock implements; with ``MockCluster.set_api_version``
pinning SyncGroup to v0 or v0-1 and JoinGroup to v0-1 or v0-2 the error is the same) but
timing. The mock completes a sync once every member *has an assignment*, and the leader's
SyncGroup carries the assignments of all members; so when the leader's SyncGroup arrives
before a follower's, the mock answers everyone it holds, moves the group to Up, and then
refuses the follower's SyncGroup (not allowed in Up) with INVALID_REQUEST, which aiokafka
treats as fatal. A real broker answers a SyncGroup in Stable with the member's assignment.
Verified: with the leader's assignor
delayed by 0.5 s, so that the follower syncs first, the same two members split 6 partitions
3/3 on the mock, and ``tests/kafka/test_kafka_group.py`` passes there (run by hand with
aiokafka's leader join patched that way). A second mock deviation showed up in that run: it
refuses OffsetCommit while a rebalance is joining (REBALANCE_IN_PROGRESS), where Kafka accepts
commits of the current generation during PreparingRebalance; so on the mock the commit on
revocation fails and the new owner replays more (whole traces still; never a loss).
"""

from __future__ import annotations

import logging
import re

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from otel_eval.base.kafka.client import client_kwargs
from otel_eval.base.kafka.config import KafkaConfig

log = logging.getLogger(__name__)


async def topic_partitions(cfg: KafkaConfig, topic: str | None = None) -> list[int]:
    """Partition numbers of ``topic`` (default ``cfg.topic``; empty if it does not exist).
    Read from the metadata of every topic: a metadata request naming a topic that does not
    exist has a broker with ``auto.create.topics.enable`` (Kafka's default) create it, with
    the broker's partition count; a worker must not create the topics it reads."""
    name = topic or cfg.topic
    admin = AIOKafkaAdminClient(**client_kwargs(cfg))
    await admin.start()
    try:
        described = await admin.describe_topics()  # every topic: names none, creates none
    finally:
        await admin.close()
    for desc in described:
        if desc.get("topic") == name and not desc.get("error_code"):
            return sorted(p["partition"] for p in desc["partitions"])
    return []


def subscription(topics: list[str]) -> str:
    """The pattern a group member subscribes with: exactly ``topics``. Subscribing to topic
    names has the client ask for their metadata by name, which creates a missing one on a
    broker that auto-creates topics; a pattern is matched against the metadata of every
    topic, so a missing topic is not read (and is read once someone creates it)."""
    return "^(?:" + "|".join(re.escape(t) for t in topics) + ")$"


async def static_assignment(cfg: KafkaConfig) -> set[TopicPartition]:
    """Worker ``worker_index`` of ``worker_count``: partition p of both topics when
    p % worker_count == worker_index. Raises RuntimeError when ``topic`` does not exist."""
    parts = await topic_partitions(cfg)
    if not parts:
        raise RuntimeError(f"kafka topic {cfg.topic!r} not found")
    mine = {TopicPartition(cfg.topic, p) for p in parts
            if p % cfg.worker_count == cfg.worker_index}
    if cfg.logs_topic:
        logs = await topic_partitions(cfg, cfg.logs_topic)
        check_copartitioned(cfg, len(parts), len(logs))
        mine |= {TopicPartition(cfg.logs_topic, p) for p in logs
                 if p % cfg.worker_count == cfg.worker_index}
    return mine


def check_copartitioned(cfg: KafkaConfig, spans: int, logs: int) -> None:
    """Warn when the logs topic cannot be joined partition by partition (logged per
    (re)assignment; records still flow, but a trace's spans and log records may then reach
    different workers: the records are dropped as ``no_spans`` and the trace evaluated
    without them)."""
    if logs and spans != logs:
        log.warning("kafka: topic %r has %d partitions and logs topic %r has %d; they must "
                    "be equal for a worker to get a trace's log records with its spans",
                    cfg.topic, spans, cfg.logs_topic, logs)
