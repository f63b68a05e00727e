"""A real Prometheus (Debian's) for the end-to-end tests: the shipped scrape config pointed at
one target on loopback, a rule file, 1 s scrape and evaluation intervals (or shorter), alerts
sent to an Alertmanager when one is given; the shipped rules with their minutes shortened;
and the helpers that start ``otel-eval serve`` and wait on conditions (never on time)."""

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


def shortened_rules(text: str, seconds_per_minute: float = 1) -> str:
    """The rule file ``text`` with every duration in minutes read as ``seconds_per_minute``
    seconds each: range selectors (``[15m]`` -> ``[15s]``; ``[1d]``, a look back far past
    the hour, as its 1,440 minutes), offsets and ``for: 10m`` (-> ``10s``; in milliseconds
    when a minute is less than a second).
    Nothing else changes (thresholds, minimum volumes, labels, annotations), so the test
    runs the shipped alerts, only faster."""
    def seconds(m: re.Match[str], minutes: int = 1) -> str:
        ms = round(int(m.group(2)) * minutes * seconds_per_minute * 1000)
        value = f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"
        return f"{m.group(1)}{value}{m.group(3)}"
    out, ranges = re.subn(r"(\[)(\d+)m(\])", seconds, text)
    out, _ = re.subn(r"(\[)(\d+)d(\])", lambda m: seconds(m, 24 * 60), out)
    out, fors = re.subn(r"^(\s*for: )(\d+)m()$", seconds, out, flags=re.M)
    out, offsets = re.subn(r"(\boffset )(\d+)m(\b)", seconds, out)
    assert ranges and fors and offsets, "the rule file has no [Nm], for: Nm, offset Nm"
    assert not re.search(r"\d+[hdw]\]|for: \d+[hdw]|offset \d+[hdw]", out), \
        "durations in hours or days"
    return out


@contextlib.contextmanager
def prometheus_scraping(tmp_path: Path, target_port: int, rules: Path = RULES, *,
                        interval: str = "1s", alertmanager_port: int | None = None,
                        otel_eval_url: str | None = None) -> Iterator[Prometheus]:
    """A real Prometheus (the shipped config, ``rules``: the shipped rule file unless told,
    scrape and evaluation every ``interval``) scraping the target; its alerts go to the
    Alertmanager on ``alertmanager_port`` as the shipped ``alerting:`` says (to none when not
    given); ``otel_eval_url``: the external label the alerts' links start with."""
    exe = shutil.which("prometheus")
    assert exe, "prometheus missing: apt-get install -y prometheus (.ci/run installs it)"
    config = yaml.safe_load(PROMETHEUS_YML.read_text())
    config["global"].update({"scrape_interval": interval, "scrape_timeout": interval,
                             "evaluation_interval": interval})
    if otel_eval_url is not None:
        config["global"]["external_labels"]["otel_eval_url"] = otel_eval_url
    if alertmanager_port is None:
        config.pop("alerting", None)
    else:
        (manager,) = config["alerting"]["alertmanagers"]
        manager["static_configs"] = [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]
    config["rule_files"] = [str(rules)]
    (static,) = config["scrape_configs"][0]["static_configs"]
    static["targets"] = [f"127.0.0.1:{target_port}"]
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
                    # a rule evaluated before the first scrape finds no otel-eval series:
                    # OtelEvalNotScraped is pending until the next evaluation after it
                    starting = prom.query('ALERTS{alertname="OtelEvalNotScraped"}')
                except OSError:
                    return False
                return (any(s["value"][1] == "1" for s in r.get("data", {}).get("result", []))
                        and starting.get("data", {}).get("result") == [])

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
