"""Fixtures of the web view tests: one store with the guide example, conformance recordings
and a hostile run, served by a real admin server; one headless Chromium per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hostile import judge, write_trace
from ui_server import GUIDE, GUIDE_ID, GUIDE_REFS, admin, evaluate

from otel_eval.store import Store

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


@pytest.fixture(scope="session")
def ui_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    tmp = tmp_path_factory.mktemp("ui")
    store = Store(str(tmp / "otel-eval.db"))
    [guide] = evaluate([str(GUIDE)], str(GUIDE_REFS), {"steps": 5})
    store.put_many([guide])
    step8 = guide.trajectory.steps[8]
    assert store.put_judge(GUIDE_ID, 0, {"judges": {"combined": {"status": "ok", "critiques": [
        {"dimension": "efficiency", "score": 0.25, "text": CRITIQUE, "span_id": step8.span_id,
         "node": "docs-fixer", "step_index": None}]}},
        "overall": {"status": "ok", "process_score": 0.4, "outcome_score": 1.0}})
    [bad] = evaluate([str(write_trace(tmp / "hostile.json"))])
    store.put_many([bad])
    assert store.put_judge(bad.trace_id, 0, judge(bad.trajectory.steps[2].span_id))
    yield store
    store.close()


@pytest.fixture(scope="session")
def ui_url(ui_store: Store) -> Iterator[str]:
    with admin(ui_store, ISSUES) as url:
        yield url
