"""Readiness follows the stages' health: a serve whose engine worker (or Kafka consumer) died
takes no traffic it could evaluate, so ``/readyz`` answers 503 naming it, as ``/healthz``
does, not only once the stop it triggers begins (docs/api.md)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from support.harness import running_service

from otel_eval.outputs.forward import Forwarder


def _get(url: str) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_readiness_turns_red_when_a_stage_dies(tmp_path: Path) -> None:
    with running_service(tmp_path) as h:
        assert _get(h.admin_url + "/readyz") == (200, {"status": "ok"})
        # what the engine's worker records as it dies (Engine._run: "engine worker died")
        h.svc.engine.failure = RuntimeError("boom")
        assert _get(h.admin_url + "/healthz")[0] == 503
        code, body = _get(h.admin_url + "/readyz")
        assert code == 503 and "engine" in body["reason"]


class Died(BaseException):
    """What no stage boundary catches (``except Exception``): a worker's death."""


def _die(*_args: Any, **_kwargs: Any) -> Any:
    raise Died()


def test_a_dead_sender_thread_turns_health_and_readiness_red(tmp_path: Path) -> None:
    """Pass-through's sender thread dies: /healthz goes red (serve stops, a supervisor or the
    liveness probe restarts it; the spool replays what it held), /readyz names the sink."""
    with running_service(tmp_path, **{"export.forward_endpoint": "127.0.0.1:9"}) as h:
        forwarder = next(s for s in h.svc.sinks if isinstance(s, Forwarder))
        sender = forwarder._sender
        assert _get(h.admin_url + "/healthz")[0] == 200
        sender._call = _die  # the next send dies past the worker's boundary
        sender.submit(trace_service_pb2.ExportTraceServiceRequest(), 1)
        assert sender._thread is not None
        sender._thread.join(30)
        assert not sender._thread.is_alive()
        assert _get(h.admin_url + "/healthz")[0] == 503
        code, body = _get(h.admin_url + "/readyz")
        assert code == 503 and "forward" in body["reason"]

