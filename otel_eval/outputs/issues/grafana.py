"""Publish issue events as Grafana annotations (``POST /api/annotations``).

One annotation per event (a new issue, or an issue whose share jumped): JSON body with
``dashboardUID`` (and ``panelId`` when configured), ``time`` (epoch milliseconds), ``tags``
and ``text`` (with ``issues.grafana.otel_eval_url``, links to the issue and its example runs
in otel-eval's web view); ``Authorization: Bearer <service-account token>``. Failures are logged and
counted (``GrafanaAnnotator.failures``), never raised: an unreachable Grafana must not stop
the clustering job.

Bounded per run (the job posts while it holds its run): at most ``max_annotations`` events,
the largest issues first, and none more after a connection failure or timeout (Grafana is
down: each would wait ``timeout_s``); those not posted are counted by reason
(``Annotated.skipped``). An HTTP error answer is a failure of that one annotation only.
"""

from __future__ import annotations

import http.client
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any, Literal
from urllib.parse import quote

from otel_eval.outputs.issues.config import GrafanaConfig
from otel_eval.outputs.issues.result import Annotated, IssueEvent

log = logging.getLogger(__name__)


def annotation_body(event: IssueEvent, now: float, config: GrafanaConfig) -> dict[str, Any]:
    issue = event.issue
    # the service of its node (an agent node is a name within its service), when known
    service = next((n[4] for n in issue.nodes if (n[0], n[1]) == (issue.level, issue.node)
                    and n[4]), "")
    where = (f"{issue.level}" + (f" / {issue.node}" if issue.node else "")
             + (f", service {service}" if service else ""))
    if event.kind == "new":
        headline = f"New issue ({where}): {issue.title}"
    else:
        headline = (f"Issue share jumped ({where}): {issue.title}: "
                    f"{(event.previous_share or 0.0):.0%} -> {issue.share:.0%}")
    lines = [headline, issue.description,
             f"issue_id={issue.issue_id} share={issue.share:.3f} runs={issue.traces} "
             f"severity={issue.severity} status={issue.status}"]
    base = config.otel_eval_url.rstrip("/")
    if base:
        quoted = quote(issue.issue_id, safe="")
        lines.append(f"open: {base}/ui/issues#issue-{quoted}")
        lines.append(f"all runs: {base}/ui/issues/{quoted}/runs")
    if issue.exemplars:
        lines.append("exemplar traces: " + ", ".join(
            f"{base}/ui/runs/{t}" if base else t for t in issue.exemplars))
    body: dict[str, Any] = {
        "time": int(now * 1000),
        "tags": [*config.tags, f"event:{event.kind}", f"severity:{issue.severity}",
                 f"level:{issue.level}",
                 *([f"node:{issue.node}"] if issue.node else []),
                 *([f"service:{service}"] if service else []), f"issue:{issue.issue_id}"],
        "text": "\n".join(lines),
    }
    if config.dashboard_uid:
        body["dashboardUID"] = config.dashboard_uid
    if config.panel_id:
        body["panelId"] = config.panel_id
    return body


class GrafanaAnnotator:
    def __init__(self, config: GrafanaConfig) -> None:
        if not config.url:
            raise ValueError("GrafanaAnnotator needs issues.grafana.url")
        self._config = config
        self._endpoint = config.url.rstrip("/") + "/api/annotations"
        self.posted = 0
        self.failures = 0

    def annotate(self, events: Sequence[IssueEvent], now: float) -> Annotated:
        """Post one annotation per event, the largest issues first, at most
        ``max_annotations``, none after a connection failure or timeout; returns how many
        Grafana accepted, how many failed and how many were skipped, by reason."""
        chosen = sorted(events, key=lambda e: -e.issue.share)[:self._config.max_annotations]
        ok = failed = unreachable = 0
        for k, event in enumerate(chosen):
            outcome = self._post(annotation_body(event, now, self._config))
            ok += outcome == "ok"
            failed += outcome != "ok"
            if outcome == "unreachable":
                unreachable = len(chosen) - k - 1
                break
        self.posted += ok
        self.failures += failed
        return Annotated(ok, failed, {"max_annotations": len(events) - len(chosen),
                                      "grafana_unreachable": unreachable})

    def _post(self, body: dict[str, Any]) -> Literal["ok", "failed", "unreachable"]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._config.token:
            headers["Authorization"] = f"Bearer {self._config.token}"
        request = urllib.request.Request(self._endpoint, data=json.dumps(body).encode(),
                                         headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self._config.timeout_s) as response:
                response.read()
                return "ok" if 200 <= response.status < 300 else "failed"
        except urllib.error.HTTPError as e:  # Grafana answered: this annotation only
            log.warning("grafana annotation to %s failed: %s", self._endpoint, e)
            return "failed"
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            # refused, reset, timed out, or no HTTP in reply (BadStatusLine): down
            log.warning("grafana annotation to %s failed: %s; no more this run",
                        self._endpoint, e)
            return "unreachable"
        except ValueError as e:
            log.warning("grafana annotation to %s failed: %s", self._endpoint, e)
            return "failed"
