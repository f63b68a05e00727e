"""Alerts end to end: the shipped rule file, loaded by a real Prometheus that scrapes a live
``otel-eval serve``, pages for the right agent.

The agent side is the conformance corpus (real instrumentation stacks' recordings), replayed
through the OTel SDK's OTLP/gRPC exporter (``otel_eval.replay``) with fresh trace ids and
times, as three services of one agent each (``weather_agent``):

    clean    pydantic-ai, clean runs              -> no alert
    looping  openinference-openai, loop runs      -> OtelEvalLoopRateHigh{looping, weather_agent}
                                                     and OtelEvalLoopsRepeated{same}
    hanging  openai-v2-spans, clean runs and      -> OtelEvalNonTerminationRateHigh{hanging,
             killed runs (the agent span, the        weather_agent} and ...Repeated{same}: the
             only one naming the agent, unsent)      agent inferred from the service's
                                                     completed runs

The killed runs are released by serve's idle timeout (``assembly.idle_timeout_s``, made short
through serve's config file), never by the test. The rule file is the shipped one with its
minutes read as seconds (``shortened_rules``: windows, offsets and ``for:`` only; thresholds
and minimum volumes as shipped). The test polls ``/api/v1/alerts`` until all four fire, and
at every poll asserts no other alert is pending or firing: each repeated-runs alert fires,
then its agent's rate alert, after which the repeated one is held back.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conformance import hung
from grafana_files import RULES
from prometheus_harness import (
    PROMETHEUS_POLL,
    Prometheus,
    listening,
    poll,
    prometheus_scraping,
    shortened_rules,
    stop,
)

from otel_eval.app.replay import make_exporter, replay
from otel_eval.base.model import Span, SpanEvent, Trace

pytestmark = pytest.mark.slow
AGENT = "weather_agent"
# (service, stack, scenarios cycled through, one per round)
SERVICES = (("clean", "pydantic-ai", ("clean", "distinct", "streaming")),
            ("looping", "openinference-openai", ("loop",)),
            ("hanging", "openai-v2-spans", ("clean", hung.KILLED)))
# each agent pages by its repeated-runs alert (3 runs: first), then by its rate alert, which
# holds the repeated one back for the hour after (the same runs; grouped into one
# notification by Alertmanager: tests/grafana/test_alertmanager_e2e.py)
RATE = {("OtelEvalLoopRateHigh", "looping", AGENT),
        ("OtelEvalNonTerminationRateHigh", "hanging", AGENT)}
EXPECTED = RATE | {("OtelEvalLoopsRepeated", "looping", AGENT),
                   ("OtelEvalNonTerminationRepeated", "hanging", AGENT)}


SCRAPE_HEALTH = {"OtelEvalDown", "OtelEvalNotScraped"}


def _durations_blanked(text: str) -> str:
    return re.sub(r"\[\d+[smd]\]|for: \d+[sm]|offset \d+[sm]", "D", text)


def test_shortened_rules_change_durations_only() -> None:
    text = RULES.read_text()
    short = shortened_rules(text)
    assert "[15s]" in short and "for: 10s" in short and not re.search(r"\d+m\]", short)
    assert "offset 60s" in short and "offset 60m" not in short
    assert _durations_blanked(short) == _durations_blanked(text)


def _templates() -> dict[str, list[Trace]]:
    """Per service, its recordings as traces with the service's name on every resource."""
    out = {}
    for service, stack, scenarios in SERVICES:
        traces = []
        for scenario in scenarios:
            spans, logs = hung.load(stack, scenario)
            assert not logs, "these stacks carry content on spans (the exporter sends spans)"
            for span in spans:
                span.resource = {**span.resource, "service.name": service}
            traces.append(Trace("0" * 32, spans, "complete"))
        out[service] = traces
    return out


def _fresh(template: Trace, now_ns: int) -> Trace:
    """``template`` as a new run: a new trace id, its times moved to end now."""
    trace_id = f"{random.getrandbits(128):032x}"
    shift = now_ns - max(s.end_ns or s.start_ns for s in template.spans)
    spans = [Span(trace_id, s.span_id, s.parent_span_id, s.name, s.start_ns + shift,
                  s.end_ns + shift if s.end_ns else 0, kind=s.kind, status=s.status,
                  status_message=s.status_message, attributes=s.attributes,
                  events=[SpanEvent(e.name, e.time_unix_nano + shift, e.attributes)
                          for e in s.events],
                  resource=s.resource, scope=s.scope) for s in template.spans]
    return Trace(trace_id, spans, "complete")


