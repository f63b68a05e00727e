"""A real OpenTelemetry Collector for the tests: the binary ``scripts/collector`` builds with the
official builder from ``collector-config/builder.yaml``, run on loopback ports from a shipped
config rendered by one documented rewrite.

The rewrite (``render``) is the shipped file, parsed, with exactly two changes:

- every string equal to a key of ``endpoints`` is replaced by its value: listener and exporter
  ``host:port`` values, URLs, Kafka broker addresses, the static resolver's hostnames. Every
  endpoint-like string in ``receivers`` and ``exporters`` must be mapped (one left in would make
  the collector listen on a fixed port or reach for a host that does not exist here), so an
  unmapped one is an error, not a silent pass;
- ``service.telemetry.metrics.level: none``: the collector's own metrics endpoint (port 8888 by
  default) would collide between collectors of one session and with otel-eval's admin port.

Components, pipelines, processors, queues and retries stay the file's own.
"""

from __future__ import annotations

import copy
import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import yaml

from support.poll import poll

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "collector-config"
MANIFEST = CONFIGS / "builder.yaml"
# The line the collector logs once every pipeline has started.
READY = "Everything is ready"
_ENDPOINT = re.compile(r"^(https?://)?[A-Za-z0-9_.-]+:\d+(/\S*)?$")


def build() -> Path:
    """The collector binary: ``scripts/collector``'s last line of stdout (built once per
    manifest, cached). Without a Go toolchain or the module proxy this raises: the suite needs
    the real collector and never skips it."""
    r = subprocess.run([str(ROOT / "scripts" / "collector")], capture_output=True, text=True,
                       timeout=3600, check=False)
    if r.returncode != 0 or not r.stdout.strip():
        raise RuntimeError(f"scripts/collector failed (exit {r.returncode}):\n"
                           + r.stderr[-4000:])
    binary = Path(r.stdout.strip().splitlines()[-1])
    if not os.access(binary, os.X_OK):
        raise RuntimeError(f"scripts/collector printed {binary}, which is not an executable")
    return binary


def validate(binary: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """``otelcol validate --config FILE``: loads every component's config, starts nothing."""
    return subprocess.run([str(binary), "validate", "--config", str(config)],
                          capture_output=True, text=True, timeout=120, check=False)



def _rewrite(node: Any, endpoints: dict[str, str], path: str, unmapped: list[str]) -> Any:
    if isinstance(node, dict):
        return {k: _rewrite(v, endpoints, f"{path}.{k}", unmapped) for k, v in node.items()}
    if isinstance(node, list):
        return [_rewrite(v, endpoints, f"{path}[{i}]", unmapped) for i, v in enumerate(node)]
    if isinstance(node, str):
        if node in endpoints:
            return endpoints[node]
        if _ENDPOINT.match(node):
            unmapped.append(f"{path}: {node}")
    return node


def render(name: str, endpoints: dict[str, str]) -> dict[str, Any]:
    """The shipped ``collector-config/NAME`` with the rewrite of the module docstring."""
    cfg: dict[str, Any] = yaml.safe_load((CONFIGS / name).read_text(encoding="utf-8"))
    unmapped: list[str] = []
    out = copy.deepcopy(cfg)
    for section in ("receivers", "exporters"):
        out[section] = _rewrite(cfg.get(section) or {}, endpoints, section, unmapped)
    if unmapped:
        raise ValueError(f"{name}: endpoints the test does not map: {unmapped}")
    telemetry = out["service"].setdefault("telemetry", {})
    telemetry.setdefault("metrics", {})["level"] = "none"
    return out


class Collector:
    """One collector process: ``start()`` writes the config, runs the binary and waits until
    it logs that every pipeline is running; ``stop()`` sends SIGTERM (the collector drains
    its queues) and waits, killing only as a last resort."""

    def __init__(self, binary: Path, config: dict[str, Any], workdir: Path,
                 name: str = "otelcol") -> None:
        self.binary, self.config = binary, config
        self.config_path = workdir / f"{name}.yaml"
        self.log = workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, deadline_s: float = 60) -> Collector:
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen([str(self.binary), "--config", str(self.config_path)],
                                         stdout=out, stderr=subprocess.STDOUT)
        proc = self.proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"the collector exited ({proc.returncode}):\n"
                                   + self.log_tail())
            return READY in self.log.read_text(errors="replace")

        try:
            poll(ready, "the collector to start", timeout_s=deadline_s)
        except AssertionError as e:
            raise RuntimeError(f"{e}:\n{self.log_tail()}") from None
        return self

    def stop(self, deadline_s: float = 30) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(deadline_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def __enter__(self) -> Collector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
