"""Issue 33, finding 11: one sender cannot take every gRPC slot. Calls that send headers and
no message hold a worker thread (and a grpc_max_concurrent_rpcs slot) until the receive
deadline; one sender, with a valid token or none, opened grpc_max_concurrent_rpcs of them and
0 of 36 exports of the others got through. Now each sender has at most
``grpc_max_waiting_rpcs_per_sender`` calls waiting, more only while they are young: those are
cancelled after ``SHARE_GRACE_S`` without a message, and once a call has waited that long the
rest are refused at once, retryable. A local collector (one sender) with more calls in flight
than its share, whose messages follow at once, is not refused (issue 34: 1-13 % of the bench's
exports were, at 8 in flight).
Real service and grpc clients on loopback; the senders are told apart by address (127.0.0.1
and ::1) and, with tokens, by token name."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
from support.harness import Harness, running_service
from support.poll import poll

from otel_eval.base.model import Span
from otel_eval.decode import encode
from otel_eval.receive.grpc import _SenderShares, peer_host

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
TOKENS = {"hog": "hog-secret", "app": "app-secret"}


class Silent:
    def __init__(self) -> None:
        self.release = threading.Event()

    def requests(self) -> Iterator[bytes]:
        self.release.wait(60)
        yield from ()


def _hang(channel: grpc.Channel, silent: Silent, n: int,
          metadata: list[tuple[str, str]] | None) -> list[grpc.Future]:
    call = channel.stream_unary(EXPORT, request_serializer=None, response_deserializer=None)
    return [call.future(silent.requests(), timeout=60, metadata=metadata) for _ in range(n)]


def _code(future: grpc.Future) -> grpc.StatusCode:
    try:
        future.result()
    except grpc.RpcError as e:
        return e.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def _export(channel: grpc.Channel, metadata: list[tuple[str, str]] | None) -> grpc.StatusCode:
    body = encode.encode_spans([Span("ef" * 16, f"{1:016x}", None, "root", 1, 2)]
                             ).SerializeToString()
    call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    try:
        call(body, timeout=20, metadata=metadata)
    except grpc.RpcError as e:
        return e.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def _poll(h: Harness, n: int) -> None:
    """Until ``n`` of the hog's calls were refused."""
    poll(lambda: h.sample("otel_eval_receiver_requests_throttled_total", protocol="grpc",
                          reason="sender_share") >= n,
         "the hog's calls past its share to be refused", timeout_s=30, interval_s=0.01)


def _flood_then_export(h: Harness, hog_target: str, app_target: str,
                       hog: list[tuple[str, str]] | None,
                       app: list[tuple[str, str]] | None) -> None:
    silent = Silent()
    slots = h.svc.config.receiver.grpc_max_concurrent_rpcs
    share = h.svc.config.receiver.grpc_max_waiting_rpcs_per_sender
    with grpc.insecure_channel(hog_target) as hog_channel, \
            grpc.insecure_channel(app_target) as app_channel:
        hung = _hang(hog_channel, silent, slots, hog)  # every slot grpc has
        try:
            _poll(h, slots - share)
            assert [_export(app_channel, app) for _ in range(5)] == [grpc.StatusCode.OK] * 5
        finally:
            silent.release.set()
        codes = [_code(f) for f in hung]
        # past the share: cancelled after the grace (the first, young) or refused at once
        cut = codes.count(grpc.StatusCode.CANCELLED)
        assert cut <= h.svc.config.receiver.grpc_workers - share
        assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) + cut == slots - share
        assert codes.count(grpc.StatusCode.INVALID_ARGUMENT) == share  # held: no message


def test_one_token_cannot_take_every_slot(tmp_path: Path) -> None:
    with running_service(tmp_path, **{"receiver.bearer_tokens": TOKENS,
                                      "receiver.grpc_receive_timeout_s": 60.0}) as h:
        _flood_then_export(h, h.grpc_target, h.grpc_target,
                           [("authorization", "Bearer hog-secret")],
                           [("authorization", "Bearer app-secret")])