class Agents:
    """Sends one round of runs per call: one run of each service, in turn through its
    scenarios, over one OTLP/gRPC exporter of the OTel SDK."""

    def __init__(self, grpc_port: int) -> None:
        self.exporter = make_exporter(f"127.0.0.1:{grpc_port}", "grpc")
        self.templates = _templates()
        self.rounds = 0

    def send(self, services: tuple[str, ...] = ("clean", "looping", "hanging")) -> None:
        now = time.time_ns()
        runs = []
        for service in services:
            cycle = self.templates[service]
            runs.append(_fresh(cycle[self.rounds % len(cycle)], now))
        replay(runs, "", exporter=self.exporter)
        self.rounds += 1


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[dict[str, int]]:
    # short release timeouts through serve's own config: a killed run (no root span) is
    # released `incomplete` after 1 s without a new span, a finished one 0.2 s after its root
    (tmp_path / "otel-eval.yaml").write_text(
        "assembly:\n  grace_s: 0.2\n  idle_timeout_s: 1.0\n")
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_eval.app.cli", "serve", "--config",
         str(tmp_path / "otel-eval.yaml"), "--grpc-endpoint", "127.0.0.1:0",
         "--http-endpoint", "127.0.0.1:0", "--admin-endpoint", "127.0.0.1:0",
         "--store", str(tmp_path / "results.db"), "--workers", "2"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        ports: dict[str, int] = {}
        poll(lambda: listening(tmp_path / "serve.log", ports, ("OTLP/gRPC", "admin")),
             "otel-eval serve to listen", **PROMETHEUS_POLL)
        yield ports
    finally:
        stop(proc)
        log.close()


def _evaluations(admin_port: int, **params: str) -> list[dict[str, Any]]:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/v1/evaluations?{query}",
                                timeout=10) as resp:
        out: list[dict[str, Any]] = json.loads(resp.read())["evaluations"]
    return out


def _alerts(prom: Prometheus) -> set[tuple[str, str, str, str]]:
    """(alertname, service, agent, state) of every pending or firing alert."""
    data = prom.get("/api/v1/alerts")["data"]["alerts"]
    return {(a["labels"]["alertname"], a["labels"].get("service", ""),
             a["labels"].get("agent", ""), a["state"]) for a in data}


@pytest.mark.prometheus
def test_the_shipped_alerts_page_for_the_looping_and_the_hanging_agent(
        tmp_path: Path, serve: dict[str, int]) -> None:
    rules = tmp_path / "otel-eval-rules.yaml"
    rules.write_text(shortened_rules(RULES.read_text()))
    agents = Agents(serve["OTLP/gRPC"])
    admin = serve["admin"]
    # the hanging service has completed runs before its first killed one
    agents.send(("hanging",))
    poll(lambda: bool(_evaluations(admin, service="hanging")),
         "the hanging service's first run to be stored", **PROMETHEUS_POLL)
    agents.rounds = 0
    with prometheus_scraping(tmp_path, admin, rules) as prom:
        seen: set[tuple[str, str, str, str]] = set()

        def both_fire() -> bool:
            alerts = _alerts(prom)
            seen.update(alerts)
            # clean traffic and the rest raise nothing; otel-eval's own scrape health may go
            # pending (two scrapes slower than the 1 s interval on a busy machine: "down" in
            # the shortened rules), never fire
            unexpected = {a for a in alerts if a[:3] not in EXPECTED
                          and not (a[0] in SCRAPE_HEALTH and a[3] == "pending")}
            assert not unexpected, unexpected
            fired = {a[:3] for a in seen if a[3] == "firing"}
            return {a[:3] for a in alerts if a[3] == "firing"} == RATE and fired == EXPECTED

        poll(both_fire, "the loop and the non-termination alert to fire", between=agents.send,
             timeout_s=180)
        sources = prom.query('sum by (service, source) (otel_eval_traces_agent_source_total)')
        counted = {(r["metric"]["service"], r["metric"]["source"])
                   for r in sources["data"]["result"]}
        assert ("hanging", "inferred_history") in counted
        assert not {c for c in counted if c[1] == "unknown"}, counted
        # the repeated-runs alerts tell a series born again after a restart by its creation
        # time: serve exposes it beside each counter and this Prometheus stores it as a series
        created = prom.query('otel_eval_traces_with_loop_created{service="looping"}')
        (series,) = created["data"]["result"]
        assert series["metric"]["agent"] == AGENT and float(series["value"][1]) > 0
    killed = _evaluations(admin, service="hanging", status="incomplete")
    assert killed and all(e["agent"] == AGENT for e in killed)
    assert {e["agent_source"] for e in killed} == {"inferred_history"}
    assert {a[:3] for a in seen} == EXPECTED
