"""Issue 11 (auth and TLS): bearer tokens and (m)TLS on every listener, as the Collector does.

Real TLS with a CA made in the test; the official OTLP exporters configured with headers and
certificates (and once through OTEL_EXPORTER_OTLP_HEADERS) are the clients.
"""

from __future__ import annotations

import json
import logging
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExp
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExp
from opentelemetry.sdk.trace.export import SpanExporter
from support.harness import Harness, emit_agent_run, running_service
from support.tls_certs import TestCA

from otel_eval.app.config import Config, replace
from otel_eval.app.service import Service
from otel_eval.base.configcheck import ConfigError
from otel_eval.receive import security
from otel_eval.receive.security import BearerAuth, TlsServerConfig

TOKEN = "s3cret-agents-token"
READ, WRITE = "r34d-token", "wr1te-token"


class Pki:
    def __init__(self, tmp_path: Path) -> None:
        self.ca = TestCA(tmp_path, "one")
        self.server = self.ca.issue("server", server=True)
        self.client = self.ca.issue("client", server=False)
        self.other_ca = TestCA(tmp_path, "two")  # trusted by nobody at first

    def tls(self, mtls: bool = True) -> TlsServerConfig:
        return TlsServerConfig(cert_file=str(self.server.cert), key_file=str(self.server.key),
                               client_ca_file=str(self.ca.path) if mtls else "")


