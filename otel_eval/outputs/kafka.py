"""Sink: publish each stored evaluation as JSON (the v1 per-trace object) to a results topic.

    Engine worker thread -> export(trace, evaluation) -> bounded queue (drop_oldest, counted)
        -> sender task on the service loop -> results_topic (key = trace id)

``export`` never blocks the engine: it hands the JSON to the event loop and returns. When
downstream is slower than evaluation, the oldest unsent evaluation is dropped and counted
(``publish_dropped("results", "queue_full")``); the store keeps every evaluation regardless.
A record the producer refuses (over ``max_request_bytes``: ``record_too_large``) or fails to
deliver (``send_failed``) is dropped and counted, and the next is sent. Every drop is counted
twice: as a Kafka record not written (``kafka_publish_dropped_total{topic="results"}``) and as
a result sink's drop (``sink_dropped_total{sink="results"}``, the series every result sink's
drops are in and ``OtelEvalResultsDropped`` reads), its reason there from
``outputs.sender.DROP_REASONS`` (``record_too_large`` is ``too_large``). Their lines are one
per ``SEND_LOG_INTERVAL_S`` at most, the next saying how many it left out (a broker away
refuses every record).
A re-evaluated trace is published again with the same key, so compacted topics keep the last;
so is a judged one, once its judgement (or the judge's skip) is stored (``publish``, from the
judge stage): the record then holds the ``judge`` the results API returns, as the last
published for its key; and so is one whose verdict a known outcome re-judged
(``publish_stored``, from ``POST /v1/feedback``): the stored object, with that verdict.
The judge's record is held as the engine's: its journal entry (``evaluate.judge.journal``)
stays until the record is delivered or dropped for good, and a start after a crash sends the
stored object again (at least once).
The queue holds in memory what no topic has yet: each exported trace is ``Held``
(``base.component.DeliveringSink``, as the evaluation events are) until its record is
delivered or dropped for a counted reason (never for a stop: ``shutdown``), so its spool rows
and Kafka offsets stay until then; a stop or a crash before then replays it, and the replay,
``already_evaluated``, hands over the stored object again (at least once).
A record of an older evaluation of a trace (a lower revision, or the same one evaluated
earlier) handed over after a newer one's is not sent: the threads that hand records over race
(the engine's sinks, the judge's writer, feedback), and the last record of a key stays the
newest evaluation.

Within one process that holds; a fleet's processes publish a key each on its own (a worker's
engine and judge, another worker's replay of the run after a rebalance, a front end's or
another worker's ``POST /v1/feedback``), so the topic's order of a key's records is the order
their publishers happened to send them. Each record therefore carries its place among them,
in headers (decimal ASCII): ``otel_eval.revision`` and ``otel_eval.evaluated_at_ns`` (the
evaluation it is of: ``store.stamp``), and ``otel_eval.row_version`` (the writes made to that
evaluation's row when it was read: 0 as the engine stored it, one more per judge or feedback
write; migration 20). A consumer keeps, per key, the record with the highest (revision,
evaluated_at_ns, row_version), compared as integers, the later of equals: the newest the
store held (docs/guide.md). A replay's record (``already_evaluated``) says row_version 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from otel_eval.base.component import Held, OnLoop, settle
from otel_eval.base.kafka.client import client_kwargs
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import RECORD_TOO_LARGE, KafkaMetrics, KafkaStats
from otel_eval.base.loglimit import LogLimiter, limited_line
from otel_eval.base.model import Trace
from otel_eval.base.results import Evaluation
from otel_eval.outputs.deps import Deps

if TYPE_CHECKING:
    from aiokafka import AIOKafkaProducer

log = logging.getLogger(__name__)

# A publish drop reason as a result sink's (``outputs.sender.DROP_REASONS``); the others are
# the same word in both.
_SINK_REASON = {RECORD_TOO_LARGE: "too_large"}

# Seconds between two lines of records not published (the rest counted in the next).
SEND_LOG_INTERVAL_S = 10.0


class ResultsPublisher:
    """A ``pipeline.Sink``. ``await start()`` on the service loop, ``await shutdown(s)``."""

    name = "results"  # outputs.sender.SINK_NAMES
    delivers = True  # base.component.DeliveringSink: held in the spool until delivered

    def __init__(self, config: KafkaConfig, metrics: KafkaMetrics | None = None,
                 sink_dropped: Callable[[str, str, int], None] | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``clock``: the time of the limit on the failed publishes' lines."""
        self.config = config
        self._failure_log = LogLimiter(SEND_LOG_INTERVAL_S, clock)
        self.metrics: KafkaMetrics = metrics if metrics is not None else KafkaStats()
        # (sink, reason, items): ``SinkMetrics.dropped``, otel_eval_sink_dropped_total
        self._sink_dropped = sink_dropped
        # (trace id, JSON, the trace's ``Held``: settled once delivered or dropped for good,
        # the record's headers: its place among its key's, ``_headers``)
        self._queue: deque[tuple[str, bytes, Held | None, Headers]] = deque()
        # (trace id, revision, evaluated_at_ns) of the evaluations published judged, the
        # newest ``results_queue_size``: their un-judged record, handed over after (an
        # engine thread slower than the judge's skip), is not queued behind them
        self._judged: OrderedDict[tuple[str, int, int], None] = OrderedDict()
        # trace id -> the newest (revision, evaluated_at_ns) queued for it, the newest
        # ``results_queue_size`` traces: an older evaluation's record handed over after it
        # (a judgement of the revision a re-open superseded meanwhile) is not sent behind it
        self._newest: OrderedDict[str, tuple[int, int]] = OrderedDict()
        # delivery futures of records the producer holds, not yet counted (``_count_sent``)
        self._sent: list[tuple[asyncio.Future[Any], Held | None]] = []
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._producer: AIOKafkaProducer | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False  # set by shutdown: a record handed over after it is a drop
        # held by a writer from reading the stored row back to handing it over (``ordered``)
        self._order = threading.Lock()

    async def start(self) -> None:
        from aiokafka import AIOKafkaProducer  # loaded when a results topic is on, not by serve

        self._loop = asyncio.get_running_loop()
        cfg = self.config  # the same security, acks, compression and size as --kafka-publish
        producer = AIOKafkaProducer(
            **client_kwargs(cfg), acks="all" if cfg.acks == "all" else 1,
            compression_type=None if cfg.compression == "none" else cfg.compression,
            max_request_size=cfg.max_request_bytes)
        await producer.start()
        self._producer = producer
        self._task = asyncio.create_task(self._run(), name="kafka-results")

    @property
    def healthy(self) -> bool:
        """Its sending task alive (base.component.Live): False once it died before a stop
        (past its boundaries), as a dead sender's sink is (/healthz, /readyz)."""
        task = self._task
        return task is None or not task.done() or self._stopped

    def items(self, trace: Trace, evaluation: Evaluation | None) -> int:
        return 0 if evaluation is None else 1  # one record per evaluation

    def export(self, trace: Trace, evaluation: Evaluation, held: Held | None = None) -> None:
        """Any thread. Serialises now (the evaluation may change later), sends later;
        ``held`` is taken until the record is delivered or dropped for good."""
        self._hand_over(evaluation, judged=False, held=held)

    def publish(self, evaluation: Evaluation, held: Held | None = None) -> None:
        """The evaluation again, with its judge: the judge stage's, once a judgement (or a
        skip) is stored (``outputs.deps.JudgedResults``). The last record of its key, even
        when the engine's ``export`` of it comes after (that one is then not sent).
        ``held`` (the judge's journal entry) is taken until the record is delivered or
        dropped for good, as ``export``'s."""
        self._hand_over(evaluation, judged=True, held=held)

    def publish_stored(self, body: dict[str, Any], evaluated_at_ns: int, row_version: int = 0,
                       held: Held | None = None) -> None:
        """Any thread. The stored v1 object again, as the results API returns it now: an
        outcome's (``POST /v1/feedback``, the web view's form), once the verdict it re-judged
        is stored (``evaluated_at_ns``, ``row_version``: the row's, ``get_versioned``), or
        the judge's. The last record of its key, as ``publish``'s; ``held`` as
        ``publish``'s."""
        trace_id, revision = str(body.get("trace_id")), body.get("revision")
        key = (trace_id, revision if type(revision) is int else 0, evaluated_at_ns)
        self._send(trace_id, body, key, judged=True, held=held, row_version=row_version)

    @contextlib.contextmanager
    def ordered(self) -> Iterator[None]:
        """Any thread: held around reading a stored row back and handing it over
        (``publish_stored``), so that of two writers of one row (the judge's writer, an
        outcome's request) the one that reads second hands over second: the last record of
        its key holds both writes. Without it, the judge could read the row before an outcome
        re-judged its verdict and hand it over after the outcome's record."""
        with self._order:
            yield

    def _hand_over(self, evaluation: Evaluation, judged: bool,
                   held: Held | None = None) -> None:
        key = (evaluation.trace_id, evaluation.trajectory.revision, evaluation.evaluated_at_ns)
        self._send(evaluation.trace_id, evaluation.to_json(), key, judged, held)

    def _send(self, trace_id: str, body: dict[str, Any], key: tuple[str, int, int],
              judged: bool, held: Held | None = None, row_version: int = 0) -> None:
        payload = json.dumps(body, separators=(",", ":"), default=str).encode()
        headers = _headers(key[1], key[2], row_version)
        loop = self._loop
        if held is not None:
            held.take()  # settled by ``_enqueue`` or once its record's fate is known
        try:
            if loop is None:
                raise RuntimeError("not started")
            loop.call_soon_threadsafe(self._enqueue, trace_id, payload, key, judged, held,
                                      headers)
        except RuntimeError:  # not started, or closed (stopping): one check, no window
            self._dropped("not_started", 1)  # held stays: replayed after the restart

    def _dropped(self, reason: str, n: int) -> None:
        """``n`` records not written: counted as Kafka's and as this result sink's."""
        self.metrics.publish_dropped("results", reason, n)
        if self._sink_dropped is not None:
            self._sink_dropped(self.name, _SINK_REASON.get(reason, reason), n)

    def pass_on(self, trace: Trace, held: Held | None = None) -> None:
        """No evaluation, no result to publish."""

    def _enqueue(self, trace_id: str, payload: bytes, key: tuple[str, int, int] | None = None,
                 judged: bool = False, held: Held | None = None,
                 headers: Headers = ()) -> None:
        if key is not None and self._older(key):
            _settle(held)
            return  # a newer evaluation of its trace is queued or sent: it stays the last
        if key is not None and judged:
            self._judged[key] = None
            while len(self._judged) > self.config.results_queue_size:
                self._judged.popitem(last=False)
        elif key is not None and key in self._judged:
            _settle(held)
            return  # its judged record, which holds all of it, is queued or sent already
        if self._stopped:  # a judgement whose write landed past the stop's deadline
            self._dropped("shutdown", 1)  # held stays: replayed after the restart
            return
        if len(self._queue) >= self.config.results_queue_size:
            _settle(self._queue.popleft()[2])
            self._dropped("queue_full", 1)
        self._queue.append((trace_id, payload, held, headers))
        self._wake.set()

    def _older(self, key: tuple[str, int, int]) -> bool:
        """Whether ``key``'s evaluation is older than one already handed over for its
        trace (a lower revision, or the same revision evaluated earlier); else it is noted
        as its trace's newest."""
        trace_id, mark = key[0], key[1:]
        newest = self._newest.get(trace_id)
        if newest is not None and mark < newest:
            return True
        self._newest[trace_id] = mark
        self._newest.move_to_end(trace_id)
        while len(self._newest) > self.config.results_queue_size:
            self._newest.popitem(last=False)
        return False

    async def _run(self) -> None:
        producer = self._producer
        assert producer is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._send_queued(producer)

    async def _send_queued(self, producer: AIOKafkaProducer) -> None:
        """Hand the queued records to the producer, then count each once its delivery is
        known. A record leaves the queue only once the producer holds it, and its delivery
        is kept until counted: cancelled anywhere (shutdown), every record is still queued
        or held, and ``shutdown`` counts it once (published, send_failed or shutdown)."""
        from aiokafka.errors import KafkaError, MessageSizeTooLargeError

        while self._queue:
            trace_id, payload, held, headers = self._queue[0]
            try:
                fut = await producer.send(self.config.results_topic, payload,
                                          key=trace_id.encode(), headers=list(headers))
            except KafkaError as e:  # refused before it was sent: this record alone
                self._queue.popleft()
                too_large = isinstance(e, MessageSizeTooLargeError)  # it can never fit
                limited_line(self._failure_log, log, "kafka results: trace %s not published "
                             "(%s)", trace_id, type(e).__name__, counted="failed publishes")
                self._dropped(RECORD_TOO_LARGE if too_large else "send_failed", 1)
                _settle(held)
                continue
            self._queue.popleft()
            self._sent.append((fut, held))
        if self._sent:  # cancelling the wait leaves the deliveries alone
            await asyncio.wait([f for f, _ in self._sent])
            self._count_sent()

    def _count_sent(self) -> None:
        """Count the held records whose delivery is known; those still unknown stay held,
        and at shutdown (once the producer stopped) are dropped, reason shutdown."""
        known = [(f, h) for f, h in self._sent if f.done()]
        self._sent = [(f, h) for f, h in self._sent if not f.done()]
        failed = sum(1 for f, _ in known if f.cancelled() or f.exception() is not None)
        if failed:
            limited_line(self._failure_log, log, "kafka results: %d record(s) failed to "
                         "publish", failed, counted="failed publishes")
            self._dropped("send_failed", failed)
        if len(known) - failed:
            self.metrics.published("results", len(known) - failed)
        settle(h for _, h in known if h is not None)

    async def shutdown(self, deadline_s: float = 10.0) -> None:
        """Send what is queued (up to the deadline), then stop the producer (it delivers what
        it holds first). Every record is counted once: published, send_failed, or dropped
        with reason shutdown (still queued, or its delivery unknown when the producer
        stopped)."""
        from aiokafka.errors import KafkaError

        end = time.monotonic() + deadline_s
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._producer is not None:
            with contextlib.suppress(TimeoutError, KafkaError):
                await asyncio.wait_for(self._send_queued(self._producer),
                                       max(0.0, end - time.monotonic()))
            if self._queue:
                self._dropped("shutdown", len(self._queue))
                self._queue.clear()
            await self._producer.stop()
            self._producer = None
            self._count_sent()
            if self._sent:
                self._dropped("shutdown", len(self._sent))
                self._sent = []


Headers = tuple[tuple[str, bytes], ...]


def _headers(revision: int, evaluated_at_ns: int, row_version: int) -> Headers:
    """A record's place among its key's (the module's docstring): integers, as decimal
    ASCII."""
    return (("otel_eval.revision", str(revision).encode()),
            ("otel_eval.evaluated_at_ns", str(evaluated_at_ns).encode()),
            ("otel_eval.row_version", str(row_version).encode()))


def _settle(held: Held | None) -> None:
    if held is not None:
        settle((held,))


def build(config: KafkaConfig, deps: Deps, *, front_end: bool = False) -> OnLoop | None:
    """The results publisher on the service's loop, for a Kafka worker with
    ``kafka.results_topic`` set; with ``front_end``, for a publishing front end's (which
    evaluates nothing: it publishes only what ``POST /v1/feedback`` re-judged in the fleet's
    store, ``publish_stored``)."""
    if not (config.enabled and config.results_topic and config.publish == front_end) \
            or deps.loop is None:
        return None
    return OnLoop(ResultsPublisher(config, deps.metrics.kafka, deps.metrics.sinks.dropped),
                  deps.loop)
