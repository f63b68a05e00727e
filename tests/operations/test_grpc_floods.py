"""Issue 21 (floods, gRPC): calls that never send their message cannot hold the receiver.

Before, 8 calls that sent headers and never a message held all 8 worker threads (the refusal
of a missing token waited for the message; there was no receive deadline): every
authenticated Export timed out. A second serve on the same port started and shared it
(gRPC's SO_REUSEPORT), splitting exports between two processes. Real grpc servers and
clients on free loopback ports; "headers but no message" is a request-streaming client call
whose iterator blocks.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from support.harness import Harness, running_service
from support.poll import poll

from otel_eval.base.configcheck import StartupError
from otel_eval.base.model import Span
from otel_eval.decode import encode

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
TOKEN = [("authorization", "Bearer secret")]


class Silent:
    """Request iterators that send nothing until released."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def requests(self) -> Iterator[bytes]:
        self.release.wait(30)
        yield from ()


def _body() -> bytes:
    return encode.encode_spans([Span("ef" * 16, f"{1:016x}", None, "root", 1, 2)]
                             ).SerializeToString()


def _hang(channel: grpc.Channel, silent: Silent, n: int,
          metadata: list[tuple[str, str]] | None = None) -> list[grpc.Future]:
    call = channel.stream_unary(EXPORT, request_serializer=None, response_deserializer=None)
    return [call.future(silent.requests(), timeout=30, metadata=metadata) for _ in range(n)]


def _waiting_for_messages(h: Harness, n: int) -> None:
    """Wait until ``n`` calls wait for their message in a handler (under a receive deadline)."""
    assert h.svc.grpc is not None
    deadlines = h.svc.grpc._deadlines

    def waiting() -> bool:
        with deadlines._cond:
            return sum(1 for entry in deadlines._heap if entry[3]) >= n

    poll(waiting, f"{n} calls to reach a handler")


def _code(future: grpc.Future) -> grpc.StatusCode:
    try:
        future.result()
    except grpc.RpcError as e:
        return e.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def _export(channel: grpc.Channel, timeout_s: float = 10) -> grpc.StatusCode:
    call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    try:
        call(_body(), timeout=timeout_s, metadata=TOKEN)
    except grpc.RpcError as e:
        return e.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def test_unauthenticated_calls_are_refused_on_their_metadata_not_their_message(
        tmp_path: Path) -> None:
    silent = Silent()
    with running_service(tmp_path, **{"receiver.bearer_tokens": {"app": "secret"}}) as h, \
            grpc.insecure_channel(h.grpc_target) as channel:
        hung = _hang(channel, silent, 2 * h.svc.config.receiver.grpc_workers)
        try:
            assert _export(channel) == grpc.StatusCode.OK  # a worker was free
            assert [_code(f) for f in hung] == [grpc.StatusCode.UNAUTHENTICATED] * len(hung)
        finally:
            silent.release.set()
        assert h.sample("otel_eval_receiver_requests_refused_total", protocol="grpc",
                        reason="unauthenticated") == len(hung)


def test_a_call_whose_message_never_comes_is_cancelled_at_the_receive_deadline(
        tmp_path: Path) -> None:
    silent = Silent()
    with running_service(tmp_path, **{"receiver.grpc_workers": 2,
                                      "receiver.grpc_receive_timeout_s": 1.0}) as h, \
            grpc.insecure_channel(h.grpc_target) as channel:
        hung = _hang(channel, silent, 2)  # every worker thread
        try:
            assert _export(channel, timeout_s=20) == grpc.StatusCode.OK  # after the deadline
            assert [_code(f) for f in hung] == [grpc.StatusCode.CANCELLED] * 2
        finally:
            silent.release.set()
        assert h.sample("otel_eval_receiver_requests_refused_total", protocol="grpc",
                        reason="receive_timeout") == 2


def test_calls_past_maximum_concurrent_rpcs_are_refused_at_once(tmp_path: Path) -> None:
    silent = Silent()
    with running_service(tmp_path, **{"receiver.grpc_workers": 2,
                                      "receiver.grpc_max_concurrent_rpcs": 2}) as h, \
            grpc.insecure_channel(h.grpc_target) as channel:
        hung = _hang(channel, silent, 2)
        try:
            _waiting_for_messages(h, 2)  # both taken, each in a handler waiting
            assert _export(channel) == grpc.StatusCode.RESOURCE_EXHAUSTED
        finally:
            silent.release.set()
        assert all(_code(f) == grpc.StatusCode.INVALID_ARGUMENT for f in hung)  # no message


def test_a_second_serve_on_the_same_grpc_port_fails_to_start(tmp_path: Path) -> None:
    with running_service(tmp_path / "a") as first:
        assert first.svc.grpc is not None
        taken = f"127.0.0.1:{first.svc.grpc.port}"
        with pytest.raises(StartupError, match=f"otlp-grpc: cannot listen on {taken}"), \
                running_service(tmp_path / "b", **{"receiver.grpc_endpoint": taken}):
            pass
        assert _export_to(first) == grpc.StatusCode.OK  # the first still serves its port


def _export_to(h: Harness) -> grpc.StatusCode:
    with grpc.insecure_channel(h.grpc_target) as channel:
        return _export(channel)


def _export_body_to(h: Harness, body: bytes) -> None:
    with grpc.insecure_channel(h.grpc_target) as channel:
        call = channel.unary_unary(EXPORT, request_serializer=None,
                                   response_deserializer=None)
        call(body, timeout=10)


def test_an_expired_call_is_counted_before_it_is_cancelled() -> None:
    """A client that has its CANCELLED finds the refusal in the metric (the order the test
    above reads them in; counted after the cancel, it failed now and then)."""
    from otel_eval.receive.grpc import _ReceiveDeadlines

    order: list[str] = []
    cancelled = threading.Event()

    class Context:
        def cancel(self) -> None:
            order.append("cancel")
            cancelled.set()

        def abort(self, code: grpc.StatusCode, details: str) -> None:
            raise RuntimeError(code)

    def requests() -> Iterator[bytes]:
        cancelled.wait(30)
        raise grpc.RpcError()
        yield b""  # a generator

    deadlines = _ReceiveDeadlines(0.0, lambda: order.append("count"))
    deadlines.start()
    try:
        with pytest.raises(RuntimeError):
            deadlines.receive(requests(), Context())  # type: ignore[arg-type]
    finally:
        deadlines.stop()
    assert order == ["count", "cancel"]