@pytest.fixture
def pki(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Pki:
    # requests lets these variables override a session's CA (the HTTP exporter's
    # certificate_file), psf/requests#3829: a machine that sets them would test nothing
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    return Pki(tmp_path)


def _secure(tmp_path: Path, pki: Pki, **changes: Any) -> Any:
    return running_service(tmp_path, **{
        "receiver.tls": pki.tls(), "receiver.bearer_tokens": {"agents": TOKEN},
        "admin.tls": pki.tls(mtls=False),
        "admin.read_tokens": {"grafana": READ}, "admin.write_tokens": {"labeller": WRITE},
        **changes})


def _grpc_exporter(h: Harness, pki: Pki, token: str | None, client_cert: bool = True,
                   ca: Path | None = None, timeout: float = 5) -> GrpcExp:
    creds = grpc.ssl_channel_credentials(
        (ca or pki.ca.path).read_bytes(),
        pki.client.key.read_bytes() if client_cert else None,
        pki.client.cert.read_bytes() if client_cert else None)
    assert h.svc.grpc is not None
    headers = {"authorization": f"Bearer {token}"} if token else None
    return GrpcExp(endpoint=f"localhost:{h.svc.grpc.port}", credentials=creds, headers=headers,
                   timeout=timeout)


def _http_exporter(h: Harness, pki: Pki, token: str | None, client_cert: bool = True,
                   ca: Path | None = None, timeout: float = 5) -> HttpExp:
    assert h.svc.http is not None
    return HttpExp(endpoint=f"https://localhost:{h.svc.http.port}/v1/traces",
                   certificate_file=str(ca or pki.ca.path),
                   client_key_file=str(pki.client.key) if client_cert else None,
                   client_certificate_file=str(pki.client.cert) if client_cert else None,
                   headers={"Authorization": f"Bearer {token}"} if token else None,
                   timeout=timeout)


def _exporter(protocol: str, h: Harness, pki: Pki, token: str | None,
              **kw: Any) -> SpanExporter:
    return (_grpc_exporter if protocol == "grpc" else _http_exporter)(h, pki, token, **kw)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_sdk_exporter_with_token_and_client_certificate(tmp_path: Path, pki: Pki,
                                                        protocol: str,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with _secure(tmp_path, pki) as h:
        trace_id = emit_agent_run(_exporter(protocol, h, pki, TOKEN))
        assert h.svc.engine.open_traces() == 1
        for wrong in ("not-the-token", None):
            # refused at once, never retried: the timeout only has to cover a TLS handshake
            emit_agent_run(_exporter(protocol, h, pki, wrong, timeout=10))
        assert h.svc.engine.open_traces() == 1  # refused before anything was taken
        assert h.sample("otel_eval_receiver_requests_refused_total", protocol=protocol,
                        reason="unauthenticated") == 6  # 3 spans, one request each, twice
        emit_agent_run(_exporter(protocol, h, pki, TOKEN, client_cert=False, timeout=1))
        emit_agent_run(_exporter(protocol, h, pki, TOKEN, ca=pki.other_ca.path, timeout=1))
        assert h.svc.engine.open_traces() == 1  # no client cert / server not trusted
        assert h.release() == 1
        assert h.svc.store.get(trace_id) is not None
    assert TOKEN not in caplog.text and "not-the-token" not in caplog.text


def test_otel_exporter_otlp_headers_env_carries_the_token(
        tmp_path: Path, pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Bearer {TOKEN}")
    with _secure(tmp_path, pki) as h:
        emit_agent_run(_http_exporter(h, pki, None))
        assert h.svc.grpc is not None
        emit_agent_run(GrpcExp(endpoint=f"localhost:{h.svc.grpc.port}",
                               credentials=grpc.ssl_channel_credentials(
                                   pki.ca.path.read_bytes(), pki.client.key.read_bytes(),
                                   pki.client.cert.read_bytes()), timeout=5))
        assert h.svc.engine.open_traces() == 2
        assert h.sample("otel_eval_receiver_spans_accepted_total", protocol="grpc") == 3


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_certificate_is_reloaded_when_the_files_change(tmp_path: Path, pki: Pki,
                                                       protocol: str) -> None:
    with _secure(tmp_path, pki) as h:
        emit_agent_run(_exporter(protocol, h, pki, TOKEN, ca=pki.other_ca.path, timeout=1))
        assert h.svc.engine.open_traces() == 0  # served by CA one: not trusted
        pki.other_ca.issue("server", server=True, to=pki.server)  # rotate in place
        emit_agent_run(_exporter(protocol, h, pki, TOKEN, ca=pki.other_ca.path))
        assert h.svc.engine.open_traces() == 1
        emit_agent_run(_exporter(protocol, h, pki, TOKEN, timeout=1))  # old CA: no match
        assert h.svc.engine.open_traces() == 1
        pki.server.key.write_text("broken")  # a bad rotation keeps the current certificate
        emit_agent_run(_exporter(protocol, h, pki, TOKEN, ca=pki.other_ca.path))
        assert h.svc.engine.open_traces() == 2


def _admin(h: Harness, pki: Pki, path: str, token: str | None = None,
           body: dict[str, Any] | None = None) -> tuple[int, Any]:
    ctx = ssl.create_default_context(cafile=str(pki.ca.path))
    req = urllib.request.Request(
        f"https://localhost:{h.svc.admin.port}{path}", method="POST" if body else "GET",
        data=json.dumps(body).encode() if body else None,
        headers={"Content-Type": "application/json",
                 **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_admin_read_and_write_tokens_over_tls(tmp_path: Path, pki: Pki) -> None:
    with _secure(tmp_path, pki) as h:
        trace_id = emit_agent_run(_grpc_exporter(h, pki, TOKEN))
        h.release()
        for public in ("/metrics", "/healthz", "/readyz"):
            assert _admin(h, pki, public)[0] == 200
        assert _admin(h, pki, "/v1/evaluations")[0] == 401
        assert _admin(h, pki, "/v1/evaluations", "guess")[0] == 401
        assert _admin(h, pki, "/v1/evaluations", READ)[0] == 200
        assert _admin(h, pki, f"/v1/evaluations/{trace_id}", WRITE)[0] == 200
        feedback = {"trace_id": trace_id, "outcome": "success"}
        assert _admin(h, pki, "/v1/feedback", None, feedback)[0] == 401
        assert _admin(h, pki, "/v1/feedback", READ, feedback)[0] == 403
        code, body = _admin(h, pki, "/v1/feedback", WRITE, feedback)
        assert code == 200 and json.loads(body)["verdict"]["outcome"] == "success"
        assert h.sample("otel_eval_receiver_requests_refused_total", protocol="admin",
                        reason="forbidden") == 1
        assert h.sample("otel_eval_receiver_requests_refused_total", protocol="admin",
                        reason="unauthenticated") == 3
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP to TLS
            urllib.request.urlopen(f"http://127.0.0.1:{h.svc.admin.port}/healthz", timeout=5)


def test_public_paths_are_configurable(tmp_path: Path, pki: Pki) -> None:
    with _secure(tmp_path, pki, **{"admin.public_paths": ["/healthz"]}) as h:
        assert _admin(h, pki, "/healthz")[0] == 200
        assert _admin(h, pki, "/metrics")[0] == 401
        assert _admin(h, pki, "/metrics", READ)[0] == 200


def _config(**changes: Any) -> Config:
    return replace(Config(), **{"receiver.grpc_endpoint": "127.0.0.1:0",
                                "receiver.http_endpoint": "127.0.0.1:0",
                                "admin.endpoint": "127.0.0.1:0", "store.path": ":memory:",
                                **changes})


@pytest.mark.parametrize("key", ["receiver.grpc_endpoint", "receiver.http_endpoint",
                                 "admin.endpoint"])
def test_non_loopback_without_tls_and_auth_is_refused(key: str, pki: Pki) -> None:
    with pytest.raises(ConfigError, match="allow_insecure_non_loopback") as e:
        Service(_config(**{key: "0.0.0.0:0"}))
    assert key in str(e.value) and "TLS and authentication" in str(e.value)
    section = key.split(".")[0]
    Service(_config(**{key: "0.0.0.0:0", f"{section}.allow_insecure_non_loopback": True}))
    tokens = ({"receiver.bearer_tokens": {"a": TOKEN}} if section == "receiver"
              else {"admin.write_tokens": {"a": TOKEN}})
    with pytest.raises(ConfigError, match="without TLS;"):
        Service(_config(**{key: "0.0.0.0:0"}, **tokens))
    Service(_config(**{key: "0.0.0.0:0", f"{section}.tls": pki.tls()}, **tokens))


def test_loopback_forms_are_recognised() -> None:
    assert all(map(security.is_loopback, ["localhost", "127.0.0.1", "127.8.0.1", "::1"]))
    assert not any(map(security.is_loopback, ["0.0.0.0", "::", "10.0.0.1", "example.com", ""]))


def test_tokens_compare_in_constant_time_against_every_token(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes] = []
    real = security.hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append(b)
        return real(a, b)

    monkeypatch.setattr(security.hmac, "compare_digest", counting)
    auth = BearerAuth({"a": "first", "b": "second", "c": "third"})
    assert auth.identify("Bearer first") == "a"
    assert len(calls) == 3  # no early exit on the match
    assert auth.identify("bearer  second ") == "b"
    assert auth.identify("Basic first") is None and auth.identify(None) is None
    assert auth.identify("Bearer \udcff") is None
    assert BearerAuth({}).identify(None) == ""  # off: everyone is the anonymous sender
    with pytest.raises(ValueError, match="empty bearer token"):
        BearerAuth({"a": ""})


def test_tokens_stay_out_of_repr_and_the_config_reference(tmp_path: Path) -> None:
    from otel_eval.app.configdoc import reference
    cfg = _config(**{"receiver.bearer_tokens": {"agents": TOKEN},
                     "admin.write_tokens": {"w": WRITE}})
    assert TOKEN not in repr(cfg) and WRITE not in repr(cfg)
    text = reference(cfg)
    assert TOKEN not in text and WRITE not in text and "agents" in text



def test_every_secret_stays_out_of_the_printed_configuration() -> None:
    # `otel-eval config --config FILE` printed the Grafana token, the Kafka SASL password
    # and the PostgreSQL URL's password in clear (to a terminal, a CI log, an issue).
    from otel_eval.app.configdoc import reference
    cfg = _config(**{"issues.grafana.token": "glsa_" + "g" * 32,
                     "kafka.security.sasl_password": "sasl-s3cret",
                     "store.url": "postgresql://otel:pg-s3cret@db:5432/evals"})
    text = reference(cfg)
    for secret in ("glsa_" + "g" * 32, "sasl-s3cret", "pg-s3cret"):
        assert secret not in text and secret not in repr(cfg)
    assert "postgresql://otel:***@db:5432/evals" in text
    assert "token: <redacted>" in text and "sasl_password: <redacted>" in text
    assert "token: ''" in reference(Config())  # unset is shown unset


def test_the_client_keys_password_stays_out_of_the_printed_store_url() -> None:
    # libpq's sslpassword (the passphrase of the client certificate's key, sslkey) may be in
    # the URL as password may: the store's location (logs, /readyz, the printed
    # configuration) showed it in clear
    from otel_eval.app.configdoc import reference
    from otel_eval.store.base import redact_url
    url = ("postgresql://otel@db:5432/evals?sslmode=verify-full&sslkey=/k.pem"
           "&sslpassword=key-s3cret&password=pg-s3cret")
    shown = redact_url(url)
    assert "key-s3cret" not in shown and "pg-s3cret" not in shown
    assert shown == ("postgresql://otel@db:5432/evals?sslmode=verify-full&sslkey=/k.pem"
                     "&sslpassword=***&password=***")
    assert "key-s3cret" not in reference(_config(**{"store.url": url}))


def test_tokens_and_certificates_come_from_the_environment(tmp_path: Path, pki: Pki) -> None:
    from otel_eval.app.config import load_config
    path = tmp_path / "c.yaml"
    path.write_text("receiver:\n  bearer_tokens: {agents: '${OTLP_TOKEN}'}\n"
                    "  tls: {cert_file: '${CERTS}/one-server.pem', "
                    "key_file: '${CERTS}/one-server.key'}\n")
    cfg = load_config(path, environ={"OTLP_TOKEN": TOKEN, "CERTS": str(tmp_path)})
    assert cfg.receiver.bearer_tokens == {"agents": TOKEN}
    assert cfg.receiver.tls.cert_file == str(pki.server.cert)
    with pytest.raises(ConfigError, match="OTLP_TOKEN is not set"):
        load_config(path, environ={"CERTS": str(tmp_path)})


def test_an_unreadable_tls_file_is_logged_once_not_per_connection(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Each new connection checks the files: while one could not be read, every connection
    (anyone's who can connect) wrote an error line. Once when it goes, once when it is back."""
    ca = TestCA(tmp_path, "one")
    server = ca.issue("server", server=True)
    files = security.TlsFiles(TlsServerConfig(cert_file=str(server.cert),
                                              key_file=str(server.key)), "receiver.tls")
    kept = files.context()
    pem = server.cert.read_bytes()
    server.cert.unlink()
    with caplog.at_level(logging.INFO, logger=security.__name__):
        for _ in range(50):
            assert files.context() is kept  # the current certificate stays
        server.cert.write_bytes(pem)
        files.context()
    unreadable = [r for r in caplog.records if "unreadable" in r.getMessage()]
    assert len(unreadable) == 1 and unreadable[0].levelno == logging.ERROR
    assert sum("readable again" in r.getMessage() for r in caplog.records) == 1
