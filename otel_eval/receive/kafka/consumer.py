"""Stage: Kafka ingest. A consumer-group worker that feeds OTLP records to the engine and
commits only what is stored.

    topic partitions -> fetch (aiokafka) -> Ingest (decode_traces, admit: Engine.submit)
    logs_topic partitions -> ... -> Ingest (decode_logs, admit: Engine.submit(signal="logs"))
        -> on_stored (engine thread) -> stored queue, one loop wake-up per burst -> TraceGate
        (a trace's records finish together) -> OffsetTracker.done
        -> every commit_interval_s: commit each partition's low watermark + done-records metadata

Records come in through the receivers' door (``receive.ingest.Ingest``): the same decoding,
partial rejections (accounted under protocol ``kafka``) and throttling answers as OTLP/gRPC
and OTLP/HTTP; this stage keeps only what is Kafka's: offsets, commits, rebalances, pausing
while the engine throttles, and retrying a throttled record in partition order.

Log records (GenAI events from ``logs_topic``) join their trace in the engine's assembly as
on the OTLP path: whichever of spans and records arrives first opens the trace, a trace
waits for spans at most ``assembly.idle_timeout_s`` (then its records are dropped as
``no_spans``, counted), and records arriving after the trace was stored re-open it within
``assembly.reopen_window_s`` (a superseding revision). A logs record is done once every trace
it joined is stored (or dropped, counted): its offset is committed only then, like a spans
record's. Both topics are co-partitioned (``KafkaConfig``): a worker owns partition p of both,
by range assignment in ``group`` mode and by p % worker_count in ``static`` mode. (Workers
before this used round robin: Kafka refuses a member whose strategy the group's members do
not share, so a running group is upgraded by stopping the old workers first.)

Promises:
- **no loss**: a partition's committed offset never passes a record whose traces are not all
  evaluated and stored (``OffsetTracker``); a crash or kill replays from there;
- **replays are whole traces**: the commit metadata names the records past the position that
  are already done, and a restarted owner skips exactly those. An unstored trace is replayed
  from its first record, a stored one not at all (replaying from the bare position handed the
  engine the tails of stored traces, stored again as partial traces: the kill -9 test caught
  it). A trace stored after the last commit is re-evaluated whole, and the store keys
  evaluations by trace id (a re-evaluation supersedes). The records of one trace are
  finished together (``TraceGate``), so no commit falls between them. Not covered: a span
  that arrives after its trace was stored *and* after a restart is evaluated as a fragment
  (the engine no longer holds the trace's earlier spans), as on the OTLP path;
- a record that is not an OTLP request (poison) is counted with a reason, marked done and
  skipped: it never stalls its partition; so is a record batch that decompresses past
  ``max_batch_bytes`` or does not decompress (``batches``), never inflated whole nor raised;
- backpressure, per topic: with ``max_inflight_records`` of a topic's records taken and not
  stored, that topic's partitions are paused (nothing buffered without bound); resumed at
  half. The spans records of runs the engine holds open are not counted
  (``Engine.open_runs``): they finish only once the rest of their runs is read, which a
  pause for them prevented (every run cut idle as non-terminated); the engine's bounds hold
  those runs. Log records whose spans never come are in flight until
  ``assembly.idle_timeout_s``: counted with the spans' they paused the spans topic too (a
  clean trace took 18.1 s instead of 1.3 s); now they pause only the logs topic;
- a record the engine throttles (refused, nothing taken) waits in its partition's retry
  queue (``retries``: one refused for its service's share holds only the later records of its
  own traces, one refused for any other reason its partition), never skipped: the committed
  position stays at it, with the records done past it in the commit metadata, as for a run
  the engine holds open. A partition is paused while it is stalled, or while it has records
  waiting and they reach ``max_poll_records`` or hold half of ``receiver.max_decoding_bytes``
  (all partitions together: a waiting record holds its decoding charge) or it was read
  ``min(max_inflight_records, offsets.MAX_DONE_RANGE)`` records past its position;
- on revocation the worker stops taking the partition's records and commits what is done;
  the engine forgets the partition's runs still open that no kept partition fed too,
  unjudged (``Engine.hand_over``: a
  rebalance is no verdict, or the old owner would store a fragment of a run the new owner
  evaluates whole); the new owner replays the rest;
- lag (high watermark - position) per partition is reported through the metrics hook.

Record values are decoded by ``records`` (poison named there), within the receivers' decoding
budget (``receiver.max_decoding_bytes``: a record waits while it is full, its charge held
until the engine took it), record batches read within a
bound by ``batches``; pausing and lag are ``flow``'s; partition assignment
(``group`` or ``static``), and why group rebalancing is tested on a real broker rather than
librdkafka's mock cluster, is ``assignment``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import KafkaError

from otel_eval.base.kafka.client import client_kwargs
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import KafkaMetrics, KafkaStats
from otel_eval.receive.decoding import DecodeBudget
from otel_eval.receive.ingest import Ingest, Submitter
from otel_eval.receive.kafka import batches
from otel_eval.receive.kafka.assignment import (
    check_copartitioned,
    static_assignment,
    subscription,
)
from otel_eval.receive.kafka.flow import Flow, is_logs, kind
from otel_eval.receive.kafka.offsets import OffsetTracker, Ticket, TraceGate
from otel_eval.receive.kafka.records import POISON_LOG_INTERVAL_S, Decoder, Record
from otel_eval.receive.kafka.retries import Retries

log = logging.getLogger(__name__)

__all__ = ["POISON_LOG_INTERVAL_S", "KafkaConsumerStage"]

# What the consumer needs of ``otel_eval.assemble.engine.Engine``: what ``Ingest`` needs.
EngineLike = Submitter


class _Refused:
    """The accounting of a record the engine refused before: its refusals were counted once
    (``kafka_throttled_total`` counts records), what the engine then takes is counted."""

    def __init__(self, metrics: KafkaMetrics) -> None:
        self.spans_ingested = metrics.spans_ingested
        self.log_records_ingested = metrics.log_records_ingested

    def throttled(self, reason: str) -> None:
        pass


class _Listener(ConsumerRebalanceListener):
    def __init__(self, stage: KafkaConsumerStage) -> None:
        self.stage = stage

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.stage._revoke(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.stage._assign(assigned)


class KafkaConsumerStage:
    """``start()`` on the service's loop, ``shutdown(deadline_s)`` at exit. ``decoding``:
    the receivers' decoding budget, which records are decoded within (``records``)."""

    def __init__(self, config: KafkaConfig, engine: EngineLike,
                 metrics_hook: KafkaMetrics | None = None,
                 clock: Callable[[], float] = time.monotonic, *,
                 decoding: DecodeBudget | None = None) -> None:
        self.config = config
        self.engine = engine
        self.ingest = Ingest(engine)  # the receivers' door; accounted by ``metrics``
        self.metrics: KafkaMetrics = metrics_hook if metrics_hook is not None else KafkaStats()
        self.decoder = Decoder(config, self.metrics, self.ingest, decoding, clock)
        self.tracker: OffsetTracker[TopicPartition] = OffsetTracker()
        self.gate: TraceGate[TopicPartition] = TraceGate()
        # Stored records reported by engine threads, drained on the loop. One wake-up per
        # burst: a call_soon_threadsafe per record writes a byte per record to the loop's
        # self-pipe, which then fills (and a signal arriving meanwhile is lost).
        self._stored_q: list[tuple[Ticket[TopicPartition], frozenset[str]]] = []
        self._stored_lock = threading.Lock()
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.stop_timeouts: list[str] = []  # the waits the last shutdown's deadline cut
        # records the engine throttled, and those waiting behind them
        self._retries: Retries[TopicPartition, Record] = Retries()
        self._drained = asyncio.Event()
        self._last_commit = 0.0
        # pausing (backpressure) and lag
        self._flow = Flow(config, engine, self.metrics, self.tracker, self.gate,
                          self._retries, decoding=decoding)

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.config
        self._loop = asyncio.get_running_loop()
        batches.install()  # record batches decompressed within a bound, unreadable ones skipped
        batches.MAX_BATCH_BYTES.set(cfg.max_batch_bytes)  # the tasks started here inherit it
        consumer = AIOKafkaConsumer(
            **client_kwargs(cfg), group_id=cfg.group_id, enable_auto_commit=False,
            auto_offset_reset=cfg.auto_offset_reset, max_poll_records=cfg.max_poll_records,
            max_partition_fetch_bytes=cfg.max_partition_fetch_bytes,
            fetch_max_bytes=cfg.fetch_max_bytes,
            session_timeout_ms=int(cfg.session_timeout_s * 1000),
            heartbeat_interval_ms=max(100, int(cfg.session_timeout_s * 1000 / 3)),
            # range co-assigns partition p of both topics (aiokafka's default, round robin,
            # does not). Only range is offered: librdkafka's mock cluster, which the unit
            # tests run on, assigns nothing to a member offering two strategies.
            partition_assignment_strategy=(RangePartitionAssignor,))
        await consumer.start()
        self._consumer = consumer
        try:
            if cfg.assignment == "static":
                await self._assign_static(consumer)
            else:
                consumer.subscribe(pattern=subscription(self._topics()),
                                   listener=_Listener(self))
        except BaseException:
            await consumer.stop()
            raise
        self._task = asyncio.create_task(self._run(), name="kafka-consumer")
        self._task.add_done_callback(self._task_died)

    def _topics(self) -> list[str]:
        cfg = self.config
        return [cfg.topic, cfg.logs_topic] if cfg.logs_topic else [cfg.topic]

    async def _assign_static(self, consumer: AIOKafkaConsumer) -> None:
        cfg = self.config
        mine = await static_assignment(cfg)
        consumer.assign(list(mine))
        await self._assign(mine)
        log.info("kafka static assignment %d/%d: partitions %s", cfg.worker_index,
                 cfg.worker_count, sorted((tp.topic, tp.partition) for tp in mine))

    def _task_died(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("kafka consumer loop failed", exc_info=task.exception())

    async def shutdown(self, deadline_s: float = 30.0) -> None:
        """Stop fetching, wait (up to the deadline) for taken records to be stored, commit.
        After the engine's own shutdown (``stopped``: serve stops it first) nothing is
        awaited: what it stored is reported already, and the records of runs it left open
        (a stop is no verdict) stay uncommitted, replayed whole by the next owner.
        ``stop_timeouts`` names the waits the deadline cut short, each logged (none: every
        step ended by its own path): a stop that ran out of time is said, not silent."""
        end = time.monotonic() + deadline_s
        self.stop_timeouts = []
        if self._task is not None:
            self._task.cancel()
            # a loop that died keeps its exception in ``failure``; shutdown still commits
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self._drain_stored()
        if self.tracker.inflight() > self._retrying() and not getattr(
                self.engine, "stopped", False):
            # Records waiting for a retry were never taken by the engine; they are replayed.
            self._drained.clear()
            try:
                await asyncio.wait_for(self._drained.wait(), max(0.0, end - time.monotonic()))
            except TimeoutError:
                self._timed_out("stored", "%d record(s) not stored; the next owner replays "
                                "them", self.tracker.inflight() - self._retrying())
        if self._consumer is not None:
            # Both bounded: aiokafka retries a commit on retriable errors without end, and an
            # unanswering broker must not hold the exit. What is not committed is replayed.
            try:
                await asyncio.wait_for(self._commit(), max(1.0, end - time.monotonic()))
            except TimeoutError:
                self._timed_out("commit", "final commit; the next owner replays from the last")
            try:
                await asyncio.wait_for(self._consumer.stop(), max(5.0, end - time.monotonic()))
            except TimeoutError:
                self._timed_out("close", "closing the consumer (its group leave)")
            self._consumer = None
        for rec in self._retries.drop(self.tracker.partitions()):  # replayed by the next owner
            self.decoder.give_back(rec)

    def _timed_out(self, wait: str, what: str, *args: object) -> None:
        self.stop_timeouts.append(wait)
        log.warning("kafka shutdown deadline reached: " + what, *args)

    @property
    def failure(self) -> BaseException | None:
        t = self._task
        return t.exception() if t is not None and t.done() and not t.cancelled() else None

    # --- main loop ---------------------------------------------------------------------------

    async def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        cfg = self.config
        while True:
            self._retry_throttled()
            self._flow.apply(consumer)
            batch = await consumer.getmany(timeout_ms=int(cfg.throttle_retry_s * 1000),
                                           max_records=cfg.max_poll_records)
            for tp, records in batch.items():
                for rec in records:
                    self._take(tp, rec.offset, rec.value)
            await self._flow.report_lag(consumer)
            if time.monotonic() - self._last_commit >= cfg.commit_interval_s:
                await self._commit()

    def _take(self, tp: TopicPartition, offset: int, value: bytes | None) -> None:
        ticket = self.tracker.take(tp, offset)
        if self.tracker.replayed(ticket):  # done before a restart: its traces are stored
            self._done(ticket)
            return
        # decoded once nothing ahead of it in its partition holds it (``retries``)
        self._retries.offer(tp, None, Record(tp, ticket, value),
                            lambda r, again: self._submit(tp, r, again=again),
                            self.decoder.prepare)

    def _submit(self, tp: TopicPartition, rec: Record, again: bool = False) -> str:
        """Through the door; why the engine throttled it (nothing taken: retried, its
        decoding charge held meanwhile), or "". ``again``: the engine refused this record
        before, and it was counted then."""
        loop = self._loop
        assert loop is not None
        work, ticket = rec.decoded, rec.ticket
        if work is None:  # poison, or nothing in it for the engine (``Decoder.prepare``)
            self._done(ticket)
            return ""
        trace_ids = work.trace_ids

        def on_stored() -> None:  # engine worker thread
            with self._stored_lock:
                self._stored_q.append((ticket, trace_ids))
                first = len(self._stored_q) == 1
            if first:
                # a closed loop (the stage stopped) commits nothing more: these records stay
                # uncommitted and are delivered again, as after any stop
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._drain_stored)

        account = _Refused(self.metrics) if again else self.metrics
        res = self.ingest.admit(work, account, source="kafka", on_stored=on_stored)
        if res.outcome == "throttled":
            return res.reason or "throttled"
        self.decoder.give_back(rec)  # the engine's pending budget counts it now
        # on_stored is drained on this loop later, so this comes first
        self.gate.submitted(ticket, trace_ids)
        return ""

    def _drain_stored(self) -> None:
        with self._stored_lock:
            batch, self._stored_q = self._stored_q, []
        for ticket, trace_ids in batch:
            for finished in self.gate.stored(ticket, trace_ids):
                self._done(finished)

    def _retry_throttled(self) -> None:
        self._retries.retry(lambda tp, r, again: self._submit(tp, r, again=again),
                            self._current, self.decoder.prepare)

    def _current(self, tp: TopicPartition, rec: Record) -> bool:
        """Whether ``rec`` is still this consumer's (not revoked since it was taken)."""
        if rec.ticket.epoch == self.tracker.epoch(tp):
            return True
        self.decoder.give_back(rec)
        return False

    def _retrying(self) -> int:
        return len(self._retries)

    def _done(self, ticket: Ticket[TopicPartition]) -> None:
        # Records waiting for a throttled retry were never taken by the engine: not awaited.
        if self.tracker.done(ticket) and self.tracker.inflight() <= self._retrying():
            self._drained.set()

    # --- commits and rebalancing -----------------------------------------------------------

    async def _commit(self, offsets: dict[TopicPartition, tuple[int, str]] | None = None
                      ) -> None:
        consumer = self._consumer
        self._last_commit = time.monotonic()
        todo = self.tracker.committable() if offsets is None else offsets
        if consumer is None or not todo:
            return
        try:
            await consumer.commit(todo)
        except asyncio.CancelledError:  # shutdown cancelled the loop mid-commit: it may not
            self.tracker.uncommit(todo)  # have landed, so the final commit sends it again
            raise
        except KafkaError as e:  # rebalance in progress, coordinator moved: retried next time
            log.warning("kafka commit failed (%s); will retry", e)
            self.metrics.commit_failed(type(e).__name__)
            self.tracker.uncommit(todo)  # hand these positions out again next time
            return
        for tp, (pos, _meta) in todo.items():
            self.metrics.committed(tp.partition, pos, kind(self.config, tp))

    async def _assign(self, assigned: set[TopicPartition]) -> None:
        consumer = self._consumer
        assert consumer is not None
        # The committed metadata says which records past the position are already done
        # (offsets.py); only the coordinator's fetch returns it (``committed()`` drops it).
        fetched = await consumer._coordinator.fetch_committed_offsets(list(assigned))
        for tp in assigned:
            got = fetched.get(tp)
            if got is None or got.offset < 0:
                self.tracker.assign(tp)
                continue
            skipped = self.tracker.restore(tp, got.offset, got.metadata or "")
            if skipped is None:  # anyone who can commit for the group can write it
                log.warning("kafka %s[%d]: committed metadata past the bounds ignored; "
                            "replay from %d skips nothing", tp.topic, tp.partition, got.offset)
                self.metrics.metadata_ignored("too_large")
            elif skipped:
                log.info("kafka %s[%d]: replay from %d skips %d record(s) already stored",
                         tp.topic, tp.partition, got.offset, skipped)
        paused = [tp for tp in assigned if is_logs(self.config, tp) in self._flow.paused]
        if paused and self._consumer is not None:
            self._consumer.pause(*paused)  # stay paused until the backlog drains
        self._flow.assigned(consumer.assignment())
        if self.config.logs_topic and self.config.assignment == "group":
            spans = consumer.partitions_for_topic(self.config.topic) or set()
            logs = consumer.partitions_for_topic(self.config.logs_topic)
            if logs is not None:
                check_copartitioned(self.config, len(spans), len(logs))

    async def _revoke(self, revoked: set[TopicPartition]) -> None:
        # Records the engine reported stored and the loop has not drained yet are done: the
        # final commit covers them, and their runs are not handed over as unjudged.
        self._drain_stored()
        final: dict[TopicPartition, tuple[int, str]] = {}
        hand_over = getattr(self.engine, "hand_over", None)
        # a run a kept partition fed too (its trace's records on two partitions) stays: its
        # records there are done only once it is stored
        kept = {t for tp in self.tracker.partitions() if tp not in revoked
                for t in self.gate.open_traces(tp)}
        for tp in revoked:
            if hand_over is not None:  # a rebalance is no verdict: the new owner replays them
                hand_over(self.gate.open_traces(tp) - kept)
            self.gate.drop(tp)
            pos = self.tracker.revoke(tp)
            if pos is not None:
                final[tp] = pos
        for rec in self._retries.drop(revoked):
            self.decoder.give_back(rec)
        await self._commit(final)
        for tp in revoked:  # its new owner reports them
            self._flow.forget(tp)
            self.metrics.released(tp.partition, kind(self.config, tp))

