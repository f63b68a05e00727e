"""OTLP/gRPC receiver: ``opentelemetry.proto.collector.trace.v1.TraceService/Export`` and
``opentelemetry.proto.collector.logs.v1.LogsService/Export`` (GenAI events sent as logs);
``MetricsService/Export`` is refused UNIMPLEMENTED, counted and naming the fix
(``Ingest.unsupported_signal``).

A synchronous ``grpc.server`` on a thread pool: decoding holds the GIL either way, sync and
``grpc.aio`` are even within noise on decode-heavy load (bench/grpc_server.py, figures in
bench/README.md), and a sync handler can simply block on engine admission or a Kafka ack.
The request arrives as raw bytes (no generated deserializer) so that a malformed body becomes
INVALID_ARGUMENT with a counted reason instead of grpc's opaque INTERNAL, and so spans with
invalid UTF-8 can be salvaged one by one.

Security (``receive.security``): TLS server credentials that follow the certificate files,
and an interceptor refusing calls without a known bearer token (UNAUTHENTICATED) for every
method registered on this server, on the call's metadata, before its message is read.

Floods: a call's message must arrive within ``grpc_receive_timeout_s`` (else it is cancelled
and counted, ``requests_refused{grpc,receive_timeout}``; a message past ``max_message_bytes``
is refused by grpc itself, RESOURCE_EXHAUSTED without RetryInfo, often before any handler
runs, so counted by no metric: docs/transport-security.md), at most
``grpc_max_concurrent_rpcs`` calls are taken at once (more are refused RESOURCE_EXHAUSTED by
grpc itself, without RetryInfo, and nothing of ours is told: grpcio has no public hook for
it), one sender (its address, and with tokens its token's name) has
``grpc_max_waiting_rpcs_per_sender`` calls waiting for their message, and more only while
its calls are young: those get ``SHARE_GRACE_S`` for their message, and once one of its
calls has waited that long more are refused at once (retryable,
``throttled{grpc,sender_share}``, ``grpc_logs`` for a logs call: each waiting call holds a
worker thread, and one sender with a valid token held all of them, 0 of 36
exports of the others got through; refusing by count alone refused a local collector's
honest calls, which wait only for this process to read them), and the port is bound without
SO_REUSEPORT, so a second serve on it fails to start instead of sharing it.

Throttling follows the OTLP spec: RESOURCE_EXHAUSTED with a ``google.rpc.RetryInfo`` detail in
``grpc-status-details-bin`` (and, for the Python SDK exporter, in ``google.rpc.retryinfo-bin``),
which OTLP exporters honour before retrying.

Not seen here: an HTTP/1.1 request (an http/protobuf exporter sent to this port). C-core
answers it with its HTTP/2 SETTINGS and closes ("Connect string mismatch", in its own trace
log only); grpcio exposes nothing below the RPC (no transport hook, no way to hand it an
accepted socket after a look at its first bytes), so counting it would mean relaying every
gRPC byte through Python. The reverse, a gRPC exporter at the HTTP port, is counted there
(``httpserver``, reason ``http2_client``). tests/receiver/test_wrong_port.py pins both.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from functools import partial
from typing import Any, Literal, NoReturn, cast

import grpc
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from otel_eval.base.configcheck import StartupError, parse_endpoint
from otel_eval.receive.config import ReceiverConfig
from otel_eval.receive.ingest import Ingest, IngestResult
from otel_eval.receive.security import BearerAuth, TlsFiles, metadata_authorization
from otel_eval.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
LOGS_SERVICE = "opentelemetry.proto.collector.logs.v1.LogsService"
METRICS_SERVICE = "opentelemetry.proto.collector.metrics.v1.MetricsService"


class _AuthInterceptor(grpc.ServerInterceptor):
    """Refuses every method (traces, logs, ...) without a known bearer token, on its metadata
    alone: the refusal is a request-streaming handler that never reads, so a call that sends
    headers and then no message is answered at once instead of holding a worker thread until
    its message comes. Auth off: passes everything through."""

    def __init__(self, auth: BearerAuth, metrics: Metrics) -> None:
        self.auth = auth
        self.metrics = metrics

        def refuse(_requests: object, context: grpc.ServicerContext) -> None:
            self.metrics.ingest.request_refused("grpc", "unauthenticated")
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or unknown bearer token")

        self._refusal = grpc.stream_unary_rpc_method_handler(refuse)  # never reads a message

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        if not self.auth.enabled or self.auth.identify(
                metadata_authorization(details.invocation_metadata)) is not None:
            return continuation(details)
        return self._refusal


# How long a sender's calls past its share may wait for their message, seconds. An exporter's
# message follows its headers at once: a call waits only for this process to read it, under
# load tens of milliseconds, and one local collector sends several at a time.
SHARE_GRACE_S = 1.0

Verdict = Literal["taken", "short", "refused"]


class _SenderShares:
    """Calls waiting for their message, per sender (thread-safe): ``share`` each, and more
    only while they are young. A call is ``taken`` (the full receive timeout) while the
    sender has fewer than ``share`` waiting; past that it is ``short`` (``grace_s`` for its
    message, then cancelled and counted as throttled) while every call of the sender waits
    for less than ``grace_s``, else ``refused`` at once. One honest sender (a sidecar's only
    one) with more calls in flight than its share is thus never refused for them, and a
    sender whose calls bring no message holds ``share`` worker threads, the others for at
    most ``grace_s`` each."""

    def __init__(self, share: int, grace_s: float = SHARE_GRACE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.share, self.grace_s, self._clock = share, grace_s, clock
        self._lock = threading.Lock()
        self._waiting: dict[str, list[float]] = {}  # sender -> start times of waiting calls

    def enter(self, sender: str) -> tuple[Verdict, float]:
        """The call's verdict and its start time (for ``leave``)."""
        now = self._clock()
        with self._lock:
            waiting = self._waiting.setdefault(sender, [])
            if len(waiting) < self.share:
                verdict: Verdict = "taken"
            elif now - min(waiting) < self.grace_s:
                verdict = "short"
            else:
                return "refused", now
            waiting.append(now)
            return verdict, now

    def leave(self, sender: str, started: float) -> None:
        with self._lock:
            waiting = self._waiting[sender]
            waiting.remove(started)
            if not waiting:
                del self._waiting[sender]


