"""A store of two copies of the guide run for the outcome form and the calibration page, served
by a real admin server whose ``POST /v1/feedback`` is the service's (``evaluate.feedback``)
and whose ``GET /v1/calibration`` is ``evaluate.calibration.report`` over the same store.

    JUDGED: the guide run (FAIL by its budget), judged: outcome score 0.9 (the judge says it
            succeeded), two critiques on step 8, the judge's tokens and cost
    INFERRED: the same run under another trace id, its agent inferred from the history
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client import CollectorRegistry
from ui_server import GUIDE, GUIDE_ID, GUIDE_REFS, evaluate

from otel_eval.app.admin import AdminApi, AdminConfig, AdminServer
from otel_eval.app.config import Config
from otel_eval.base.results import Evaluation
from otel_eval.evaluate.calibration import report
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.feedback import Feedback
from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics

JUDGED = GUIDE_ID
INFERRED = "7" * 32
CRITIQUES = ("re-read docs/config.md although its content was already in context",
             "the second read added nothing")
JUDGE_TOKENS = (1234, 56)
JUDGE_COST = 0.0042


def _judge(span_id: str) -> dict[str, object]:
    critiques = [{"dimension": "efficiency", "score": score, "text": text, "span_id": span_id,
                  "node": "docs-fixer", "step_index": None}
                 for score, text in zip((0.25, 0.4), CRITIQUES, strict=True)]
    critiques.append({"dimension": "outcome", "score": 0.9, "text": "the fix is in place",
                      "span_id": None, "node": None, "step_index": None})
    return {"judges": {"combined": {"status": "ok", "critiques": critiques,
                                    "scores": {"outcome": 0.9, "process": 0.4}}},
            "overall": {"status": "ok", "process_score": 0.4, "outcome_score": 0.9,
                        "outcome_source": "judge", "tau_task": 0.5, "tau_process": 0.6},
            "totals": {"tokens": {"input": JUDGE_TOKENS[0], "output": JUDGE_TOKENS[1]},
                       "cost_usd": JUDGE_COST, "latency_s": 1.5, "calls": 1,
                       "failed_calls": 0}}


def stored(path: Path) -> Store:
    store = Store(str(path))
    [guide] = evaluate([str(GUIDE)], str(GUIDE_REFS), {"steps": 5})
    # the pages are under test, not the shipped model's view of this run: a fixed p_success
    # on the pass side (the run succeeded), with the model the evaluation named
    assert guide.prediction is not None
    guide.prediction = {**guide.prediction, "p_success": 0.83}
    inferred = Evaluation(dataclasses.replace(guide.trajectory, trace_id=INFERRED,
                                              agent_source="inferred_history"),
                          findings=guide.findings, verdict=guide.verdict,
                          prediction=guide.prediction)
    store.put_many([guide, inferred])
    assert store.put_judge(JUDGED, 0, _judge(guide.trajectory.steps[8].span_id))
    return store


@contextmanager
def labelled_admin(store: Store, config: AdminConfig | None = None) -> Iterator[str]:
    """The admin endpoint over ``store`` with the real feedback and calibration."""
    metrics = Metrics()
    feedback = Feedback(store, Evaluator(Config()), metrics.prediction)
    api = AdminApi(CollectorRegistry(), store.query, store.get, feedback.record,
                   lambda: True, lambda: True,
                   calibration=lambda: report(store, JudgeConfig()), pass_threshold=0.5)
    server = AdminServer("127.0.0.1:0", api, config or AdminConfig(endpoint="127.0.0.1:0"))
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()
