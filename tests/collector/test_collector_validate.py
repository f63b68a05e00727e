"""The real collector (collector-config/builder.yaml, built by scripts/collector) accepts every
shipped config: ``otelcol validate`` loads each component's configuration as that release
names and checks it, so a renamed component or key fails here, not at a user's start-up."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from support.otel_collector import CONFIGS, MANIFEST, validate

FILES = sorted(p for p in CONFIGS.glob("*.yaml") if p != MANIFEST)


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_the_collector_validates_the_shipped_config(otelcol_bin: Path, path: Path) -> None:
    r = validate(otelcol_bin, path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_components_are_exactly_those_the_configs_use(otelcol_bin: Path) -> None:
    """The manifest builds what the shipped configs use and nothing else."""
    used: dict[str, set[str]] = {"receivers": set(), "processors": set(), "exporters": set()}
    for path in FILES:
        cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
        for kind, names in used.items():
            names.update(name.split("/", 1)[0] for name in cfg.get(kind) or {})
    # the Kafka receiver and debug exporter are there for the other side of the Kafka topology
    # and for looking at what flows (`exporters: [debug]`) while setting a pipeline up
    used["receivers"].add("kafka")
    used["exporters"].add("debug")
    r = subprocess.run([str(otelcol_bin), "components"], capture_output=True, text=True,
                       timeout=60, check=True)
    built = yaml.safe_load(r.stdout)
    for kind, names in used.items():
        assert {c["name"] for c in built[kind]} == names, kind


@pytest.mark.parametrize("change", ["unknown key", "unknown component"])
def test_validate_refuses_a_broken_config(otelcol_bin: Path, tmp_path: Path,
                                          change: str) -> None:
    """The check above can fail: validate refuses a key or a component name the release
    does not know."""
    cfg = yaml.safe_load((CONFIGS / "sidecar.yaml").read_text(encoding="utf-8"))
    if change == "unknown key":
        cfg["exporters"]["otlp_grpc/otel-eval"]["sending_queue"]["queue_sizes"] = 5000
    else:  # a processor type this build does not have, declared and used consistently
        cfg["processors"]["batcher"] = cfg["processors"].pop("batch")
        for pipeline in cfg["service"]["pipelines"].values():
            pipeline["processors"] = [p.replace("batch", "batcher")
                                      for p in pipeline["processors"]]
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = validate(otelcol_bin, path)
    assert r.returncode != 0
    assert ("queue_sizes" if change == "unknown key" else "batcher") in r.stdout + r.stderr
