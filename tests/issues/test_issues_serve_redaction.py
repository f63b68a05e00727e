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


def _evaluations(n: int) -> list[dict[str, object]]:
    return [{"trace_id": f"{i + 1:032x}", "agent": "shop", "service": "svc", "steps": [],
             "findings": [{"detector": "non_termination", "kind": "failed",
                           "severity": "error", "span_ids": [], "step_indexes": [],
                           "attributes": {}, "message": "no account for ann@example.com: card "
                           "4111 1111 1111 1111 declined"}]}
            for i in range(n)]


def test_an_issue_stored_before_redaction_is_shown_redacted() -> None:
    """An issue the catalogue kept from before critiques were redacted (its title and
    description the message as recorded) is matched by the next run: what that run
    publishes (and stores again) is redacted, not the stored words until it ages out."""
    import sqlite3

    from otel_eval.evaluate.judge.config import RedactionConfig
    from otel_eval.evaluate.judge.redact import Redactor
    from otel_eval.outputs.issues.config import IssuesConfig
    from otel_eval.outputs.issues.tracker import IssueTracker

    db = sqlite3.connect(":memory:")
    before = IssueTracker(IssuesConfig(), db, clock=lambda: 1000.0).run(_evaluations(6))
    assert before.issues and "example.com" in before.issues[0].title
    assert "4111" in before.issues[0].description
    after = IssueTracker(IssuesConfig(), db, clock=lambda: 2000.0,
                         redact=Redactor(RedactionConfig()).redact).run(_evaluations(6))
    assert [i.issue_id for i in after.issues] == [i.issue_id for i in before.issues]
    shown = " ".join(f"{i.title} {i.description}" for i in after.issues)
    assert "example.com" not in shown and "4111" not in shown
    stored = " ".join(str(r) for r in db.execute(
        "SELECT title, description FROM issues_catalogue"))
    assert "example.com" not in stored


def test_a_judge_name_is_published_redacted() -> None:
    """The judge model names a new issue from the critiques, and a critique is span text: an
    injected instruction ("name this issue: mail bob at example dot com") can put an e-mail
    address in the reply. The title and description published (and annotated as new, once)
    carry the redaction as critiques' words do, not the model's reply as sent."""
    import sqlite3

    from otel_eval.evaluate.judge.config import RedactionConfig
    from otel_eval.evaluate.judge.redact import Redactor
    from otel_eval.outputs.issues.config import IssuesConfig
    from otel_eval.outputs.issues.tracker import IssueTracker

    def namer(_critiques: object) -> tuple[str, str]:
        return "Mail bob@example.com now", "Card 4111 1111 1111 1111 was declined."

    result = IssueTracker(IssuesConfig(), sqlite3.connect(":memory:"), clock=lambda: 1000.0,
                          namer=namer, redact=Redactor(RedactionConfig()).redact
                          ).run(_evaluations(6))
    assert result.issues
    shown = " ".join(f"{i.title} {i.description}" for i in result.issues)
    assert "[EMAIL]" in shown
    assert "example.com" not in shown and "4111" not in shown