def peer_host(peer: str) -> str:
    """``ipv4:127.0.0.1:5431`` -> ``ipv4:127.0.0.1``; ``ipv6:[::1]:5431`` -> ``ipv6:[::1]``
    (a sender is its address, whatever connection it opens)."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return peer
    return f"{kind}:{rest.rpartition(':')[0] or rest}"


class _ReceiveDeadlines:
    """Cancels a call whose request message has not arrived ``timeout_s`` after it began:
    one thread for every call, a heap of deadlines (entries of finished calls are skipped
    when they come up), woken by a condition - no thread or timer per call."""

    def __init__(self, timeout_s: float, on_expire: Callable[[], None]) -> None:
        self.timeout_s, self.on_expire = timeout_s, on_expire
        self._heap: list[list[Any]] = []  # [deadline, seq, context, waiting, on_expire]
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="otlp-grpc-deadlines",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def receive(self, requests: Iterator[bytes], context: grpc.ServicerContext,
                timeout_s: float | None = None,
                on_expire: Callable[[], None] | None = None) -> bytes:
        """The call's one request message, or the call aborted (none came, or too late);
        ``timeout_s`` and ``on_expire``: this call's own, instead of the receiver's."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        entry = [time.monotonic() + timeout_s, next(self._seq), context, True,
                 on_expire or self.on_expire]
        with self._cond:
            heapq.heappush(self._heap, entry)
            self._cond.notify()
        try:
            body = next(requests, None)
        except grpc.RpcError:  # cancelled: the deadline passed (or the client gave up)
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                          f"no request message within {timeout_s:g} s")
        finally:
            entry[3] = False
        if body is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no request message")
        return cast(bytes, body)  # abort raised otherwise

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                while self._heap and not self._heap[0][3]:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                wait = self._heap[0][0] - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                entry = heapq.heappop(self._heap)
                # counted before the cancel, which the client sees: once a client has its
                # CANCELLED, the refusal is in the metric
                entry[4]()
                entry[2].cancel()  # wakes the handler blocked on the message

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()


