"""``serve``'s issues job clusters what the store holds: a finding quoting a run's error text
(an e-mail address) becomes an issue whose title and description carry the judge's
redaction on ``/v1/issues`` (and so on the web view, the gauges and Grafana)."""

from __future__ import annotations

import json
from pathlib import Path

from support.harness import running_service

from otel_eval.app.config import Config
from otel_eval.app.offline import EvalRun

TRACE = Path(__file__).resolve().parents[1] / "data" / "detectors" / \
    "guide_lucky_recovery.otlp.json"


def _runs(tmp_path: Path, n: int) -> list[Path]:
    """The guide run ``n`` times (new trace ids), its failed edit's error naming a user."""
    doc = json.loads(TRACE.read_text())
    paths = []
    for i in range(n):
        for rs in doc["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    span["traceId"] = f"{i + 1:032x}"
                    if (span.get("status") or {}).get("message"):
                        span["status"]["message"] = f"no account for user{i}@example.com"
        path = tmp_path / f"run{i}.json"
        path.write_text(json.dumps(doc))
        paths.append(path)
    return paths


def test_serve_publishes_issues_redacted(tmp_path: Path) -> None:
    evaluations = list(EvalRun(Config(), [str(p) for p in _runs(tmp_path, 4)]).evaluations())
    assert any("example.com" in f.message for e in evaluations for f in e.findings)
    with running_service(tmp_path) as h:
        h.svc.store.put_many(evaluations)
        assert h.svc.issues is not None and h.svc.issues.run_once() is not None
        published = json.dumps(h.svc.issues.latest_json())
    assert "no account for [EMAIL]" in published
    assert "example.com" not in published
