"""An alert's link (``otel_eval_url``) lists the runs behind its series: exactly the runs its
metric counted, no others. Before, the non-termination alerts linked ``detector=non_termination``
(also the runs that ended raising: ``root_error``, ``llm_error``, ``no_output``, which
``otel_eval_traces_non_terminated_total`` does not count) and the budget alerts
``detector=budget`` (also every run whose cost was partly unpriced, ``cost_unknown``, which
``otel_eval_traces_budget_overruns_total`` does not count): the page behind an alert listed
runs that never did what it pages about."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

from grafana_files import alert_rules, metric_names

from otel_eval.base.results import Evaluation, Finding, Verdict
from otel_eval.base.steps import Trajectory
from otel_eval.store import Store
from otel_eval.store.query import EvaluationQuery
from otel_eval.telemetry.metrics import Metrics

LABELS = {"service": "shop", "agent": "planner"}
FINDINGS = [("non_termination", "halted"), ("non_termination", "incomplete"),
            ("non_termination", "root_error"), ("non_termination", "llm_error"),
            ("non_termination", "no_output"), ("budget", "steps_exceeded"),
            ("budget", "cost_usd_exceeded"), ("budget", "cost_unknown"),
            ("loop", "stagnation"), ("tool_call", "runtime")]
# the per-trace counters an alert link stands for (the numerator of its share)
COUNTERS = ("otel_eval_traces_with_loop_total", "otel_eval_traces_non_terminated_total",
            "otel_eval_traces_budget_overruns_total")


def _evaluation(i: int, detector: str, kind: str) -> Evaluation:
    traj = Trajectory(f"{i:032x}", "otlp", "complete", [], service="shop", agent="planner")
    severity = "info" if kind == "cost_unknown" else "error"
    return Evaluation(traj, [Finding(detector, kind, severity, "x")], Verdict(False, []),
                      evaluated_at_ns=10**18 + i)


def _counted(ev: Evaluation, counter: str) -> bool:
    m = Metrics()
    m.evaluation_stored(ev, 0.0, superseded=False)
    return any(s.value > 0 for f in m.registry.collect() for s in f.samples
               if s.name == counter)


def _link(template: str) -> dict[str, list[str]]:
    url = re.sub(r"\{\{ \$externalLabels\.otel_eval_url \}\}", "", template)
    url = re.sub(r"\{\{ \$labels\.(\w+) \| urlquery \}\}",
                 lambda m: quote(LABELS[m.group(1)], safe=""), url)
    assert "{{" not in url, url
    return parse_qs(urlsplit(url).query, keep_blank_values=True)


def test_an_alert_link_lists_exactly_the_runs_its_metric_counts(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    runs = [_evaluation(i, d, k) for i, (d, k) in enumerate(FINDINGS, start=1)]
    store.put_many(runs)
    checked = 0
    for rule in alert_rules():
        template = (rule.get("annotations") or {}).get("otel_eval_url", "")
        counters = [c for c in COUNTERS if c in metric_names(rule.get("expr", ""))]
        if "detector=" not in template or not counters:
            continue
        params = _link(template)
        listed = {b["trace_id"] for b in store.query(EvaluationQuery.from_params(
            {**params, "limit": ["100"]})).evaluations}
        counted = {ev.trace_id for ev in runs if _counted(ev, counters[0])}
        assert listed == counted, (rule["alert"], params["detector"])
        checked += 1
    assert checked >= 6
