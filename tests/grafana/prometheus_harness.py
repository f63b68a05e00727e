"""A real Prometheus (Debian's) for the end-to-end tests: the shipped scrape config pointed at
one target on loopback, a rule file, 1 s scrape and evaluation intervals; and the helpers
that start ``otel-eval serve`` and wait on conditions (never on time)."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from grafana_files import PROMETHEUS_YML, RULES
from support.poll import poll
from support.ports import free_port

TIMEOUT_S = 90.0
# poll Prometheus and the services it scrapes every 0.25 s (each miss may feed a round)
PROMETHEUS_POLL: dict[str, float] = {"timeout_s": TIMEOUT_S, "interval_s": 0.25}



class Prometheus:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:  # 400 bad_data carries the parse error as JSON
            body = e.read()
            try:
                return json.loads(body)
            except ValueError:  # 503 "Service Unavailable" as text while Prometheus starts
                return {"status": "error", "errorType": str(e.code), "error": body[:200]}

    def query(self, expr: str) -> dict[str, Any]:
        out: dict[str, Any] = self.get("/api/v1/query", query=expr)
        return out


@contextlib.contextmanager
def prometheus_scraping(tmp_path: Path, target_port: int,
                        rules: Path = RULES) -> Iterator[Prometheus]:
    """A real Prometheus (the shipped scrape config, ``rules``: the shipped rule file unless
    told, scrape and evaluation every second) scraping the target."""
    exe = shutil.which("prometheus")
    assert exe, "prometheus missing: apt-get install -y prometheus (.ci/run installs it)"
    config = yaml.safe_load(PROMETHEUS_YML.read_text())
    config["global"] = {"scrape_interval": "1s", "scrape_timeout": "1s",
                        "evaluation_interval": "1s"}
    config["rule_files"] = [str(rules)]
    config["scrape_configs"][0]["static_configs"] = [{"targets": [f"127.0.0.1:{target_port}"]}]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log_path = tmp_path / "prometheus.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [exe, f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
             "--enable-feature=exemplar-storage"], stdout=log, stderr=subprocess.STDOUT)
        prom = Prometheus(port)
        try:
            def up() -> bool:
                assert proc.poll() is None, log_path.read_text()[-3000:]
                try:
                    r = prom.query("up")
                except OSError:
                    return False
                return any(s["value"][1] == "1" for s in r.get("data", {}).get("result", []))

            poll(up, "Prometheus to scrape the target", **PROMETHEUS_POLL)
            yield prom
        finally:
            stop(proc)


def listening(log: Path, ports: dict[str, int],
              wanted: tuple[str, ...] = ("OTLP/HTTP", "admin")) -> bool:
    """Whether serve has logged the ports of ``wanted`` (OTLP/HTTP, OTLP/gRPC, admin), stored
    into ``ports``. serve binds port 0 and logs what it got (a port picked free beforehand
    could be taken by another process while serve still imports)."""
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r"(OTLP/HTTP|OTLP/gRPC|admin) (?:receiver|endpoint) listening on \S+ "
                      r"\(port (\d+)\)", line)
        if m:
            ports[m.group(1)] = int(m.group(2))
    return set(wanted) <= set(ports)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
