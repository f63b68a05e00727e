"""The chart's transport security (issue 11): TLS and tokens from Secrets, the explicit
allow flag when they are missing, a NetworkPolicy, probes and scrapes that follow TLS; and the
image refusing plain text on 0.0.0.0 unless told otherwise. Rendered with the real helm."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from deploy_files import (
    CHART,
    NAMESPACE,
    Helm,
    docs_of_kind,
    entrypoint_argv,
    main_container,
    one,
    pod_config,
    pod_spec,
)
from support.ports import free_port
from test_dockerfile import _instructions
from test_helm import _validate

from otel_eval.app.service import check_exposure
from otel_eval.receive.security import served_host

SECURED = ("--set", "security.tls.secretName=otel-eval-tls",
           "--set", "security.tls.clientAuth=true",
           "--set", "security.receiverToken.secretName=otlp-token",
           "--set", "security.adminReadToken.secretName=admin-read",
           "--set", "security.adminWriteToken.secretName=admin-write",
           "--set", "security.allowInsecureNonLoopback=false",
           "--set", "serviceMonitor.enabled=true")


def test_default_release_is_explicitly_insecure_behind_a_network_policy(
        helm: Helm, tmp_path: Path) -> None:
    docs = helm.template()
    cfg = pod_config(docs, tmp_path)
    assert cfg.receiver.allow_insecure_non_loopback and cfg.admin.allow_insecure_non_loopback
    check_exposure(cfg)  # the pod starts
    policy = one(docs, "NetworkPolicy")
    _validate(policy)
    ports = {p["name"] for p in main_container(docs)["ports"]}
    allowed = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert allowed == ports == {"otlp-grpc", "otlp-http", "admin"}
    selector = policy["spec"]["podSelector"]["matchLabels"]
    pod_labels = one(docs, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
    assert all(rule["from"] == [{"podSelector": {}}] for rule in policy["spec"]["ingress"])



def test_without_admin_tokens_the_services_names_are_allowed_hosts(
        helm: Helm, tmp_path: Path) -> None:
    """The admin port without tokens serves only localhost, addresses and admin.allowed_hosts
    as Host (DNS rebinding): an in-cluster client calling the Service by name would get 421."""
    services = [d["metadata"]["name"] for d in docs_of_kind(helm.template(), "Service")]
    cfg = pod_config(helm.template(), tmp_path)
    for svc in services:
        for name in (svc, f"{svc}.{NAMESPACE}", f"{svc}.{NAMESPACE}.svc",
                     f"{svc}.{NAMESPACE}.svc.cluster.local"):
            assert name in cfg.admin.allowed_hosts
    extra = helm.template("--set", "config.admin.allowed_hosts={otel-eval.example.com}")
    assert "otel-eval.example.com" in pod_config(extra, tmp_path).admin.allowed_hosts
    assert pod_config(helm.template(*SECURED), tmp_path).admin.allowed_hosts == []


def test_without_admin_tokens_each_pods_own_name_is_an_allowed_host(
        helm: Helm, tmp_path: Path) -> None:
    """The headless Service gives each evaluator pod a stable DNS name (<pod>.<headless>), to
    read one pod's /v1/evaluations (each SQLite pod holds only its own runs): the admin port
    without tokens must serve those names as Host too, not answer 421."""
    docs = helm.template("--set", "replicaCount=3")
    sts = one(docs, "StatefulSet")
    allowed = frozenset(pod_config(docs, tmp_path).admin.allowed_hosts)
    headless = sts["spec"]["serviceName"]
    for ordinal in range(sts["spec"]["replicas"]):
        pod = f"{sts['metadata']['name']}-{ordinal}.{headless}"
        for name in (pod, f"{pod}.{NAMESPACE}", f"{pod}.{NAMESPACE}.svc",
                     f"{pod}.{NAMESPACE}.svc.cluster.local"):
            assert served_host(f"{name}:8888", allowed), name

def test_secured_release_takes_tls_and_tokens_from_secrets(helm: Helm, tmp_path: Path) -> None:
    docs = helm.template(*SECURED)
    for doc in docs:
        if doc["kind"] not in ("ServiceMonitor", "PrometheusRule"):
            _validate(doc)
    cfg = pod_config(docs, tmp_path)
    assert not cfg.receiver.allow_insecure_non_loopback
    assert not cfg.admin.allow_insecure_non_loopback
    check_exposure(cfg)  # starts without the flag: TLS and tokens on every listener
    assert cfg.receiver.bearer_tokens == {"agents": "secret-otel_eval_receiver_token"}
    assert cfg.admin.read_tokens == {"reader": "secret-otel_eval_admin_read_token"}
    assert cfg.admin.write_tokens == {"writer": "secret-otel_eval_admin_write_token"}
    assert cfg.receiver.tls.client_ca_file and not cfg.admin.tls.client_ca_file
    container = main_container(docs)
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"]["name"] for e in container["env"]}
    assert refs["OTEL_EVAL_RECEIVER_TOKEN"] == "otlp-token"
    mount = next(m for m in container["volumeMounts"] if m["name"] == "tls")
    volume = next(v for v in pod_spec(docs)["volumes"] if v["name"] == "tls")
    assert volume["secret"]["secretName"] == "otel-eval-tls" and "subPath" not in mount
    for path in (cfg.receiver.tls.cert_file, cfg.receiver.tls.key_file,
                 cfg.receiver.tls.client_ca_file):
        assert Path(path).parent == Path(mount["mountPath"])
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS"
        assert container[probe]["httpGet"]["path"] in cfg.admin.public_paths
    (endpoint,) = one(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https" and endpoint["path"] in cfg.admin.public_paths
    assert endpoint["tlsConfig"]["ca"]["secret"]["name"] == "otel-eval-tls"
    config_text = one(docs, "ConfigMap")["data"]["config.yaml"]
    assert "secret-" not in config_text  # only ${VAR} placeholders in the ConfigMap


@pytest.mark.parametrize("missing", ["security.tls.secretName", "security.receiverToken.secretName",
                                     "security.adminWriteToken.secretName"])
def test_refusing_insecure_needs_tls_and_tokens(helm: Helm, missing: str) -> None:
    args = list(SECURED)
    if missing == "security.adminWriteToken.secretName":
        args += ["--set", "security.adminReadToken.secretName="]
    args += ["--set", f"{missing}=", "--set", "security.tls.clientAuth=false"]
    r = helm.run("template", "x", str(CHART), *args)
    assert r.returncode != 0 and "allowInsecureNonLoopback" in r.stderr, r.stderr


def test_image_refuses_plain_text_on_all_interfaces_until_allowed(tmp_path: Path) -> None:
    argv = entrypoint_argv()
    assert "--allow-insecure-non-loopback" not in argv  # safe by default
    # the image's defaults with free ports, so that an allowed run could bind; hosts stay 0.0.0.0
    image = Path(argv[argv.index("--config") + 1])
    config = tmp_path / "image.yaml"
    config.write_text(re.sub(r":(4317|4318|8888)\b", ":0", image.read_text()))
    args = [str(config) if a == str(image) else a for a in argv[2:]]
    r = subprocess.run([sys.executable, "-m", "otel_eval.app.cli", "serve", *args,
                        "--store", str(tmp_path / "r.db")], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 2, r.stderr
    assert "allow_insecure_non_loopback" in r.stderr and "0.0.0.0" in r.stderr


def test_image_healthcheck_works_with_and_without_admin_tls(tmp_path: Path) -> None:
    """The HEALTHCHECK's probe against a real admin endpoint, plain and TLS."""
    import json
    import os

    from support.tls_certs import TestCA

    (check,) = _instructions("HEALTHCHECK")
    argv = json.loads(check.split("CMD", 1)[1])
    assert argv[:3] == ["python", "-m", "otel_eval.app.healthcheck"], argv
    ca = TestCA(tmp_path)
    pair = ca.issue("server", server=True)
    for tls in (False, True):
        port = free_port()  # the admin port moved: the probe follows serve's command line
        args = ["--admin-endpoint", f"127.0.0.1:{port}", "--grpc-endpoint", "127.0.0.1:0",
                "--http-endpoint", "127.0.0.1:0", "--store", str(tmp_path / "r.db")]
        config = tmp_path / "c.yaml"
        config.write_text(f"admin:\n  tls: {{cert_file: {pair.cert}, key_file: {pair.key}}}\n"
                          if tls else "{}\n")
        serve = ["otel-eval", "serve", "--config", str(config), *args]
        proc = subprocess.Popen([sys.executable, "-m", "otel_eval.app.cli", *serve[1:]],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env=os.environ.copy())
        cmdline = tmp_path / "cmdline"  # what /proc/1/cmdline holds in the container
        cmdline.write_bytes(b"\0".join(a.encode() for a in serve) + b"\0")
        try:
            for _ in range(300):  # the probe itself polls until the service is up
                r = subprocess.run([sys.executable, *argv[1:], str(cmdline)],
                                   capture_output=True, timeout=30, check=False)
                if r.returncode == 0 or proc.poll() is not None:
                    break
            assert r.returncode == 0, (tls, r.stderr.decode()[-500:])
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_without_admin_tokens_the_dashboards_otel_eval_url_is_an_allowed_host(
        helm: Helm, tmp_path: Path) -> None:
    """serviceMonitor.otelEvalUrl is otel-eval's admin URL as browsers reach it: the
    dashboard's links to the runs go there. Without tokens the admin port must serve that
    Host, not answer every followed link with 421."""
    docs = helm.template("-f", str(CHART / "examples" / "values-monitoring.yaml"))
    (endpoint,) = one(docs, "ServiceMonitor")["spec"]["endpoints"]
    (url,) = [r["replacement"] for r in endpoint["relabelings"]
              if r["targetLabel"] == "otel_eval_url"]
    cfg = pod_config(docs, tmp_path)
    assert not (cfg.admin.read_tokens or cfg.admin.write_tokens)
    assert served_host(urlsplit(url).netloc, frozenset(cfg.admin.allowed_hosts)), url
