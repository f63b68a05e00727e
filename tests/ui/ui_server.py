"""A real admin server on a free loopback port over a real store, for the web view tests:
runs evaluated by the offline engine (the guide example, the conformance recordings) or
written by hand (hostile ones), then read through HTTP like a browser would."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from otel_eval.app.admin import AdminApi, AdminConfig, AdminServer
from otel_eval.app.config import Config, replace
from otel_eval.app.offline import EvalRun
from otel_eval.base.results import Evaluation
from otel_eval.evaluate.judge.config import RedactionConfig
from otel_eval.evaluate.judge.redact import Redactor
from otel_eval.store import Store

DATA = Path(__file__).resolve().parents[1] / "data" / "detectors"
GUIDE = DATA / "guide_lucky_recovery.otlp.json"
GUIDE_REFS = DATA / "guide_lucky_recovery.references.jsonl"
GUIDE_ID = "6e0c63257de34c926f9efcd03899a81d"
CRITIQUE = "re-read docs/config.md although its content was already in context"
ISSUES = {"schema": "otel-eval.issues/v1", "generated_at": 1_764_600_000.0, "window_s": 86400.0,
          "embedding": "tfidf", "traces": 40, "critiques": 12, "skipped": 0, "issues": [
              {"issue_id": "iss-loop-1", "level": "node", "node": "docs-fixer",
               "title": "read_file called 2 times in a row with identical arguments",
               "description": "read_file called 2 times in a row with identical arguments",
               "share": 0.25, "trend": 0.05, "critiques": 8, "traces": 10,
               "exemplars": [GUIDE_ID], "agents": ["docs-fixer"], "first_seen": 1_764_500_000.0,
               "new": False},
              {"issue_id": "iss-x", "level": "system", "node": "",
               "title": "<script>window.__pwned='issue'</script>", "description": "x",
               "share": 0.1, "trend": None, "critiques": 2, "traces": 4,
               "exemplars": ["javascript:alert(1)"], "agents": [], "first_seen": 1.0,
               "new": True}]}


def evaluate(paths: list[str], references: str | None = None,
             budgets: dict[str, float] | None = None) -> list[Evaluation]:
    cfg = replace(Config(), **{"detectors.budget_overrides": budgets or {}})
    return list(EvalRun(cfg, paths, references_path=references).evaluations())


@contextmanager
def admin(store: Store, issues: dict[str, Any] | None = None,
          config: AdminConfig | None = None) -> Iterator[str]:
    """The admin endpoint over ``store``; yields its base URL."""
    api = AdminApi(CollectorRegistry(), store.query, store.get, lambda _t, _o: None,
                   lambda: True, lambda: True, issues=lambda: issues,
                   redact=Redactor(RedactionConfig()).redact,
                   trace_url=(config.trace_url if config else ""))
    server = AdminServer("127.0.0.1:0", api, config or AdminConfig(endpoint="127.0.0.1:0"))
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def get(url: str, token: str | None = None, basic: str | None = None,
        ) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if basic:
        request.add_header("Authorization",
                           "Basic " + base64.b64encode(f"me:{basic}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()
