"""OTLP metrics at the OTLP ports (``opentelemetry-instrument`` exports them by default). As
the Collector's OTLP receiver answers a signal no pipeline takes (no MetricsService
registered: gRPC UNIMPLEMENTED, HTTP 404), otel-eval refuses them, not acknowledging what it
neither evaluates nor forwards; but the answer names the fix (OTEL_METRICS_EXPORTER=none),
each is counted (``receiver_requests_refused{reason="unsupported_signal"}``) and the first
is said as a warning in serve's log (debug for the exporter's next ones)."""

from __future__ import annotations

import http.client
import logging
from pathlib import Path

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
    OTLPMetricExporter as GrpcMetricExporter,
)
from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
    OTLPMetricExporter as HttpMetricExporter,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExportResult
from support.harness import running_service

EXPORT = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"


def _metrics() -> object:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    provider.get_meter("app").create_counter("requests").add(1)
    data = reader.get_metrics_data()
    provider.shutdown()
    return data


def test_sdk_metrics_exports_are_refused_counted_and_said_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="otel_eval")
    data = _metrics()
    with running_service(tmp_path) as h:
        assert h.svc.grpc is not None and h.svc.http is not None
        grpc_exporter = GrpcMetricExporter(endpoint=f"127.0.0.1:{h.svc.grpc.port}",
                                           insecure=True, timeout=10)
        http_exporter = HttpMetricExporter(
            endpoint=f"http://127.0.0.1:{h.svc.http.port}/v1/metrics", timeout=10)
        try:
            assert grpc_exporter.export(data) == MetricExportResult.FAILURE  # type: ignore[arg-type]
            assert http_exporter.export(data) == MetricExportResult.FAILURE  # type: ignore[arg-type]
        finally:
            grpc_exporter.shutdown()
            http_exporter.shutdown()
        # what the exporter is told
        with (grpc.insecure_channel(f"127.0.0.1:{h.svc.grpc.port}") as ch,
              pytest.raises(grpc.RpcError) as raised):
            ch.unary_unary(EXPORT)(b"", timeout=10)
        assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED  # type: ignore[attr-defined]
        assert "OTEL_METRICS_EXPORTER=none" in raised.value.details()  # type: ignore[attr-defined]
        conn = http.client.HTTPConnection("127.0.0.1", h.svc.http.port, timeout=10)
        try:
            conn.request("POST", "/v1/metrics", b"", {"Content-Type": "application/x-protobuf"})
            resp = conn.getresponse()
            status, body = resp.status, resp.read()
        finally:
            conn.close()
        assert status == 404 and b"OTEL_METRICS_EXPORTER=none" in body
        for protocol in ("grpc", "http"):
            assert h.sample("otel_eval_receiver_requests_refused_total", protocol=protocol,
                            reason="unsupported_signal") == 2
    said = [r for r in caplog.records if r.name.startswith("otel_eval.")
            and "OTEL_METRICS_EXPORTER=none" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING] + [logging.DEBUG] * 3, said
