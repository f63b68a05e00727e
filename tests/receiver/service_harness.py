"""An in-process ``Service`` on loopback port 0 with a hand-driven clock (no worker thread)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from otel_eval.app.config import Config, replace
from otel_eval.app.service import Service


class ManualClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class Harness:
    def __init__(self, svc: Service, clock: ManualClock) -> None:
        self.svc, self.clock = svc, clock

    @property
    def grpc_target(self) -> str:
        assert self.svc.grpc is not None
        return f"127.0.0.1:{self.svc.grpc.port}"

    @property
    def http_url(self) -> str:
        assert self.svc.http is not None
        return f"http://127.0.0.1:{self.svc.http.port}/v1/traces"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.svc.admin.port}"

    def release(self, after_s: float | None = None) -> int:
        """Advance the clock past the grace period (or by ``after_s``), evaluate, store."""
        self.clock.now += self.svc.config.assembly.grace_s + 0.001 if after_s is None \
            else after_s
        self.svc.engine.tick()
        return self.svc.engine.process()

    def sample(self, name: str, **labels: str) -> float:
        value = self.svc.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


@contextmanager
def running_service(tmp_path: Path, **changes: Any) -> Iterator[Harness]:
    cfg = replace(Config(), **{
        "receiver.grpc_endpoint": "127.0.0.1:0", "receiver.http_endpoint": "127.0.0.1:0",
        "admin.endpoint": "127.0.0.1:0", "store.path": str(tmp_path / "otel-eval.db"),
        "evaluation.workers": 1,
        **changes})
    clock = ManualClock()
    svc = Service(cfg, registry=CollectorRegistry(), clock=clock)
    svc.start(worker=False)
    try:
        yield Harness(svc, clock)
    finally:
        svc.shutdown(deadline_s=5)
