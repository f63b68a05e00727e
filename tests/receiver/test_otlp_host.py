"""DNS rebinding against the OTLP/HTTP receiver: a page whose name was rebound to 127.0.0.1
posts same-origin (no CORS preflight stops it), so a loopback listener without tokens, which
a local sender names by ``localhost`` or an address, refuses any other ``Host`` (421, counted
as ``forbidden``) before reading the body. With tokens, or beyond loopback, the Host is the
sender's business."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from support.harness import Harness, emit_agent_run, running_service
from test_admin_browser import _send


def _post(h: Harness, host: str) -> tuple[int, bytes]:
    """An empty JSON export to the receiver, naming it ``host``."""
    return _send(int(urlsplit(h.http_url).port or 0), "POST", "/v1/traces", b"{}", Host=host,
                 Content_Type="application/json")


def test_a_loopback_listener_without_tokens_refuses_a_foreign_host(tmp_path: Path) -> None:
    with running_service(tmp_path) as h:
        port = urlsplit(h.http_url).port
        for host in ("attacker.example", f"attacker.example:{port}", "127.0.0.1.nip.io"):
            status, body = _post(h, host)
            assert status == 421 and b"not served here" in body, (host, status, body)
        assert h.sample("otel_eval_receiver_requests_refused_total", protocol="http",
                        reason="forbidden") == 3
        for host in ("localhost", f"localhost:{port}", f"127.0.0.1:{port}", "[::1]:4318"):
            assert _post(h, host)[0] == 200, host
        exporter = OTLPSpanExporter(endpoint=h.http_url, timeout=10)  # the SDK's own Host
        emit_agent_run(exporter)
        exporter.shutdown()
        assert h.sample("otel_eval_receiver_spans_received_total", protocol="http") > 0


@pytest.mark.parametrize("changes", [
    {"receiver.http_endpoint": "0.0.0.0:0", "receiver.allow_insecure_non_loopback": True},
    {"receiver.bearer_tokens": {"agents": "t" * 32}}], ids=["beyond-loopback", "tokens"])
def test_beyond_loopback_or_with_tokens_the_host_is_not_checked(
        tmp_path: Path, changes: dict[str, object]) -> None:
    with running_service(tmp_path, **changes) as h:
        status, body = _post(h, "otel-eval.monitoring.svc:4318")
        assert status in (200, 401), (status, body)
        assert h.sample("otel_eval_receiver_requests_refused_total", protocol="http",
                        reason="forbidden") == 0