def _refuse_taken(endpoint: str) -> None:
    """``StartupError`` when another socket listens on the endpoint's port. grpc finds that
    out too, but says it in a C-core log line of its own before failing."""
    host, port = parse_endpoint(endpoint)
    if not port:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return  # grpc says what is wrong with the name
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as grpc binds
            try:
                probe.bind(address)
            except OSError as e:
                raise StartupError(f"otlp-grpc: cannot listen on {endpoint}: "
                                   f"{e.strerror or e}") from None


class GrpcReceiver:
    def __init__(self, config: ReceiverConfig, ingest: Ingest) -> None:
        self.config = config
        self.ingest = ingest
        self._server: grpc.Server | None = None
        self._serving = False
        self._pool = futures.ThreadPoolExecutor(config.grpc_workers,
                                                thread_name_prefix="otlp-grpc")
        self.port = 0
        self.auth = BearerAuth(config.bearer_tokens)
        self.tls: TlsFiles | None = None
        self._deadlines = _ReceiveDeadlines(
            config.grpc_receive_timeout_s,
            lambda: ingest.metrics.ingest.request_refused("grpc", "receive_timeout"))
        self._shares = _SenderShares(config.grpc_max_waiting_rpcs_per_sender)

    def bind(self) -> None:
        """Listen on the endpoint (calls wait until ``start``); ``StartupError`` naming the
        endpoint when it is taken. Without SO_REUSEPORT: a second process on the same port is
        refused instead of sharing it (and splitting every exporter's traces in two)."""
        if self._server is not None:
            return
        cfg = self.config
        self._server = grpc.server(
            self._pool, interceptors=[_AuthInterceptor(self.auth, self.ingest.metrics)],
            options=[("grpc.max_receive_message_length", cfg.max_message_bytes),
                     ("grpc.max_send_message_length", 4 * 1024 * 1024),
                     ("grpc.so_reuseport", 0)],
            maximum_concurrent_rpcs=cfg.grpc_max_concurrent_rpcs)

        def export(fn: Callable[[bytes, grpc.ServicerContext], object],
                   throttle_label: str) -> grpc.RpcMethodHandler:
            # request-streaming on the server side (the wire is the same for a unary client):
            # the handler waits for the message itself, under the receive deadline
            return grpc.stream_unary_rpc_method_handler(
                lambda requests, context: fn(
                    self._receive(requests, context, throttle_label), context),
                request_deserializer=None, response_serializer=lambda r: r.SerializeToString())

        # the ``protocol`` of requests_throttled, as ``Ingest`` labels the engine's refusals
        self._server.add_generic_rpc_handlers((
            grpc.method_handlers_generic_handler(
                SERVICE, {"Export": export(self._export, "grpc")}),
            grpc.method_handlers_generic_handler(
                LOGS_SERVICE, {"Export": export(self._export_logs, "grpc_logs")}),
            grpc.method_handlers_generic_handler(METRICS_SERVICE, {
                "Export": grpc.stream_unary_rpc_method_handler(self._refuse_metrics)})))
        _refuse_taken(cfg.grpc_endpoint)
        try:
            if cfg.tls.enabled:
                self.tls = TlsFiles(cfg.tls, "otlp-grpc")
                self.port = self._server.add_secure_port(cfg.grpc_endpoint,
                                                         self.tls.grpc_credentials())
            else:
                self.port = self._server.add_insecure_port(cfg.grpc_endpoint)
        except RuntimeError:  # grpcio >= 1.60 raises where older ones returned 0
            self.port = 0
        if not self.port:
            raise StartupError(f"otlp-grpc: cannot listen on {cfg.grpc_endpoint}: address "
                               "in use or not available")

    def start(self) -> None:
        self.bind()
        assert self._server is not None
        self._deadlines.start()
        self._server.start()
        self._serving = True
        log.info("OTLP/gRPC receiver listening on %s (port %d)", self.config.grpc_endpoint,
                 self.port)

    def _receive(self, requests: Iterator[bytes], context: grpc.ServicerContext,
                 throttle_label: str = "grpc") -> bytes:
        """The call's message, waited for within the sender's share of waiting calls; a
        refusal counted as ``requests_throttled{throttle_label,sender_share}`` (``grpc``:
        traces, ``grpc_logs``: logs)."""
        # a sender is its address and, with tokens, its token's name (OTLP/HTTP's body share
        # has it so): one name is often given to every agent, and keyed by it alone one of
        # them holding calls got every other address with it refused
        sender = peer_host(context.peer())
        if self.auth.enabled:
            sender = f"{sender} token {self._sender(context)}"  # no address has a space
        verdict, started = self._shares.enter(sender)
        throttled = partial(self._throttle_share, throttle_label)
        if verdict == "refused":
            throttled()
            self._abort_retryable(context, "this sender already has calls waiting for their "
                                  f"message past {self._shares.grace_s:g} s")
        try:
            if verdict == "short":  # past the share: only a prompt message is read
                return self._deadlines.receive(requests, context, self._shares.grace_s,
                                               throttled)
            return self._deadlines.receive(requests, context)
        finally:
            self._shares.leave(sender, started)

    def _throttle_share(self, throttle_label: str) -> None:
        self.ingest.metrics.ingest.request_throttled(throttle_label, "sender_share")

    def _export(self, body: bytes, context: grpc.ServicerContext) -> object:
        return self._answer(self.ingest.handle_bytes(body, "grpc", self._sender(context)),
                            context)

    def _export_logs(self, body: bytes, context: grpc.ServicerContext) -> object:
        return self._answer(
            self.ingest.handle_logs_bytes(body, "grpc", self._sender(context)), context)

    def _refuse_metrics(self, _requests: object, context: grpc.ServicerContext) -> NoReturn:
        """UNIMPLEMENTED, as grpc's own for a service not served, but counted and naming the
        fix (``Ingest.unsupported_signal``); its message is never read."""
        context.abort(grpc.StatusCode.UNIMPLEMENTED, self.ingest.unsupported_signal("grpc"))
        raise AssertionError("abort raises")  # grpc's stubs do not say so

    def _sender(self, context: grpc.ServicerContext) -> str:
        # authenticated by the interceptor already; read again for the sender's name
        return self.auth.identify(metadata_authorization(context.invocation_metadata())) or ""

    def _answer(self, res: IngestResult, context: grpc.ServicerContext) -> object:
        if res.outcome == "invalid":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, res.message)
        if res.outcome == "throttled":
            self._abort_retryable(context, res.message)
        if res.outcome == "too_large":  # as grpc's own refusal past max_message_bytes
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, res.message)
        return res.response()

    def _abort_retryable(self, context: grpc.ServicerContext, message: str) -> None:
        delay = self.config.retry_after_s
        info = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(
            seconds=int(delay), nanos=int((delay % 1) * 1e9)))
        status = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message=message)
        status.details.add().Pack(info)
        # Go exporters read RetryInfo from the status details; the Python SDK exporter only
        # from a `google.rpc.retryinfo-bin` trailer (without it, it backs off 1, 2, 4, 8 s
        # and gives up at its 10 s timeout). Send both.
        context.set_trailing_metadata((
            ("grpc-status-details-bin", status.SerializeToString()),
            ("google.rpc.retryinfo-bin", info.SerializeToString())))
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, message)

    def shutdown(self, deadline_s: float) -> None:
        """Stop accepting; in-flight calls get up to a third of the deadline (at most 5 s):
        the engine's drain needs the rest."""
        self.stop(grace_s=min(5.0, deadline_s / 3))

    def stop(self, grace_s: float) -> None:
        """Stop accepting calls; in-flight calls get ``grace_s`` to finish."""
        if self._server is not None:
            self._server.stop(grace_s).wait(grace_s + 1)
        self._deadlines.stop()
        self._pool.shutdown(wait=False)
