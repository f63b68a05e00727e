"""A real Prometheus scrapes otel-eval metrics; every dashboard and alert query runs on it.

Today the scraped process is ``metrics_harness`` (a ``Metrics`` fed with hand-built
evaluations, served through ``metrics.render``). To switch to the real service: start
``otel-eval serve --grpc-endpoint 127.0.0.1:G --http-endpoint 127.0.0.1:H
--admin-endpoint 127.0.0.1:P --store <tmp>`` (free ports), scrape 127.0.0.1:P instead of the
harness server, and replace ``feed_round`` by OTLP exports of
looping / non-terminating / tool-error traces from tests/data (the ingest-only series
such as throttles, sink drops and judge failures then need their own triggers).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from grafana_files import PROMETHEUS_YML, RULES, alert_rules, panel_queries
from metrics_harness import CLEAN, LOOPY, feed_round, serve

from otel_eval.metrics import Metrics

pytestmark = pytest.mark.slow
TIMEOUT_S = 90.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Prometheus:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:  # 400 bad_data carries the parse error as JSON
            return json.loads(e.read())

    def query(self, expr: str) -> dict[str, Any]:
        out: dict[str, Any] = self.get("/api/v1/query", query=expr)
        return out


def _poll(what: str, condition: Any, between: Any = None) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        if between is not None:
            between()
        time.sleep(0.25)  # poll interval (the condition is the wait, not the sleep)


@pytest.fixture
def scraped(tmp_path: Path) -> Iterator[tuple[Prometheus, Metrics]]:
    exe = shutil.which("prometheus")
    assert exe, "prometheus missing: apt-get install -y prometheus (.ci/run installs it)"
    metrics = Metrics()
    target = serve(metrics)
    config = yaml.safe_load(PROMETHEUS_YML.read_text())  # the shipped config, sped up
    config["global"] = {"scrape_interval": "1s", "scrape_timeout": "1s",
                        "evaluation_interval": "1s"}
    config["rule_files"] = [str(RULES)]
    config["scrape_configs"][0]["static_configs"] = [
        {"targets": [f"127.0.0.1:{target.server_address[1]}"]}]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [exe, f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
         "--enable-feature=exemplar-storage"], stdout=log, stderr=subprocess.STDOUT)
    prom = Prometheus(port)
    try:
        def up() -> bool:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
            try:
                r = prom.query("up")
            except OSError:
                return False
            return any(s["value"][1] == "1" for s in r.get("data", {}).get("result", []))

        _poll("Prometheus to scrape the target", up)
        yield prom, metrics
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        target.shutdown()
        target.server_close()


def _has_data(r: dict[str, Any]) -> bool:
    return r.get("status") == "success" and bool(r["data"]["result"])


def test_every_panel_and_alert_query_returns_data(
        scraped: tuple[Prometheus, Metrics]) -> None:
    prom, metrics = scraped
    queries = panel_queries() + [(r["alert"], r["expr"]) for r in alert_rules()]
    rounds = iter(range(10_000))
    fed: list[str] = []
    pending = dict(queries)

    def all_answer() -> bool:
        for name, expr in list(pending.items()):
            r = prom.query(expr)
            assert r["status"] == "success", (name, expr, r)  # parses and evaluates
            if _has_data(r):
                del pending[name]
        return not pending

    # Traffic keeps flowing while we wait, as it would from agents: each poll adds a round.
    _poll("every query to return data", all_answer,
          lambda: fed.extend(feed_round(metrics, next(rounds))))

    loop_expr = next(r["expr"] for r in alert_rules() if r["alert"] == "OtelEvalLoopRateHigh")
    firing = {s["metric"]["agent"] for s in prom.query(loop_expr)["data"]["result"]}
    assert firing == {LOOPY}, firing  # the loop-heavy agent fires, the clean one does not
    ratio = loop_expr.split(") > 0.10")[0].strip().lstrip("(")
    clean = [s for s in prom.query(ratio)["data"]["result"] if s["metric"]["agent"] == CLEAN]
    assert clean and float(clean[0]["value"][1]) < 0.10  # evaluated, below the threshold

    now = time.time()
    ex = prom.get("/api/v1/query_exemplars", query="otel_eval_trace_duration_seconds_bucket",
                  start=str(now - 600), end=str(now + 60))
    trace_ids = {e["labels"]["trace_id"] for s in ex["data"] for e in s["exemplars"]}
    assert trace_ids and trace_ids <= set(fed)  # exemplars carry the evaluated trace ids

    # A query that does not parse is reported as such (so "success" above means parsed).
    r = prom.query("sum by (agent (rate(otel_eval_traces_completed_total[1m]))")
    assert r["status"] == "error" and r["errorType"] == "bad_data"