def test_without_tokens_one_address_cannot_take_every_slot(tmp_path: Path) -> None:
    with running_service(tmp_path, **{"receiver.grpc_endpoint": "localhost:0",
                                      "receiver.grpc_receive_timeout_s": 60.0}) as h:
        assert h.svc.grpc is not None
        port = h.svc.grpc.port
        _flood_then_export(h, f"127.0.0.1:{port}", f"[::1]:{port}", None, None)


def test_one_address_cannot_lock_out_the_others_sharing_its_token(tmp_path: Path) -> None:
    """The share was one per token name: every agent given the same token (the docs'
    ``bearer_tokens: {agents: ...}``) was one sender, so one of them, on its own address,
    holding its calls without a message got every other agent's exports refused
    RESOURCE_EXHAUSTED until its calls were cut. A sender is its address and its token's
    name, as OTLP/HTTP's body share has it: the others keep exporting."""
    with running_service(tmp_path, **{"receiver.grpc_endpoint": "localhost:0",
                                      "receiver.bearer_tokens": {"agents": "agents-secret"},
                                      "receiver.grpc_receive_timeout_s": 60.0}) as h:
        assert h.svc.grpc is not None
        port = h.svc.grpc.port
        token = [("authorization", "Bearer agents-secret")]
        _flood_then_export(h, f"127.0.0.1:{port}", f"[::1]:{port}", token, token)


def test_peer_host() -> None:
    assert peer_host("ipv4:127.0.0.1:5431") == "ipv4:127.0.0.1"
    assert peer_host("ipv6:[::1]:5431") == "ipv6:[::1]"
    assert peer_host("unix:/tmp/s") == "unix:/tmp/s"


def test_a_sender_past_its_share_is_refused_only_once_a_call_of_it_waited_the_grace() -> None:
    now = [0.0]
    shares = _SenderShares(2, grace_s=1.0, clock=lambda: now[0])
    honest = [shares.enter("collector") for _ in range(2)]
    assert [v for v, _ in honest] == ["taken", "taken"]
    # more calls of the same sender while its calls are young: taken, with the grace only
    extra = [shares.enter("collector") for _ in range(6)]
    assert [v for v, _ in extra] == ["short"] * 6
    for _, started in honest + extra:  # their messages came
        shares.leave("collector", started)
    now[0] = 5.0
    held = [shares.enter("hog") for _ in range(3)]
    assert [v for v, _ in held] == ["taken", "taken", "short"]
    now[0] = 5.999
    late = shares.enter("hog")
    assert late[0] == "short"
    now[0] = 6.0  # its oldest call waited the grace without a message
    assert shares.enter("hog")[0] == "refused"
    assert shares.enter("app")[0] == "taken"  # the others are not concerned
    shares.leave("hog", held[2][1])  # the short calls cut at their deadline
    shares.leave("hog", late[1])
    assert shares.enter("hog")[0] == "refused"  # its first two still wait
    shares.leave("hog", held[0][1])
    shares.leave("hog", held[1][1])
    assert shares.enter("hog")[0] == "taken"


def test_a_logs_call_refused_for_its_share_is_counted_as_a_logs_request(
        tmp_path: Path) -> None:
    """``requests_throttled``'s protocol is ``grpc_logs`` for a logs Export call (as the
    engine's refusals of it are): a logs call refused for its sender's share was counted as
    ``grpc``, a trace request's, so a panel by protocol blamed the traces."""
    logs_export = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
    with running_service(tmp_path) as h:
        receiver = h.svc.grpc
        assert receiver is not None
        receiver._shares.enter = lambda sender: ("refused", 0.0)  # type: ignore[method-assign]
        receiver._shares.leave = lambda sender, started: None  # type: ignore[method-assign]
        with grpc.insecure_channel(h.grpc_target) as channel:
            for method in (logs_export, EXPORT):
                call = channel.unary_unary(method, request_serializer=None,
                                           response_deserializer=None)
                try:
                    call(b"", timeout=20)
                except grpc.RpcError as e:
                    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                else:
                    raise AssertionError("the call was not refused")
        assert [h.sample("otel_eval_receiver_requests_throttled_total", protocol=p,
                         reason="sender_share") for p in ("grpc_logs", "grpc")] == [1, 1]
