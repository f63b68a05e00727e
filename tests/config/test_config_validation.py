"""Stage configs are validated: out-of-range values and bad endpoints are refused with their
paths, all at once, whether from a YAML file or built in code."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_eval.app.admin import AdminConfig
from otel_eval.app.config import load_config
from otel_eval.assemble.config import AssemblyConfig
from otel_eval.base.configcheck import ConfigError, FieldErrors
from otel_eval.receive.config import ReceiverConfig
from otel_eval.store.config import StoreConfig


@pytest.mark.parametrize(("yaml_text", "error"), [
    ("assembly:\n  grace_s: -5\n", "assembly.grace_s: must be >= 0, got -5.0"),
    ("assembly:\n  max_open_traces: 0\n", "assembly.max_open_traces: must be >= 1, got 0"),
    ("assembly:\n  idle_timeout_s: .nan\n", "assembly.idle_timeout_s: must be >= 0"),
    ("assembly:\n  max_spans_per_trace: 0\n", "assembly.max_spans_per_trace: must be >= 1"),
    ("assembly:\n  max_pending_spans: -1\n", "assembly.max_pending_spans: must be >= 1"),
    ("receiver:\n  grpc_workers: 0\n", "receiver.grpc_workers: must be >= 1, got 0"),
    ("receiver:\n  max_message_bytes: 0\n", "receiver.max_message_bytes: must be >= 1"),
    ("receiver:\n  http_endpoint: localhost\n", "receiver.http_endpoint: expected HOST:PORT"),
    ("admin:\n  endpoint: ':99999'\n", "admin.endpoint: expected HOST:PORT"),
    ("store:\n  retention_days: -1\n", "store.retention_days: must be >= 0, got -1.0"),
    ("store:\n  path: ''\n", "store.path: must name a file"),
])
def test_invalid_value_is_refused_with_its_path(tmp_path: Path, yaml_text: str,
                                                error: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert any(err.startswith(error) for err in e.value.errors), e.value.errors


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("assembly:\n  grace_s: -5\n  max_open_traces: 0\n"
                    "receiver:\n  grpc_workers: 0\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert sorted(err.split(":")[0] for err in e.value.errors) == [
        "assembly.grace_s", "assembly.max_open_traces", "receiver.grpc_workers"]


def test_configs_built_in_code_are_checked_too() -> None:
    with pytest.raises(FieldErrors) as e:
        AssemblyConfig(grace_s=-1, max_tombstones=-2)
    assert set(e.value.problems) == {"grace_s", "max_tombstones"}
    with pytest.raises(FieldErrors):
        ReceiverConfig(grpc_workers=0)
    # the boundaries themselves are fine: 0 turns a wait off, "" an endpoint
    AssemblyConfig(grace_s=0, reopen_window_s=0, max_released_traces=0, max_tombstones=0)
    ReceiverConfig(grpc_endpoint="", http_endpoint="[::1]:0")
    AdminConfig(endpoint="")
    StoreConfig(path=":memory:", retention_days=0)
