"""The shipped collector configurations parse, are internally consistent, point at otel-eval's
default endpoints (``otel_eval.app.config.Config()``) and carry logs to otel-eval next to traces.
That the collector itself accepts them: test_collector_validate.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_eval.app.config import Config
from otel_eval.base.configcheck import parse_endpoint

DIR = Path(__file__).resolve().parents[2] / "collector-config"
# The collector configs; builder.yaml beside them is the builder's manifest (scripts/collector).
FILES = sorted(p for p in DIR.glob("*.yaml") if p.name != "builder.yaml")
GRPC_PORT = parse_endpoint(Config().receiver.grpc_endpoint)[1]
# Renamed components (collector v0.144 / v0.154); the shipped files use the current names.
DEPRECATED = {"otlp": "otlp_grpc", "otlphttp": "otlp_http", "loadbalancing": "load_balancing"}


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DIR / name).read_text(encoding="utf-8"))
    return data


def _type(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def test_the_five_examples_exist() -> None:
    assert {f.name for f in FILES} == {"sidecar.yaml", "passthrough.yaml", "loadbalancing.yaml",
                                       "loadbalancing-by-service.yaml", "kafka.yaml"}


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_pipelines_reference_declared_components(path: Path) -> None:
    cfg = _load(path.name)
    assert path.read_text().startswith("#"), "each file opens with a comment on its topology"
    for name, pipeline in cfg["service"]["pipelines"].items():
        assert _type(name) in ("traces", "logs", "metrics")
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in (cfg.get(kind) or {}), f"{name}: {component} not declared"
        assert pipeline["processors"][0] == "memory_limiter", name
    for exporter in cfg["exporters"]:
        assert _type(exporter) not in DEPRECATED, f"{exporter}: use {DEPRECATED[_type(exporter)]}"


def _otel_eval_endpoints(cfg: dict[str, Any]) -> list[str]:
    return [e["endpoint"] for name, e in cfg["exporters"].items() if "otel-eval" in name]


@pytest.mark.parametrize("name", ["sidecar.yaml", "passthrough.yaml"])
def test_otel_eval_exporter_matches_service_default(name: str) -> None:
    (endpoint,) = _otel_eval_endpoints(_load(name))
    assert parse_endpoint(endpoint) == ("otel-eval", GRPC_PORT)


def test_sidecar_fans_out_to_backend_and_otel_eval() -> None:
    cfg = _load("sidecar.yaml")
    exporters = cfg["service"]["pipelines"]["traces"]["exporters"]
    assert set(exporters) == {"otlp_grpc/backend", "otlp_grpc/otel-eval"}
    assert cfg["exporters"]["otlp_grpc/otel-eval"]["retry_on_failure"]["enabled"] is True


def test_passthrough_receiver_matches_the_documented_forward_endpoint() -> None:
    text = (DIR / "passthrough.yaml").read_text()
    cfg = _load("passthrough.yaml")
    stamped = cfg["receivers"]["otlp/stamped"]["protocols"]["grpc"]["endpoint"]
    for flag in ("--forward-endpoint", "--events-endpoint"):
        m = re.search(rf"{flag} (\S+)", text)
        assert m and parse_endpoint(m.group(1))[1] == parse_endpoint(stamped)[1]
    pipelines = cfg["service"]["pipelines"]
    assert pipelines["traces/stamped"]["receivers"] == ["otlp/stamped"]
    assert pipelines["logs/evaluations"]["receivers"] == ["otlp/stamped"]
    assert "otlp_grpc/otel-eval" not in pipelines["traces/stamped"]["exporters"]


@pytest.mark.parametrize("name,key", [("loadbalancing.yaml", "traceID"),
                                      ("loadbalancing-by-service.yaml", "attributes")])
def test_loadbalancing_routes_to_default_port(name: str, key: str) -> None:
    lb = _load(name)["exporters"]["load_balancing"]
    assert lb["routing_key"] == key
    assert lb.get("routing_attributes", ["service.name"]) == ["service.name"]
    hosts = lb["resolver"]["static"]["hostnames"]
    assert len(hosts) >= 2
    assert all(parse_endpoint(h)[1] == GRPC_PORT and "otel-eval" in h for h in hosts)
    assert "endpoint" not in lb["protocol"]["otlp"]  # set per replica by the exporter
    # One exporter for both signals: a log record is routed on the spans' ring.
    pipelines = _load(name)["service"]["pipelines"]
    assert pipelines["logs"]["exporters"] == pipelines["traces"]["exporters"] == ["load_balancing"]


def _otel_eval_exporters(cfg: dict[str, Any]) -> set[str]:
    """The exporters that reach otel-eval: by name, the load balancer over its replicas, or
    Kafka (otel-eval's consumer)."""
    return {name for name in cfg["exporters"]
            if "otel-eval" in name or _type(name) in ("load_balancing", "kafka")}


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_logs_reach_otel_eval_from_the_same_receiver_as_traces(path: Path) -> None:
    cfg = _load(path.name)
    to_otel_eval = _otel_eval_exporters(cfg)
    pipelines = cfg["service"]["pipelines"]
    routes = {sig: [p for n, p in pipelines.items()
                    if _type(n) == sig and set(p["exporters"]) & to_otel_eval]
              for sig in ("traces", "logs")}
    assert len(routes["traces"]) == 1 and len(routes["logs"]) == 1, routes
    (traces,), (logs,) = routes["traces"], routes["logs"]
    assert logs["receivers"] == traces["receivers"]
    assert set(logs["exporters"]) & to_otel_eval == set(traces["exporters"]) & to_otel_eval


def test_kafka_matches_the_consumer_defaults() -> None:
    kafka = _load("kafka.yaml")["exporters"]["kafka"]
    assert kafka["partition_traces_by_id"] is True
    assert kafka["traces"] == {"topic": Config().kafka.topic, "encoding": Config().kafka.encoding}
    assert kafka["traces"] == {"topic": "otlp_spans", "encoding": "otlp_proto"}
    assert "topic" not in kafka and "encoding" not in kafka  # deprecated top-level keys
    # The logs topic: the exporter's defaults, spelled out; records keyed by trace id too.
    assert kafka["logs"] == {"topic": Config().kafka.logs_topic,
                             "encoding": Config().kafka.logs_encoding}
    assert kafka["logs"] == {"topic": "otlp_logs", "encoding": "otlp_proto"}
    assert kafka["partition_logs_by_trace_id"] is True
