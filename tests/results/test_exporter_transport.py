"""The exporters' transport, as the OTel SDK's and the collector's OTLP exporters: TLS with a
private CA and a client certificate, headers (a bearer token), gzip, and throttling answered
as the OTLP specification says (RESOURCE_EXHAUSTED retried only with RetryInfo, after its
delay). Against real gRPC servers on port 0."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from results_sample import evaluation, trace
from support.otlp_capture import Capture
from support.poll import poll
from support.tls_certs import Pair, TestCA

from otel_eval.base import model
from otel_eval.base.configcheck import StartupError
from otel_eval.base.tlsfiles import TlsClientConfig
from otel_eval.outputs.config import ExportConfig
from otel_eval.outputs.events import EvaluationEvents
from otel_eval.outputs.forward import Forwarder
from otel_eval.telemetry.metrics import Metrics

TOKEN = "s3cret-token"


def _value(m: Metrics, name: str, **labels: str) -> float:
    return m.registry.get_sample_value(name, labels) or 0.0


def _dropped(m: Metrics, reason: str) -> float:
    return _value(m, "otel_eval_sink_dropped_total", sink="forward", reason=reason)


def _config(port: int, **kw: Any) -> ExportConfig:
    kw = {"initial_backoff_s": 0.01, "max_backoff_s": 0.05, "timeout_s": 5.0, **kw}
    return ExportConfig(forward_endpoint=f"127.0.0.1:{port}", **kw)


def _forward_once(cfg: ExportConfig, m: Metrics, t: model.Trace | None = None) -> None:
    fwd = Forwarder(cfg, m)
    fwd.start()
    fwd.export(t or trace(), evaluation())
    fwd.shutdown(10.0)


@pytest.fixture
def pki(tmp_path: Path) -> tuple[TestCA, Pair, Pair]:
    ca = TestCA(tmp_path)
    return ca, ca.issue("server", server=True), ca.issue("exporter", server=False)


@pytest.fixture
def secure(pki: tuple[TestCA, Pair, Pair]) -> Iterator[Capture]:
    """TLS with the test CA's certificate, client certificates required, a bearer token."""
    ca, server, _ = pki
    with Capture(token=TOKEN, tls=(server.cert, server.key), client_ca=ca.path) as ds:
        yield ds


def _tls(pki: tuple[TestCA, Pair, Pair]) -> TlsClientConfig:
    ca, _, client = pki
    return TlsClientConfig(ca_file=str(ca.path), cert_file=str(client.cert),
                           key_file=str(client.key))


def test_delivers_over_mtls_with_the_token_from_headers(
        secure: Capture, pki: tuple[TestCA, Pair, Pair]) -> None:
    m = Metrics()
    _forward_once(_config(secure.port, insecure=False, tls=_tls(pki),
                          headers={"Authorization": f"Bearer {TOKEN}", "X-Tenant": "acme"}), m)
    assert len(secure.traces) == 1 and secure.unauthenticated == 0
    assert secure.metadata[0]["x-tenant"] == "acme"
    assert _value(m, "otel_eval_forward_spans_sent_total") == 3


def test_without_the_token_the_batch_is_rejected_not_retried(
        secure: Capture, pki: tuple[TestCA, Pair, Pair]) -> None:
    m = Metrics()
    _forward_once(_config(secure.port, insecure=False, tls=_tls(pki)), m)
    assert secure.traces == [] and secure.unauthenticated == 1
    assert _dropped(m, "rejected") == 3


def test_an_unknown_ca_never_delivers(secure: Capture, pki: tuple[TestCA, Pair, Pair],
                                      tmp_path: Path) -> None:
    """A CA that did not sign the server's certificate: the handshake fails (UNAVAILABLE),
    retried until max_retry_s, nothing (not even the token) reaches the server."""
    (tmp_path / "other").mkdir()
    other = TestCA(tmp_path / "other", name="other")
    tls = TlsClientConfig(ca_file=str(other.path), cert_file=str(pki[2].cert),
                          key_file=str(pki[2].key))
    m = Metrics()
    _forward_once(_config(secure.port, insecure=False, tls=tls, max_retry_s=0.3,
                          headers={"authorization": f"Bearer {TOKEN}"}), m)
    assert secure.traces == [] and secure.metadata == []
    assert _dropped(m, "retries_exhausted") == 3


def test_a_bad_tls_file_stops_start_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    fwd = Forwarder(_config(1, insecure=False, tls=TlsClientConfig(ca_file=str(bad))),
                    Metrics())
    with pytest.raises(StartupError, match=r"export \(forward\): TLS \(ca_file .*ca\.pem\)"):
        fwd.start()
    fwd.shutdown(0.1)


def test_throttled_with_retry_info_waits_the_delay_given(downstream: Capture) -> None:
    """RetryInfo's 0.4 s wins over the schedule (at most 0.05 s here): the one wait before
    the retry is the server's delay, waited to its end (not cut short by the shutdown)."""
    downstream.fail_next = [(grpc.StatusCode.RESOURCE_EXHAUSTED, 0.4)]
    m = Metrics()
    fwd = Forwarder(_config(downstream.port), m)
    waits: list[tuple[float, bool]] = []
    wait = fwd._sender._wait

    def recorded(delay: float) -> bool:  # the sender's own wait, observed
        waits.append((delay, done := wait(delay)))
        return done

    fwd._sender._wait = recorded  # type: ignore[method-assign]
    fwd.start()
    fwd.export(trace(), evaluation())
    fwd.shutdown(10.0)
    assert len(downstream.traces) == 1 and downstream.failed == [
        grpc.StatusCode.RESOURCE_EXHAUSTED]
    assert waits == [(0.4, True)]
    assert _value(m, "otel_eval_forward_spans_sent_total") == 3


