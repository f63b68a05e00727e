"""Stage: Kafka ingest, how far the consumer reads: which partitions are paused
(backpressure) and how far behind each is (lag). Moved out of ``consumer`` (its promises
on backpressure and lag are stated there); the consumer calls ``apply`` and ``report_lag``
once per poll, on its loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import KafkaMetrics
from otel_eval.receive.decoding import DecodeBudget
from otel_eval.receive.ingest import Submitter
from otel_eval.receive.kafka.offsets import MAX_DONE_RANGE, OffsetTracker, TraceGate
from otel_eval.receive.kafka.records import Record
from otel_eval.receive.kafka.retries import Retries

log = logging.getLogger(__name__)


def is_logs(config: KafkaConfig, tp: TopicPartition) -> bool:
    return bool(config.logs_topic) and tp.topic == config.logs_topic


def kind(config: KafkaConfig, tp: TopicPartition) -> str:
    """The topic kind of ``tp`` (``TOPIC_KINDS``), a metrics label."""
    return "logs" if is_logs(config, tp) else "spans"


class Flow:
    def __init__(self, config: KafkaConfig, engine: Submitter, metrics: KafkaMetrics,
                 tracker: OffsetTracker[TopicPartition], gate: TraceGate[TopicPartition],
                 retries: Retries[TopicPartition, Record], *,
                 decoding: DecodeBudget | None = None) -> None:
        self.config, self.engine, self.metrics = config, engine, metrics
        self.tracker, self.gate, self._retries = tracker, gate, retries
        self.decoding = decoding  # what the records waiting hold (``_retries_full``)
        # the signals (logs: True) whose partitions are paused for max_inflight_records
        self.paused: set[bool] = set()
        self._pausing = False  # whether any partition is paused (the ``paused`` metric)
        # partition ends asked of the broker for paused partitions (``report_lag``)
        self._ends: dict[TopicPartition, int] = {}
        # when the spans records of open runs were last counted (``_held_open``), how many
        self._open_held: tuple[float, int] = (float("-inf"), 0)
        self._last_ends = 0.0
        # partitions revoked and not assigned again: their new owner reports their lag, even
        # while the consumer's assignment still lists them (a rebalance in progress)
        self._gone: set[TopicPartition] = set()

    def assigned(self, tps: set[TopicPartition]) -> None:
        """``tps`` are this worker's now. Say what the fetches may keep with them
        (``KafkaConfig.fetched_bytes``): only the group (or, ``static``, the topics' partition
        count) gives the partitions, so ``app.memory`` counts it only when told them."""
        self._gone -= tps
        partitions = len(tps)
        held = self.config.fetched_bytes(partitions)
        log.info("kafka: %d partition(s) assigned; their fetched records may hold %.1f MiB "
                 "(2 x partitions x fetch_result_bytes: aiokafka's results kept and "
                 "records waiting undecoded behind a stall; beyond the fetch responses in "
                 "flight)", partitions, held / 2**20)

    def forget(self, tp: TopicPartition) -> None:
        """A revoked partition: its new owner reports its lag."""
        self._ends.pop(tp, None)
        self._gone.add(tp)

    def apply(self, consumer: AIOKafkaConsumer) -> None:
        """Per signal: a topic's partitions paused while its records in flight reach
        ``max_inflight_records``, resumed at half; and a partition stalled by a refusal, or
        with records waiting when they reach ``max_poll_records`` or half the decoding budget
        (all partitions together, ``_retries_full``) or it was read
        ``min(max_inflight_records, MAX_DONE_RANGE)`` past its position."""
        cfg = self.config
        parts = consumer.assignment()
        for logs in (False, True):
            mine = [tp for tp in parts if is_logs(cfg, tp) == logs]
            inflight = sum(self.tracker.inflight(tp) for tp in mine)
            if not logs and inflight > cfg.max_inflight_records // 2:
                inflight = max(0, inflight - self._held_open(mine))
            if logs not in self.paused and inflight >= cfg.max_inflight_records:
                self.paused.add(logs)
            elif logs in self.paused and inflight <= cfg.max_inflight_records // 2:
                self.paused.discard(logs)
        full = self._retries_full()
        ahead = min(cfg.max_inflight_records, MAX_DONE_RANGE)
        want = {tp for tp in parts if is_logs(cfg, tp) in self.paused
                or tp in self._retries.stalled
                or (tp in self._retries and (full or self.tracker.ahead(tp) >= ahead))}
        have = consumer.paused() & parts
        if want - have:
            consumer.pause(*(want - have))
        if have - want:
            consumer.resume(*(have - want))
        if bool(want) != self._pausing:
            self._pausing = bool(want)
            self.metrics.paused(self._pausing)

    def _retries_full(self) -> bool:
        """Whether the records waiting for a retry reach ``max_poll_records``, or hold half
        the decoding budget: each holds its charge until the engine takes it (``records``),
        and a few large ones held it all, throttling the receivers' requests and the other
        partitions' records (other services, which the engine would take) as ``decoding``
        until the refused ones were taken; the other half is left to them."""
        if len(self._retries) >= self.config.max_poll_records:
            return True
        if self.decoding is None:
            return False
        return 2 * sum(r.charge for r in self._retries.records()) >= self.decoding.max_bytes

    def _held_open(self, parts: list[TopicPartition]) -> int:
        """``_in_open_runs``, counted again at most every ``commit_interval_s`` (it reads
        every record in flight, and the engine under its lock)."""
        at, n = self._open_held
        now = time.monotonic()
        if now - at >= self.config.commit_interval_s:
            n = self._in_open_runs(parts)
            self._open_held = (now, n)
        return n

    def _in_open_runs(self, parts: list[TopicPartition]) -> int:
        """Spans records of ``parts`` in flight only because their runs are still open in
        the engine: those finish only once more of their run is read from this topic, so
        they are not what ``max_inflight_records`` bounds (the engine's own bounds, open
        traces, pending spans and a service's share, hold them). Counted, they paused the
        topic once that many runs were open, and every one of them, its end unread, was cut
        idle as non-terminated, the other services' runs locked out meanwhile. (A logs
        record's run ends on the spans topic: a pause of the logs topic holds no run.)"""
        open_runs = getattr(self.engine, "open_runs", None)
        if open_runs is None:
            return 0
        waiting = self.gate.waiting(parts)
        return sum(waiting[t] for t in open_runs(list(waiting)))

    async def report_lag(self, consumer: AIOKafkaConsumer) -> None:
        """Lag = the partition's end (high watermark) - the first record not finished here
        (taken and not stored, or not taken yet: the fetch position). A paused partition is
        not fetched, so the fetches' high watermark stops there: its end is asked of the
        broker instead (at most every ``commit_interval_s``), or backpressure, when lag
        matters, showed it flat and every partition not yet read from showed none."""
        parts = consumer.assignment()
        paused = consumer.paused() & parts
        now = time.monotonic()
        if paused and now - self._last_ends >= self.config.commit_interval_s:
            self._last_ends = now
            with contextlib.suppress(KafkaError, TimeoutError):  # asked again next time
                self._ends.update(await asyncio.wait_for(
                    consumer.end_offsets(list(paused)), self.config.commit_interval_s))
        for tp in parts - self._gone:  # revoked while the ends were asked for: not ours
            ends = [h for h in (consumer.highwater(tp), self._ends.get(tp)) if h is not None]
            pos = self.tracker.position(tp)
            if pos is None:
                pos = _fetch_position(consumer, tp)
            if ends and pos is not None:
                high = max(ends)
                self.metrics.lag(tp.partition, max(0, high - pos), kind(self.config, tp))


def _fetch_position(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int | None:
    """The consumer's position in ``tp`` when known (``position()`` would wait for it)."""
    sub = consumer._subscription.subscription
    assignment = sub.assignment if sub is not None else None
    if assignment is None or tp not in assignment.tps:
        return None
    state = assignment.state_value(tp)
    return state.position if state.has_valid_position else None
