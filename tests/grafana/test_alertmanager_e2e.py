"""Alerts delivered: the shipped rules, loaded by a real Prometheus that scrapes otel-eval's
metrics, sent through a real Alertmanager running the shipped config (grafana/alertmanager.yml)
to a webhook standing for the pager.

The agents are quiet, as most are: a few runs each, far under the rate alerts' 10 runs in 15
minutes. ``looper`` (service ``shop``) loops in 3 of its 4 runs, ``steady`` never, ``twice``
(service ``desk``) loops twice. The repeated-runs alert pages for ``looper`` alone: one
notification, grouped by (service, agent), carrying the summary and the link to its looping
runs in otel-eval's web view; once ``looper`` stops looping (its runs go on, clean) and its
looping runs leave the window, one resolved notification; nothing for anyone else.

Time: the shipped rules with a minute read as 0.25 s (the hour window is 15 s), Prometheus
scraping and evaluating every 250 ms, Alertmanager notifying a group after 0.5 s and its
changes every 1 s. The rules about otel-eval's own scrape (OtelEvalDown, OtelEvalNotScraped)
are left out: shortened 240 times, two slow scrapes on a busy machine are "down for two
minutes"; the promtool cases test them.
"""

from __future__ import annotations

import itertools
import json
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from alertmanager_harness import Webhook, alertmanager
from grafana_files import RULES
from metrics_harness import run, serve
from prometheus_harness import PROMETHEUS_POLL, prometheus_scraping, shortened_rules
from support.poll import poll

from otel_eval.telemetry.metrics import Metrics

pytestmark = [pytest.mark.slow, pytest.mark.prometheus, pytest.mark.alertmanager]
URL = "https://eval.example:8888"  # Prometheus' external label otel_eval_url
SCRAPE_HEALTH = {"OtelEvalDown", "OtelEvalNotScraped"}


def _rules(tmp_path: Path) -> Path:
    data = yaml.safe_load(shortened_rules(RULES.read_text(), seconds_per_minute=0.25))
    for group in data["groups"]:
        group["rules"] = [r for r in group["rules"] if r.get("alert") not in SCRAPE_HEALTH]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _status(notes: list[tuple[str, dict[str, Any]]], status: str) -> list[dict[str, Any]]:
    return [n for _, n in notes if n["status"] == status]


def test_a_looping_agent_is_paged_once_grouped_and_resolved(tmp_path: Path) -> None:
    metrics = Metrics()
    target = serve(metrics)
    webhook = Webhook()
    started = time.time()
    ids = (f"{i:032x}" for i in itertools.count(1))

    def send(service: str, agent: str, *loops: bool) -> None:
        for loop in loops:
            metrics.evaluation_stored(run(next(ids), agent, service, loop), 0.1, False)

    try:
        with alertmanager(tmp_path, webhook) as am_port, prometheus_scraping(
                tmp_path, target.server_address[1], _rules(tmp_path), interval="250ms",
                alertmanager_port=am_port, otel_eval_url=URL) as prom:
            send("shop", "looper", True, False, True, True)
            send("shop", "steady", False, False, False, False)
            send("desk", "twice", True, False, True, False, False, False)
            poll(lambda: bool(_status(webhook.received(), "firing")),
                 "the looping agent's notification", **PROMETHEUS_POLL)
            assert prom.query("otel_eval_traces_with_loop_total")["data"]["result"]
            send("shop", "looper", False, False)  # it goes on running, without looping
            poll(lambda: bool(_status(webhook.received(), "resolved")),
                 "the resolved notification", **PROMETHEUS_POLL)
    finally:
        target.shutdown()
        target.server_close()
        webhook.close()

    notes = webhook.received()
    (firing,), (resolved,) = _status(notes, "firing"), _status(notes, "resolved")
    # nothing for steady, twice or otel-eval itself; to the warnings' receiver (not the pager's)
    assert {path for path, _ in notes} == {"/team"}, notes
    assert [n["groupLabels"] for _, n in notes] == [{"service": "shop", "agent": "looper"}] * 2
    (alert,) = firing["alerts"]
    assert alert["labels"] == {"alertname": "OtelEvalLoopsRepeated", "service": "shop",
                               "agent": "looper", "severity": "warning"}  # link base dropped
    assert alert["annotations"]["summary"] == "looper (shop) looped in 3 runs within the hour"
    # the hour its count covers, up to the evaluation that fired it (Prometheus' time())
    link = re.fullmatch(re.escape(f"{URL}/ui/?service=shop&agent=looper&detector=loop")
                        + r"&counted_since=(\d+)&counted_until=(\d+)",
                        alert["annotations"]["otel_eval_url"])
    assert link, alert["annotations"]["otel_eval_url"]
    since, until = int(link.group(1)), int(link.group(2))
    assert until - since == 3600 and started - 1 <= until <= time.time() + 1, (since, until)
    assert [a["labels"]["alertname"] for a in resolved["alerts"]] == ["OtelEvalLoopsRepeated"]
    assert resolved["alerts"][0]["status"] == "resolved"


def _post_alerts(port: int, alerts: list[dict[str, str]]) -> None:
    body = json.dumps([{"labels": {**a, "severity": "warning"}} for a in alerts]).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/v2/alerts", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


def _states(port: int) -> dict[tuple[str, ...], str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/alerts", timeout=10) as resp:
        alerts = json.loads(resp.read())
    return {(a["labels"]["alertname"], a["labels"]["service"], a["labels"].get("agent", "")):
            a["status"]["state"] for a in alerts}


@pytest.mark.parametrize(("rate", "repeated"), [
    ("OtelEvalServiceLoopRateHigh", "OtelEvalLoopsRepeated"),
    ("OtelEvalServiceNonTerminationRateHigh", "OtelEvalNonTerminationRepeated")])
def test_an_unnamed_agent_busy_and_failing_is_paged_once(tmp_path: Path, rate: str,
                                                         repeated: str) -> None:
    # Runs no span names (agent "unknown") loop in 20 % of a busy service's traces: the
    # service's rate alert fires (the per-agent one is for named agents), and so does the
    # repeated-runs alert of the unknown agent (3 looping runs in the hour, any agent). As
    # for a named agent (OtelEvalLoopRateHigh inhibits OtelEvalLoopsRepeated), one page: the
    # repeated one is inhibited while the rate one fires. A named quiet agent of the service
    # still pages on its own, as does the unknown agent of another service.
    webhook = Webhook()
    try:
        with alertmanager(tmp_path, webhook) as port:
            _post_alerts(port, [
                {"alertname": rate, "service": "desk"},
                {"alertname": repeated, "service": "desk", "agent": "unknown"},
                {"alertname": repeated, "service": "desk", "agent": "_other"},
                {"alertname": repeated, "service": "desk", "agent": "clerk"},
                {"alertname": repeated, "service": "shop", "agent": "unknown"},
                # a named agent's pair, as shipped: the control that inhibition has run
                {"alertname": rate.replace("Service", ""), "service": "shop", "agent": "looper"},
                {"alertname": repeated, "service": "shop", "agent": "looper"}])
            poll(lambda: _states(port).get((repeated, "shop", "looper")) == "suppressed",
                 "the named agent's repeated alert to be inhibited", **PROMETHEUS_POLL)
            states = _states(port)
    finally:
        webhook.close()
    assert states[(repeated, "desk", "unknown")] == "suppressed", states
    assert states[(repeated, "desk", "_other")] == "suppressed", states
    assert states[(repeated, "desk", "clerk")] == "active", states
    assert states[(repeated, "shop", "unknown")] == "active", states
    assert states[(rate, "desk", "")] == "active", states
