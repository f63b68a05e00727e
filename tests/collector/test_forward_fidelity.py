"""Pass-through forwards what it received: a span with every OTLP field and value type set,
sent to a real ``otel-eval serve --forward-endpoint``, arrives at the backend equal in every
field but the ``otel_eval.*`` stamps, with its resource and scope as sent. Directly, and
through the real collector's pass-through config (collector-config/passthrough.yaml).

A setup-only trace (a ``create_agent`` span alone: not evaluated, passed on) arrives as sent,
unstamped.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1 import trace_pb2
from support.otel_collector import Collector, render
from support.otlp_capture import Capture, headed_spans
from support.poll import poll
from support.ports import free_port
from support.served import serve

TRACE, SETUP = bytes.fromhex("5b8efff798038103d269b633813fc60c"), bytes(range(1, 17))
ROOT, CHAT, AGENT_SETUP = bytes.fromhex("eee19b7ec3c1b174"), bytes(range(8, 16)), bytes(8 * [7])
REMOTE_PARENT = bytes.fromhex("00f067aa0ba902b7")
SAMPLED, HAS_IS_REMOTE, IS_REMOTE = 0x1, 0x100, 0x200
SERVE = {"assembly": {"grace_s": 0.5, "idle_timeout_s": 3.0}}


def _kv(key: str, **value: Any) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(**value))


def _every_value_type(prefix: str) -> list[KeyValue]:
    """One attribute of each AnyValue kind, nested ones included, and an empty value."""
    return [
        _kv(f"{prefix}.string", string_value="text"),
        _kv(f"{prefix}.bool", bool_value=True),
        _kv(f"{prefix}.int", int_value=-(2**62)),
        _kv(f"{prefix}.double", double_value=0.125),
        _kv(f"{prefix}.bytes", bytes_value=b"\x00\xffraw"),
        _kv(f"{prefix}.array", array_value=ArrayValue(values=[
            AnyValue(string_value="a"), AnyValue(int_value=2), AnyValue(double_value=1.5),
            AnyValue(bool_value=False), AnyValue(bytes_value=b"\x01")])),
        _kv(f"{prefix}.kvlist", kvlist_value=KeyValueList(values=[
            _kv("inner", string_value="v"),
            _kv("nested", kvlist_value=KeyValueList(values=[_kv("deep", int_value=3)]))])),
        _kv(f"{prefix}.empty"),
    ]


def _span(span_id: bytes, name: str, parent: bytes, flags: int, attrs: list[KeyValue],
          trace_id: bytes = TRACE, start: int = 1_700_000_000_000_000_000) -> trace_pb2.Span:
    return trace_pb2.Span(
        trace_id=trace_id, span_id=span_id, parent_span_id=parent, name=name, flags=flags,
        trace_state="vendor=abc,other=1", kind=trace_pb2.Span.SPAN_KIND_CLIENT,
        start_time_unix_nano=start, end_time_unix_nano=start + 2_000_000,
        attributes=attrs, dropped_attributes_count=3,
        events=[trace_pb2.Span.Event(time_unix_nano=start + 1000, name="gen_ai.choice",
                                     attributes=_every_value_type("event"),
                                     dropped_attributes_count=4)],
        dropped_events_count=5,
        links=[trace_pb2.Span.Link(trace_id=bytes(range(16, 32)), span_id=bytes(range(32, 40)),
                                   trace_state="linked=1", attributes=_every_value_type("link"),
                                   dropped_attributes_count=6,
                                   flags=SAMPLED | HAS_IS_REMOTE | IS_REMOTE)],
        dropped_links_count=7,
        status=trace_pb2.Status(code=trace_pb2.Status.STATUS_CODE_OK, message="fine"),
    )


def _request() -> trace_service_pb2.ExportTraceServiceRequest:
    """An agent run (root with a remote parent, one chat call) and a setup-only trace."""
    root = _span(ROOT, "invoke_agent shop", REMOTE_PARENT, SAMPLED | HAS_IS_REMOTE | IS_REMOTE,
                 [_kv("gen_ai.operation.name", string_value="invoke_agent"),
                  _kv("gen_ai.agent.name", string_value="shop"), *_every_value_type("root")])
    root.end_time_unix_nano += 10_000_000
    chat = _span(CHAT, "chat gpt-4o", ROOT, SAMPLED | HAS_IS_REMOTE,
                 [_kv("gen_ai.operation.name", string_value="chat"),
                  _kv("gen_ai.request.model", string_value="gpt-4o"),
                  _kv("gen_ai.usage.input_tokens", int_value=12),
                  *_every_value_type("span")], start=root.start_time_unix_nano + 1000)
    setup = _span(AGENT_SETUP, "create_agent shop", b"", SAMPLED,
                  [_kv("gen_ai.operation.name", string_value="create_agent"),
                   *_every_value_type("setup")], trace_id=SETUP)
    scope = trace_pb2.ScopeSpans(
        scope=InstrumentationScope(name="agent.instrumentation", version="1.2.3",
                                   attributes=_every_value_type("scope"),
                                   dropped_attributes_count=8),
        schema_url="https://opentelemetry.io/schemas/1.37.0", spans=[root, chat, setup])
    resource = Resource(attributes=[_kv("service.name", string_value="shop-agent"),
                                    *_every_value_type("resource")],
                        dropped_attributes_count=9)
    return trace_service_pb2.ExportTraceServiceRequest(resource_spans=[trace_pb2.ResourceSpans(
        resource=resource, scope_spans=[scope],
        schema_url="https://opentelemetry.io/schemas/1.36.0")])


def _received(requests: Iterable[Any]) -> dict[bytes, tuple[Any, Any, Any]]:
    """span id -> (ResourceSpans without its scopes, ScopeSpans without its spans, Span)."""
    return {span.span_id: (rhead, shead, span) for rhead, shead, span in headed_spans(requests)}


def _unstamped(span: Any) -> tuple[Any, list[str]]:
    """The span without its ``otel_eval.*`` attributes, and their keys."""
    copy = trace_pb2.Span()
    copy.CopyFrom(span)
    keys = [kv.key for kv in span.attributes if kv.key.startswith("otel_eval.")]
    del copy.attributes[:]
    copy.attributes.extend(kv for kv in span.attributes if not kv.key.startswith("otel_eval."))
    return copy, keys


def _field_differences(got: Any, want: Any) -> list[str]:
    return [f.name for f in want.DESCRIPTOR.fields
            if getattr(got, f.name) != getattr(want, f.name)]


def _all_three(backend: Capture) -> dict[bytes, tuple[Any, Any, Any]] | None:
    got = _received(list(backend.traces))
    return got if len(got) == 3 else None


def _assert_forwarded_as_sent(backend: Capture) -> None:
    sent = _received([_request()])
    got = poll(lambda: _all_three(backend), "the three spans at the backend", timeout_s=60,
               interval_s=0.1)
    stamps = {}
    for span_id, (rhead, shead, span) in sent.items():
        got_rhead, got_shead, got_span = got[span_id]
        assert got_rhead == rhead, _field_differences(got_rhead.resource, rhead.resource)
        assert got_shead == shead, _field_differences(got_shead.scope, shead.scope)
        bare, stamps[span_id] = _unstamped(got_span)
        assert _field_differences(bare, span) == []
        assert bare == span  # unknown fields too
    assert "otel_eval.verdict" in stamps[ROOT] and "otel_eval.trace.status" in stamps[ROOT]
    assert stamps[AGENT_SETUP] == []  # not a run: passed on as received


def _send(target: str) -> None:
    with grpc.insecure_channel(target) as channel:
        trace_service_pb2_grpc.TraceServiceStub(channel).Export(_request(), timeout=30)


@pytest.mark.parametrize("workers", [0, 1])
def test_a_forwarded_span_equals_the_received_one_but_for_the_stamps(
        tmp_path: Path, workers: int) -> None:
    """In serve's process, and with an evaluation worker process (spans go there and the
    evaluation comes back: what is forwarded is what serve holds)."""
    config = {**SERVE, "evaluation": {"workers": workers}}
    with Capture() as backend, serve(tmp_path, config, argv=[
            "--forward-endpoint", backend.grpc_target]) as served:
        _send(served.grpc_target)
        _assert_forwarded_as_sent(backend)
    assert not backend.errors


@pytest.mark.slow
def test_through_the_collectors_pass_through_config(otelcol_bin: Path, tmp_path: Path) -> None:
    agent, stamped = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    (tmp_path / "serve").mkdir()
    with Capture() as backend, serve(tmp_path / "serve", SERVE, argv=[
            "--forward-endpoint", stamped]) as served:
        cfg = render("passthrough.yaml", {
            "0.0.0.0:4317": agent, "0.0.0.0:4319": stamped,
            "otel-eval:4317": served.grpc_target, "tempo:4317": backend.grpc_target,
            "http://loki:3100/otlp": f"{backend.http_url}/otlp"})
        with Collector(otelcol_bin, cfg, tmp_path):
            _send(agent)
            _assert_forwarded_as_sent(backend)
    assert not backend.errors
