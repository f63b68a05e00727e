"""Streaming = offline: the same traces give the same per-trace JSON whether read from files
(`eval`) or sent over OTLP/gRPC and OTLP/HTTP by the official SDK exporter (`replay`, original
ids) or by a raw client sending the OTLP JSON of the span trees."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from support.harness import running_service

from otel_eval.app.config import Config
from otel_eval.app.replay import replay
from otel_eval.base.model import Trace
from otel_eval.decode import encode, otlp_json
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.receive.loaders import load_path


def _files(datasets: Path) -> list[Path]:
    trail = sorted((datasets / "trail" / "GAIA" / "traces").glob("*.json.gz"))
    swe = sorted((datasets / "swe-bench-mini-swe-agent" / "trajs").glob("*/*.traj.json*"))
    return [*trail[:12], datasets / "tau-bench" / "airline" / "gpt-4o-airline.runs.json",
            *swe[:3]]


def _comparable(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "source"}


@pytest.fixture(scope="module")
def offline(datasets: Path) -> tuple[list[Trace], dict[str, dict[str, Any]]]:
    traces = [t for f in _files(datasets) for t in load_path(f)]
    ev = Evaluator(Config())
    return traces, {t.trace_id: _comparable(ev.evaluate(t).to_json()) for t in traces}


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_sdk_replay_gives_the_offline_results(tmp_path: Path, protocol: str,
                                              offline: tuple[list[Trace], dict[str, Any]]) -> None:
    traces, expected = offline
    assert len(expected) >= 100
    with running_service(tmp_path) as h:
        target = h.grpc_target if protocol == "grpc" else h.http_url.removesuffix("/v1/traces")
        sent = replay(traces, target, protocol=protocol)
        assert sent == sum(len(t.spans) for t in traces)
        assert h.release() == len(expected)
        for trace_id, want in expected.items():
            got = h.svc.store.get(trace_id)
            assert got is not None and got["source"] == "otlp"
            assert _comparable(got) == want, trace_id


def test_raw_otlp_json_of_span_trees_gives_the_offline_results(
        tmp_path: Path, offline: tuple[list[Trace], dict[str, Any]]) -> None:
    traces, expected = offline
    trail = [t for t in traces if expected[t.trace_id]["convention"] == "openinference"]
    assert trail
    with running_service(tmp_path) as h:
        for t in trail:
            body = json.dumps(otlp_json.request_to_json(encode.encode_spans(t.spans))).encode()
            req = urllib.request.Request(h.http_url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as r:
                assert r.status == 200
        assert h.release() == len(trail)
        for t in trail:
            got = h.svc.store.get(t.trace_id)
            assert got is not None and _comparable(got) == expected[t.trace_id]
