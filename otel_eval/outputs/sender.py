"""Delivery for the result sinks: a bounded queue, one worker thread, OTLP/gRPC with retries.

Promises:
- ``submit`` never blocks the pipeline: when the queue (counted in items: spans or log
  records) is full, the oldest queued request is dropped, reason ``queue_full``;
- every item that is not delivered is counted once through ``metrics.sinks.dropped`` with a
  reason from ``DROP_REASONS``;
- retryable failures (UNAVAILABLE, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, ABORTED) are retried
  with exponential backoff and jitter until ``max_retry_s``; others are dropped at once;
- requests submitted before ``start()`` wait in the queue;
- ``shutdown(deadline_s)`` stops accepting, flushes with the time left, then drops the rest.
"""

from __future__ import annotations

import collections
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import grpc

from otel_eval.outputs.config import ExportConfig
from otel_eval.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

DROP_REASONS = ("queue_full", "too_large", "shutdown", "retries_exhausted", "rejected",
                "downstream_rejected", "internal_error")
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED,
                       grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED})


class _Request(Protocol):
    def MergeFrom(self, other: Any) -> None: ...


R = TypeVar("R", bound=_Request)

# (channel) -> unary call(request, timeout=...) -> response
CallFactory = Callable[[grpc.Channel], Callable[..., Any]]


def _not_started(*_: Any, **__: Any) -> Any:
    raise RuntimeError("sender not started")


class OtlpSender(Generic[R]):
    """Sends OTLP export requests of one kind (traces or logs) to ``endpoint``."""

    def __init__(self, sink: str, endpoint: str, call_factory: CallFactory,
                 new_request: Callable[[], R], rejected_in: Callable[[Any], int],
                 on_sent: Callable[[int], None], metrics: Metrics, config: ExportConfig,
                 ) -> None:
        self.sink = sink
        self.endpoint = endpoint
        self._call_factory = call_factory
        self._new_request = new_request
        self._rejected_in = rejected_in  # partial_success.rejected_* of a response
        self._on_sent = on_sent
        self._metrics = metrics
        self._cfg = config
        self._queue: collections.deque[tuple[R, int]] = collections.deque()
        self._queued_items = 0
        self._cond = threading.Condition()
        self._closing = False
        self._deadline = float("inf")  # monotonic; set by shutdown
        self._thread: threading.Thread | None = None
        self._channel: grpc.Channel | None = None
        self._call: Callable[..., Any] = _not_started

    def start(self) -> None:
        if self.endpoint.startswith(("http://", "https://")):
            raise ValueError(f"{self.sink}: expected HOST:PORT, got {self.endpoint!r}")
        self._channel = (grpc.insecure_channel(self.endpoint) if self._cfg.insecure else
                         grpc.secure_channel(self.endpoint, grpc.ssl_channel_credentials()))
        self._call = self._call_factory(self._channel)
        self._thread = threading.Thread(target=self._run, name=f"otel-eval-{self.sink}",
                                        daemon=True)
        self._thread.start()

    def submit(self, request: R, n_items: int) -> bool:
        """Queue one request of ``n_items`` items; False (and counted) when dropped."""
        if n_items > self._cfg.max_queue_items:
            self._drop("too_large", n_items)
            return False
        evicted = 0
        with self._cond:
            if self._closing:  # before start() is fine: start() drains what is queued
                accepted = False
            else:
                while self._queue and self._queued_items + n_items > self._cfg.max_queue_items:
                    _, n_old = self._queue.popleft()
                    self._queued_items -= n_old
                    evicted += n_old
                self._queue.append((request, n_items))
                self._queued_items += n_items
                self._cond.notify()
                accepted = True
        if evicted:
            self._drop("queue_full", evicted)
        if not accepted:
            self._drop("shutdown", n_items)
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
            self._thread.join(max(0.0, deadline_s) + 1.0)  # the worker honours the deadline
            if self._thread.is_alive():
                log.error("%s: worker did not stop within the deadline", self.sink)
        else:  # never started: nothing will send what is queued
            with self._cond:
                n, self._queued_items = self._queued_items, 0
                self._queue.clear()
            if n:
                self._drop("shutdown", n)
        if self._channel is not None:
            self._channel.close()

    # --- worker ---------------------------------------------------------------------------

    def _next_batch(self) -> tuple[R, int] | None:
        with self._cond:
            while not self._queue and not self._closing:
                self._cond.wait()
            if not self._queue:
                return None
            batch, n = self._new_request(), 0
            while self._queue and (n == 0 or n + self._queue[0][1] <= self._cfg.max_batch_items):
                req, k = self._queue.popleft()
                self._queued_items -= k
                batch.MergeFrom(req)  # concatenates resource_spans / resource_logs
                n += k
            return batch, n

    def _run(self) -> None:
        while True:
            item = self._next_batch()
            if item is None:
                return
            batch, n = item
            if time.monotonic() >= self._deadline:
                self._drop("shutdown", n)
                continue
            try:
                self._send(batch, n)
            except Exception:  # stage boundary: a bug here must not kill the worker silently
                log.exception("%s: unexpected error sending %d item(s)", self.sink, n)
                self._drop("internal_error", n)

    def _send(self, batch: R, n: int) -> None:
        started = time.monotonic()
        backoff = self._cfg.initial_backoff_s
        while True:
            timeout = min(self._cfg.timeout_s, self._deadline - time.monotonic())
            if timeout <= 0:
                self._drop("shutdown", n)
                return
            try:
                response = self._call(batch, timeout=timeout)
            except grpc.RpcError as e:
                code = e.code() if isinstance(e, grpc.Call) else None
                if code not in RETRYABLE:
                    log.warning("%s: %s rejected %d item(s): %s", self.sink, self.endpoint, n,
                                code)
                    self._drop("rejected", n)
                    return
                delay = random.uniform(0.5, 1.0) * backoff  # jitter spreads replicas' retries
                if time.monotonic() + delay - started > self._cfg.max_retry_s:
                    self._drop("retries_exhausted", n)
                    return
                if not self._wait(delay):
                    self._drop("shutdown", n)
                    return
                backoff = min(backoff * 2, self._cfg.max_backoff_s)
                continue
            rejected = min(n, max(0, self._rejected_in(response)))
            if rejected:
                self._drop("downstream_rejected", rejected)
            self._on_sent(n - rejected)
            return

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
