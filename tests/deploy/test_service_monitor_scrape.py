"""The chart's ServiceMonitor, scraped as prometheus-operator scrapes it, by a real Prometheus:
the alerts and panels group and route on otel-eval's own ``service`` label (the agent's
service), and that label must survive the scrape.

prometheus-operator gives every target of a ServiceMonitor the target labels ``namespace``,
``service`` (the Kubernetes Service's name), ``pod``, ``container``, ``endpoint`` and ``job``;
a scraped label that collides with a target label is renamed ``exported_<name>`` unless the
endpoint says ``honorLabels: true`` (Prometheus' honor_labels). The scrape job below is that
translation of the rendered ServiceMonitor, pointed at a ``Metrics`` served as the admin port
serves it.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_files import EXAMPLES, NAMESPACE, Helm, docs_of_kind, one
from support.poll import poll
from support.ports import free_port

from otel_eval.base.results import Evaluation, Finding, Verdict
from otel_eval.base.steps import Step, Trajectory
from otel_eval.telemetry.metrics import Metrics, render

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]


def _served(metrics: Metrics) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body, ctype = render(metrics.registry, self.headers.get("Accept"))
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _operator_scrape_job(monitor: dict[str, Any], service: dict[str, Any],
                         target: str) -> dict[str, Any]:
    """The scrape job prometheus-operator generates for the ServiceMonitor's one endpoint, its
    Kubernetes discovery replaced by the target labels it would set on the pod's endpoint."""
    (endpoint,) = monitor["spec"]["endpoints"]
    name = service["metadata"]["name"]
    labels = {"namespace": NAMESPACE, "service": name, "pod": f"{name}-0",
              "container": "otel-eval", "endpoint": endpoint["port"], "job": name}
    relabel = [{"target_label": r["targetLabel"], "replacement": r["replacement"]}
               for r in endpoint.get("relabelings", [])]
    return {"job_name": f"serviceMonitor/{NAMESPACE}/{monitor['metadata']['name']}/0",
            "honor_labels": bool(endpoint.get("honorLabels", False)),
            "metrics_path": endpoint["path"], "scrape_interval": "1s", "scrape_timeout": "1s",
            "static_configs": [{"targets": [target], "labels": labels}],
            "relabel_configs": relabel}


def _query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            result: list[dict[str, Any]] = yaml.safe_load(resp.read())["data"]["result"]
            return result
    except OSError:  # still starting
        return []


def _looping_run(trace_id: str) -> Evaluation:
    steps = [Step(index=0, span_id="a" * 16, parent_span_id=None, kind="tool",
                  name="execute_tool search", tool_name="search")]
    traj = Trajectory(trace_id, "otlp", "complete", steps, service="shop", agent="looper",
                      start_ns=0, end_ns=1_000_000_000)
    return Evaluation(traj, [Finding("loop", "repeated_tool_call", "error", "search x3")],
                      Verdict(False, []))


def test_the_service_monitors_scrape_keeps_the_agents_service_label(
        helm: Helm, tmp_path: Path) -> None:
    """Scraped through the chart's ServiceMonitor, a looping agent of service "shop" is
    service="shop" in Prometheus: the per-agent alerts page (and Alertmanager groups) for it,
    the per-service alerts and the dashboard's $service select it. Without honorLabels the
    label was the Kubernetes Service's name ("otel-eval") on every series, the agent's service
    moved to exported_service."""
    docs = helm.template("-f", str(EXAMPLES / "values-monitoring.yaml"))
    monitor = one(docs, "ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    (service,) = [s for s in docs_of_kind(docs, "Service")
                  if selector.items() <= s["metadata"]["labels"].items()]
    metrics = Metrics()
    for i in range(3):
        metrics.evaluation_stored(_looping_run(f"{i:032x}"), 0.1, False)
    target = _served(metrics)
    port = free_port()
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "scrape_configs": [_operator_scrape_job(
                  monitor, service, f"127.0.0.1:{target.server_address[1]}")]}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    exe = shutil.which("prometheus")
    assert exe, "prometheus missing: apt-get install -y prometheus (scripts/test installs it)"
    with (tmp_path / "prometheus.log").open("w") as log:
        proc = subprocess.Popen(
            [exe, f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        def scraped() -> list[dict[str, Any]]:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
            return _query(port, "otel_eval_traces_with_loop_total")

        (series,) = poll(scraped, "Prometheus to scrape the ServiceMonitor's target",
                         timeout_s=90, interval_s=0.25)
        labels = series["metric"]
        assert (labels["service"], labels["agent"]) == ("shop", "looper"), labels
        assert "exported_service" not in labels, labels
        # the labels of the target that do not collide stay (the pod, the job OtelEvalDown
        # selects)
        assert labels["pod"] == f"{service['metadata']['name']}-0"
        assert labels["job"] == service["metadata"]["name"]
        (up,) = _query(port, "up")
        assert up["metric"]["service"] == service["metadata"]["name"]
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        target.shutdown()
        target.server_close()
