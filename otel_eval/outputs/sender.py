"""Delivery for the result sinks: a bounded queue, one worker thread, OTLP/gRPC with retries.

Promises:
- ``submit`` never blocks the pipeline: when the queue is full (``max_queue_items`` spans or
  log records, or ``max_queue_bytes`` serialized), the oldest queued request is dropped,
  reason ``queue_full``; a request over either bound alone is dropped, ``too_large``;
- each export request stays within ``max_batch_items`` and ``max_batch_bytes`` (serialized
  size): queued requests are merged while both hold, a request too large alone is split by
  resource, scope and item with every field kept (``outputs.batcher``); one item larger than
  the byte bound is sent alone;
- every item that is not delivered is counted once through ``metrics.sinks.dropped`` with a
  reason from ``DROP_REASONS``;
- a request's ``held`` traces (``base.component.Held``) are settled once each of its items is
  delivered or dropped for good; never when one is dropped for a stop (``shutdown``): those
  traces stay in the spool and go out again after the restart;
- retryable failures (the OTLP specification's: CANCELLED, DEADLINE_EXCEEDED, ABORTED,
  OUT_OF_RANGE, UNAVAILABLE, DATA_LOSS) are retried with the shared back-off
  (``base.backoff``: capped exponential, jitter) until ``max_retry_s``, after the delay of
  the ``google.rpc.RetryInfo`` the endpoint sent, if any; RESOURCE_EXHAUSTED
  only when the endpoint sent ``RetryInfo``, after the delay it gives (the OTLP
  specification; the collector's exporter does the same): without it, the endpoint said the
  batch will not fit and retrying only loads it more. Others are dropped at once;
- calls carry the configured headers (gRPC metadata), compression and TLS (the files checked
  at ``start()``: a bad one stops serve with one line naming it; a file changed on disk is
  read again before the next batch, as the receivers do, so a rotated client certificate or
  CA is used without a restart; a broken new file is logged and the current one kept);
- requests submitted before ``start()`` wait in the queue;
- ``shutdown(deadline_s)`` stops accepting, flushes with the time left, then drops the rest
  (``shutdown``: held, as above), a call still in flight at the deadline too (the channel is
  closed under it: its failure is the stop's, not the endpoint's).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import grpc
from google.rpc import error_details_pb2, status_pb2

from otel_eval.base.backoff import Backoff
from otel_eval.base.component import Held, settle
from otel_eval.base.configcheck import StartupError
from otel_eval.base.tlsfiles import grpc_channel_credentials, stamp
from otel_eval.outputs.batcher import Layout, Queued, Request, batches, take
from otel_eval.outputs.config import ExportConfig
from otel_eval.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

DROP_REASONS = ("queue_full", "too_large", "shutdown", "retries_exhausted", "rejected",
                "downstream_rejected", "internal_error",
                # the Kafka results sink's (outputs.kafka): undelivered, or before its start
                "send_failed", "not_started")
INTERNAL_ERROR = "internal_error"  # a bug of ours (a sink that raised, a batch unbuilt)
# The ``sink`` label values of otel_eval_sink_dropped_total: each sink's ``name``.
SINK_NAMES = ("judge", "events", "forward", "results")
RETRYABLE = frozenset({grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED,
                       grpc.StatusCode.ABORTED, grpc.StatusCode.OUT_OF_RANGE,
                       grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DATA_LOSS})
# Time the worker gets to count what the stop cut (its call cancelled at the deadline), s.
_CUT_S = 5.0
_COMPRESSION = {"none": grpc.Compression.NoCompression, "gzip": grpc.Compression.Gzip}


R = TypeVar("R", bound=Request)

# (channel) -> unary call(request, timeout=...) -> response
CallFactory = Callable[[grpc.Channel], Callable[..., Any]]


def _not_started(*_: Any, **__: Any) -> Any:
    raise RuntimeError("sender not started")


def retry_info_delay_s(error: grpc.RpcError) -> float | None:
    """The ``google.rpc.RetryInfo`` delay of a failed call, seconds, or None when it has
    none: from the status details (``grpc-status-details-bin``, as Go servers and ours send
    it) or a ``google.rpc.retryinfo-bin`` trailer (what the Python SDK reads)."""
    trailers = error.trailing_metadata() if isinstance(error, grpc.Call) else None
    info = error_details_pb2.RetryInfo()
    for key, value in trailers or ():
        try:
            if key == "grpc-status-details-bin":
                for detail in status_pb2.Status.FromString(value).details:
                    if detail.Unpack(info):
                        return info.retry_delay.ToTimedelta().total_seconds()
            elif key == "google.rpc.retryinfo-bin":
                info.ParseFromString(value)
                return info.retry_delay.ToTimedelta().total_seconds()
        except Exception:  # a garbled detail is no hint; protobuf raises several types
            log.debug("unreadable %s trailer", key)
    return None


class OtlpSender(Generic[R]):
    """Sends OTLP export requests of one kind (traces or logs, ``layout``) to ``endpoint``."""

    def __init__(self, sink: str, endpoint: str, call_factory: CallFactory,
                 new_request: Callable[[], R], layout: Layout, rejected_in: Callable[[Any], int],
                 on_sent: Callable[[int], None], metrics: Metrics, config: ExportConfig,
                 ) -> None:
        self.sink = sink
        self.endpoint = endpoint
        self._call_factory = call_factory
        self._new_request = new_request
        self._layout = layout
        self._rejected_in = rejected_in  # partial_success.rejected_* of a response
        self._on_sent = on_sent
        self._metrics = metrics
        self._cfg = config
        self._backoff = Backoff(config.initial_backoff_s, config.max_backoff_s, jitter=0.5)
        self._metadata = config.metadata()
        self._tls_paths = [] if config.insecure else [p for _, p in config.tls.files()]
        self._tls_stamp: tuple[tuple[int, int, int], ...] | None = None
        self._compression = _COMPRESSION[config.compression]
        self._queue: collections.deque[Queued[R]] = collections.deque()
        self._queued_items = 0
        self._queued_bytes = 0
        self._cond = threading.Condition()
        self._closing = False
        self._deadline = float("inf")  # monotonic; set by shutdown
        self._thread: threading.Thread | None = None
        self._channel: grpc.Channel | None = None
        self._call: Callable[..., Any] = _not_started

    def start(self) -> None:
        if self.endpoint.startswith(("http://", "https://")):
            raise ValueError(f"{self.sink}: expected HOST:PORT, got {self.endpoint!r}")
        self._channel = self._open_channel()  # checks the TLS files: StartupError names one
        self._tls_stamp = self._stamp_tls()
        self._call = self._call_factory(self._channel)
        self._thread = threading.Thread(target=self._run, name=f"otel-eval-{self.sink}",
                                        daemon=True)
        self._thread.start()

    def _open_channel(self) -> grpc.Channel:
        cfg = self._cfg
        if cfg.insecure:
            return grpc.insecure_channel(self.endpoint)
        options = ([("grpc.ssl_target_name_override", cfg.tls.server_name_override)]
                   if cfg.tls.server_name_override else [])
        return grpc.secure_channel(self.endpoint,
                                   grpc_channel_credentials(cfg.tls, f"export ({self.sink})"),
                                   options=options)

    def _stamp_tls(self) -> tuple[tuple[int, int, int], ...] | None:
        try:
            return stamp(self._tls_paths)
        except OSError as e:  # removed mid-rotation: the next batch looks again
            log.error("%s: TLS file unreadable (%s); keeping the current one", self.sink,
                      e.strerror)
            return None

    def _follow_tls_files(self) -> None:
        """Worker thread: a new channel when the TLS files changed on disk since read."""
        if not self._tls_paths:
            return
        now = self._stamp_tls()
        if now is None or now == self._tls_stamp:
            return
        self._tls_stamp = now
        try:
            channel = self._open_channel()
        except StartupError as e:
            log.error("%s: TLS reload failed (%s); keeping the current files", self.sink, e)
            return
        old, self._channel = self._channel, channel
        self._call = self._call_factory(channel)
        if old is not None:
            old.close()
        log.info("%s: TLS files reloaded", self.sink)

    def submit(self, request: R, n_items: int, held: tuple[Held, ...] = ()) -> bool:
        """Queue one request of ``n_items`` items; False (and counted) when dropped.
        ``held``: taken here, settled with the request (module promises)."""
        cfg = self._cfg
        for h in held:
            h.take()
        size = request.ByteSize()  # serializes: outside the lock
        if n_items > cfg.max_queue_items or size > cfg.max_queue_bytes:
            self._drop("too_large", n_items)
            settle(held)
            return False
        evicted: list[Queued[R]] = []
        with self._cond:
            if self._closing:  # before start() is fine: start() drains what is queued
                accepted = False
            else:
                while self._queue and (self._queued_items + n_items > cfg.max_queue_items
                                       or self._queued_bytes + size > cfg.max_queue_bytes):
                    old = self._queue.popleft()
                    self._queued_items -= old.items
                    self._queued_bytes -= old.size
                    evicted.append(old)
                self._queue.append(Queued(request, n_items, size, held))
                self._queued_items += n_items
                self._queued_bytes += size
                self._cond.notify()
                accepted = True
        if evicted:
            self._drop("queue_full", sum(q.items for q in evicted))
            settle(h for q in evicted for h in q.held)
        if not accepted:
            self._drop("shutdown", n_items)  # held stays: replayed after the restart
        return accepted

    @property
    def queued_items(self) -> int:
        with self._cond:
            return self._queued_items

    def shutdown(self, deadline_s: float) -> None:
        """Stop accepting; deliver what is queued within ``deadline_s``; drop the rest."""
        with self._cond:
            self._closing = True
            self._deadline = time.monotonic() + max(0.0, deadline_s)
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline_s))  # the worker honours the deadline...
            channel = self._channel
            if self._thread.is_alive() and channel is not None:
                channel.close()  # ...but a call begun before it: cut now (counted shutdown)
                self._thread.join(_CUT_S)
            if self._thread.is_alive():
                log.error("%s: worker did not stop within the deadline", self.sink)
        else:  # never started: nothing will send what is queued
            with self._cond:
                n, self._queued_items, self._queued_bytes = self._queued_items, 0, 0
                self._queue.clear()
            if n:
                self._drop("shutdown", n)
        if self._channel is not None:
            self._channel.close()

    # --- worker ---------------------------------------------------------------------------

    def _next_batch(self) -> list[Queued[R]] | None:
        with self._cond:
            while not self._queue and not self._closing:
                self._cond.wait()
            if not self._queue:
                return None
            taken = take(self._queue, self._cfg.max_batch_items, self._cfg.max_batch_bytes)
            self._queued_items -= sum(q.items for q in taken)
            self._queued_bytes -= sum(q.size for q in taken)
            return taken

    @property
    def alive(self) -> bool:
        """False once the worker thread died before a stop (past its boundaries: a bug, or
        what ``except Exception`` does not catch): the sink's ``healthy`` (/healthz)."""
        thread = self._thread
        return thread is None or thread.is_alive() or self._closing

    def _run(self) -> None:
        try:
            self._work()
        except BaseException:  # a dead worker must be loud: health turns red (``alive``)
            log.critical("%s: worker died; nothing more is sent", self.sink, exc_info=True)

    def _work(self) -> None:
        while True:
            taken = self._next_batch()
            if taken is None:
                return
            try:  # merging and splitting copy messages: outside the lock
                requests = batches(taken, self._layout, self._cfg.max_batch_bytes,
                                   self._new_request)
            except Exception:  # stage boundary, as below
                log.exception("%s: unexpected error batching", self.sink)
                self._drop(INTERNAL_ERROR, sum(q.items for q in taken))
                requests = []
            # every piece sent, or dropped for good: the traces held are settled
            if all([self._deliver(batch, n) for batch, n in requests]):
                settle(h for q in taken for h in q.held)

    def _deliver(self, batch: R, n: int) -> bool:
        """Send one request; False when it was dropped for the stop (``shutdown``)."""
        if time.monotonic() >= self._deadline:
            self._drop("shutdown", n)
            return False
        try:
            self._follow_tls_files()
            return self._send(batch, n)
        except Exception:  # stage boundary: a bug here must not kill the worker silently
            log.exception("%s: unexpected error sending %d item(s)", self.sink, n)
            self._drop(INTERNAL_ERROR, n)
            return True

    def _send(self, batch: R, n: int) -> bool:
        give_up_at = time.monotonic() + self._cfg.max_retry_s
        attempt = 0
        while True:
            timeout = min(self._cfg.timeout_s, self._deadline - time.monotonic())
            if timeout <= 0:
                self._drop("shutdown", n)
                return False
            try:
                response = self._call(batch, timeout=timeout, metadata=self._metadata,
                                      compression=self._compression)
            except grpc.RpcError as e:
                if time.monotonic() >= self._deadline:  # the stop closed the channel under
                    self._drop("shutdown", n)          # the call: not the downstream's word
                    return False
                delay = self._retry_delay(e, attempt, n)
                if delay is None:
                    return True
                if not Backoff.within(time.monotonic(), delay, give_up_at):
                    self._drop("retries_exhausted", n)
                    return True
                if not self._wait(delay):
                    self._drop("shutdown", n)
                    return False
                attempt += 1
                continue
            rejected = min(n, max(0, self._rejected_in(response)))
            if rejected:
                self._drop("downstream_rejected", rejected)
            self._on_sent(n - rejected)
            return True

    def _retry_delay(self, e: grpc.RpcError, attempt: int, n: int) -> float | None:
        """Seconds before the next attempt after ``e``, or None (then counted as rejected):
        RESOURCE_EXHAUSTED with RetryInfo after its delay, the other retryable codes after
        their RetryInfo delay too when they carry one (OTLP throttling answers UNAVAILABLE
        or RESOURCE_EXHAUSTED with it), else on the back-off schedule."""
        code = e.code() if isinstance(e, grpc.Call) else None
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED or code in RETRYABLE:
            hint = retry_info_delay_s(e)  # the server's delay wins over the schedule
            if hint is not None or code in RETRYABLE:
                return self._backoff.delay_s(attempt, hint_s=hint)
        log.warning("%s: %s rejected %d item(s): %s", self.sink, self.endpoint, n, code)
        self._drop("rejected", n)
        return None

    def _wait(self, delay: float) -> bool:
        """Sleep ``delay`` unless that passes the shutdown deadline (then False at once).
        A shutdown that arrives mid-wait shortens it to the deadline."""
        until = time.monotonic() + delay
        with self._cond:
            while True:
                now = time.monotonic()
                if until > self._deadline:
                    return False
                if now >= until:
                    return True
                self._cond.wait(until - now)

    def _drop(self, reason: str, n: int) -> None:
        self._metrics.sinks.dropped(self.sink, reason, n)


class SenderSink:
    """What a sink over an ``OtlpSender`` (events, pass-through) does the same way: it
    delivers what it is given (``base.component.DeliveringSink``), and its lifecycle and
    health are its sender's (``start``, ``shutdown``, ``healthy``: ``base.component.Live``).
    A subclass sets ``name`` and ``_sender`` in its constructor."""

    delivers = True  # base.component.DeliveringSink: held in the spool until delivered
    _sender: OtlpSender[Any]

    def start(self) -> None:
        self._sender.start()

    def shutdown(self, deadline_s: float) -> None:
        self._sender.shutdown(deadline_s)

    @property
    def healthy(self) -> bool:
        """Its sender's thread alive (base.component.Live)."""
        return self._sender.alive
