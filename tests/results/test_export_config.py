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
    assert 1024 <= cfg.max_batch_bytes < 4 << 20  # the gRPC default receive limit: 4 MiB
    assert cfg.max_queue_bytes >= cfg.max_batch_bytes


@pytest.mark.parametrize("data, message", [
    ({"forward_endpoint": "http://collector:4317"}, "forward_endpoint: expected HOST:PORT"),
    ({"events_endpoint": "collector"}, "events_endpoint: expected HOST:PORT"),
    ({"max_queue_items": 0}, "max_queue_items"),
    ({"max_batch_bytes": 1000}, "max_batch_bytes: must be >= 1024"),
    ({"max_batch_bytes": 4096, "max_queue_bytes": 4095},
     "max_queue_bytes: must be at least max_batch_bytes"),
    ({"initial_backoff_s": 0}, "initial_backoff_s"),
    ({"max_retry_s": -1}, "max_retry_s"),
    ({"initial_backoff_s": 2, "max_backoff_s": 1}, "max_backoff_s"),
    ({"headers": {"Bad Key": "v"}}, r"headers\.Bad Key"),
    ({"headers": {"grpc-timeout": "1"}}, r"headers\.grpc-timeout"),
    ({"headers": {"x-tenant\n": "v"}}, r"headers\.x-tenant"),
    # a token read from a file with its newline: gRPC refuses every call (INTERNAL)
    ({"headers": {"authorization": "Bearer s3cret\n"}},
     r"headers\.authorization: value must be printable ASCII"),
    ({"headers": {"x-tenant": "café"}}, r"headers\.x-tenant: value must be printable ASCII"),
    ({"tls": {"ca_file": "ca.pem"}}, "tls: is set while insecure is true"),
    ({"insecure": False, "tls": {"cert_file": "c.pem"}}, "cert_file and key_file go together"),
    ({"compression": "brotli"}, "compression"),
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


def test_headers_take_secrets_from_the_environment(tmp_path: Path) -> None:
    """``${VAR}`` in a header value is the way to keep a token out of the file; the value is
    not in the config's repr (logged at startup)."""
    f = tmp_path / "c.yaml"
    f.write_text("export:\n  forward_endpoint: collector:4317\n  insecure: false\n"
                 "  compression: gzip\n  tls: {ca_file: /etc/ca.pem}\n"
                 "  headers: {Authorization: 'Bearer ${EXPORT_TOKEN}', x-tenant: acme}\n")
    cfg = load_config(f, environ={"EXPORT_TOKEN": "s3cret"}).export
    assert cfg.metadata() == (("authorization", "Bearer s3cret"), ("x-tenant", "acme"))
    assert cfg.tls.ca_file == "/etc/ca.pem" and cfg.compression == "gzip"
    assert "s3cret" not in repr(cfg)
    with pytest.raises(ConfigError, match="EXPORT_TOKEN is not set"):
        load_config(f, environ={})