@pytest.mark.parametrize("code", [grpc.StatusCode.CANCELLED, grpc.StatusCode.OUT_OF_RANGE,
                                  grpc.StatusCode.DATA_LOSS])
def test_every_code_the_otlp_specification_calls_retryable_is_retried(
        downstream: Capture, code: grpc.StatusCode) -> None:
    """OTLP/gRPC failures table: CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE,
    UNAVAILABLE and DATA_LOSS are retryable (as the SDK's and the collector's exporters
    retry them); dropped at once, the spans would be lost to a transient failure."""
    downstream.fail_next = [code]
    m = Metrics()
    _forward_once(_config(downstream.port), m)
    assert downstream.failed == [code] and len(downstream.traces) == 1
    assert _dropped(m, "rejected") == 0
    assert _value(m, "otel_eval_forward_spans_sent_total") == 3


def test_throttled_without_retry_info_is_not_retried(downstream: Capture) -> None:
    downstream.fail_next = [grpc.StatusCode.RESOURCE_EXHAUSTED]
    m = Metrics()
    _forward_once(_config(downstream.port), m)
    assert downstream.failed == [grpc.StatusCode.RESOURCE_EXHAUSTED]
    assert downstream.traces == [] and _dropped(m, "rejected") == 3


def test_a_retry_info_delay_past_max_retry_gives_up_at_once(downstream: Capture) -> None:
    downstream.fail_next = [(grpc.StatusCode.RESOURCE_EXHAUSTED, 30.0)]
    m = Metrics()
    _forward_once(_config(downstream.port, max_retry_s=1.0), m)
    assert downstream.traces == [] and _dropped(m, "retries_exhausted") == 3


def test_unavailable_with_retry_info_waits_the_delay_given(downstream: Capture) -> None:
    """OTLP throttling: the server answers UNAVAILABLE or RESOURCE_EXHAUSTED with RetryInfo,
    and the client waits the delay it gives (the collector's exporter too): a 30 s delay
    past max_retry_s gives up at once, never retried on the (0.01 s) schedule."""
    downstream.fail_next = [(grpc.StatusCode.UNAVAILABLE, 30.0)]
    m = Metrics()
    _forward_once(_config(downstream.port, max_retry_s=1.0), m)
    assert downstream.failed == [grpc.StatusCode.UNAVAILABLE]
    assert downstream.traces == [] and _dropped(m, "retries_exhausted") == 3


class _CountingProxy:
    """TCP proxy on port 0 counting the bytes the client sends."""

    def __init__(self, target_port: int) -> None:
        self.sent = 0
        self._target = target_port
        self._lock = threading.Lock()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._target))
            for a, b, count in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pipe, args=(a, b, count), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, count: bool) -> None:
        try:
            while data := src.recv(65536):
                if count:
                    with self._lock:
                        self.sent += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                s.close()

    def close(self) -> None:
        self._sock.close()


def _bulky_trace() -> model.Trace:
    t = trace()
    for s in t.spans:
        s.attributes["gen_ai.output.messages"] = "the same words again " * 2000
    return t


def test_gzip_compresses_what_goes_on_the_wire(downstream: Capture) -> None:
    sizes = {}
    for compression in ("none", "gzip"):
        proxy = _CountingProxy(downstream.port)
        try:
            _forward_once(_config(proxy.port, compression=compression), Metrics(),
                          _bulky_trace())
        finally:
            proxy.close()
        sizes[compression] = proxy.sent
    assert len(downstream.traces) == 2
    assert downstream.traces[0] == downstream.traces[1]  # the same request, decompressed
    assert sizes["none"] > 120_000 and sizes["gzip"] < sizes["none"] / 10, sizes


def test_events_carry_headers_too(downstream: Capture) -> None:
    events = EvaluationEvents(ExportConfig(events_endpoint=f"127.0.0.1:{downstream.port}",
                                           headers={"authorization": "Bearer e"}), Metrics())
    events.start()
    events.export(trace(), evaluation())
    events.shutdown(10.0)
    assert downstream.metadata[0]["authorization"] == "Bearer e"


def test_a_rotated_ca_file_is_used_without_a_restart(
        secure: Capture, pki: tuple[TestCA, Pair, Pair], tmp_path: Path) -> None:
    """The exporter starts with the wrong CA in its ca_file (nothing delivered); the file is
    replaced by the right CA: the next batch goes through on a new channel."""
    (tmp_path / "other").mkdir()
    ca_file = tmp_path / "exporter-ca.pem"
    ca_file.write_bytes(TestCA(tmp_path / "other", name="other").path.read_bytes())
    tls = TlsClientConfig(ca_file=str(ca_file), cert_file=str(pki[2].cert),
                          key_file=str(pki[2].key))
    m = Metrics()
    fwd = Forwarder(_config(secure.port, insecure=False, tls=tls, max_retry_s=0.3,
                            headers={"authorization": f"Bearer {TOKEN}"}), m)
    fwd.start()
    try:
        fwd.export(trace(), evaluation())
        poll(lambda: _dropped(m, "retries_exhausted") == 3, "the first batch given up",
             timeout_s=10)
        assert secure.traces == []
        ca_file.write_bytes(pki[0].path.read_bytes())  # rotated
        fwd.export(trace(), evaluation())
        secure.wait_for(lambda ds: len(ds.traces) == 1)
    finally:
        fwd.shutdown(5.0)
    assert _value(m, "otel_eval_forward_spans_sent_total") == 3
