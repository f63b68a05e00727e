"""ExportConfig: defaults, validation, loading from YAML with every error at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_eval.app.config import build, load_config
from otel_eval.base.configcheck import ConfigError
from otel_eval.outputs.config import ExportConfig


def test_defaults_are_off() -> None:
    cfg = ExportConfig()
    assert cfg.events_endpoint == "" and cfg.forward_endpoint == ""
    assert cfg.max_queue_items >= cfg.max_batch_items > 0


@pytest.mark.parametrize("data, message", [
    ({"forward_endpoint": "http://collector:4317"}, "forward_endpoint: expected HOST:PORT"),
    ({"events_endpoint": "collector"}, "events_endpoint: expected HOST:PORT"),
    ({"max_queue_items": 0}, "max_queue_items"),
    ({"initial_backoff_s": 0}, "initial_backoff_s"),
    ({"max_retry_s": -1}, "max_retry_s"),
])
def test_invalid_values_are_reported(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build(ExportConfig, data)


def test_loaded_from_yaml_with_env(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("export:\n  forward_endpoint: ${FWD:-collector:4319}\n  timeout_s: 2\n")
    cfg = load_config(f, environ={})
    assert cfg.export.forward_endpoint == "collector:4319" and cfg.export.timeout_s == 2.0
    f.write_text("export:\n  forward_endpoint: x\n  bogus: 1\n")
    with pytest.raises(ConfigError) as e:
        load_config(f, environ={})
    assert any("export.bogus: unknown key" in err for err in e.value.errors)
