"""Output (part): the judge checked against people (``/ui/calibration``), as
``GET /v1/calibration`` holds it (``evaluate.calibration``).

One row per (service, agent, score), and for p_success per model (the serving one first: a model
swap leaves the old model's runs in the store): the labelled runs it rests on (successes /
failures), the pass threshold, the AUC and Cohen's kappa each with its 95 % interval. Every
agent's runs together (``*``) come first. A figure that could not be computed (one outcome only)
is a dash, never a number. The rows whose interval lies wholly under chance (AUC under 0.5,
kappa under 0) are marked: there the score and the people who recorded outcomes disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otel_eval.outputs.ui.html import Html, h
from otel_eval.outputs.ui.values import short
from otel_eval.outputs.ui.verdicts import number

MAX_ROWS = 2000  # rows shown (GET /v1/calibration already answers with as many at most)
_HEAD = (("service", None), ("agent", None), ("score", "a judge dimension, or p_success"),
         ("model", "the success model whose p_success the row checks (the serving one "
                   "first)"),
         ("runs", "labelled runs with this score"), ("successes", None), ("failures", None),
         ("threshold", "pass threshold the kappa is taken at"),
         ("AUC [95 % CI]", "how well the score ranks the recorded successes above the "
                           "failures; 0.5 is chance"),
         ("kappa [95 % CI]", "agreement of score >= threshold with the recorded outcome "
                             "beyond chance; 0 is chance"))


def _interval(value: Any, ci: Any) -> str:
    v = number(value)
    if v is None:
        return "-"
    if isinstance(ci, list | tuple) and len(ci) == 2:
        lo, hi = number(ci[0]), number(ci[1])
        if lo is not None and hi is not None:
            return f"{v:.3f} [{lo:.3f}, {hi:.3f}]"
    return f"{v:.3f}"


def _against(row: Mapping[str, Any]) -> bool:
    """The score disagrees with the outcomes beyond its interval: AUC or kappa wholly under
    chance."""
    for name, chance in (("auc_ci95", 0.5), ("kappa_ci95", 0.0)):
        ci = row.get(name)
        if isinstance(ci, list | tuple) and len(ci) == 2:
            hi = number(ci[1])
            if hi is not None and hi < chance:
                return True
    return False


def _row(row: Mapping[str, Any]) -> Html:
    threshold = number(row.get("threshold"))
    cells = [short(row.get("service"), 60), short(row.get("agent"), 60),
             short(row.get("score"), 40), short(row.get("model") or "", 60),
             str(row.get("runs", "")),
             str(row.get("successes", "")), str(row.get("failures", "")),
             f"{threshold:g}" if threshold is not None else "-",
             _interval(row.get("auc"), row.get("auc_ci95")),
             _interval(row.get("kappa"), row.get("kappa_ci95"))]
    against = _against(row)
    return h("tr", [h("td", c) for c in cells],
             class_=" ".join(c for c in ("all" if row.get("agent") == "*" else "",
                                         "against" if against else "") if c) or None,
             title="disagrees with the recorded outcomes beyond its 95 % interval"
             if against else None)


def calibration_page(report: Mapping[str, Any] | None) -> Html:
    title = h("h1", "Calibration: the judge and p_success against recorded outcomes")
    if report is None:
        return Html(title + h("p", "Calibration is not served here.", class_="empty"))
    rows = [r for r in report.get("groups") or () if isinstance(r, dict)][:MAX_ROWS]
    rows.sort(key=lambda r: (r.get("agent") != "*", str(r.get("service")),
                             str(r.get("agent")), str(r.get("score"))))
    labelled = report.get("labelled_runs", 0)
    about = h("p", f"{labelled} runs with a recorded outcome (POST /v1/feedback, or the "
                   "form on a run's page). Each figure rests on the runs of its row that carry "
                   "that score; service and agent * are every agent's runs together.",
              class_="facts")
    head = h("tr", [h("th", c, title=t) for c, t in _HEAD])
    parts = [title, about,
             h("table", h("thead", head), h("tbody", [_row(r) for r in rows]),
               class_="calibration")]
    left_out = report.get("groups_left_out")
    if isinstance(left_out, int) and left_out > 0:  # GET /v1/calibration's cap
        parts.append(h("p", f"{left_out} more rows, on fewer runs each, are left out "
                            "(otel-eval calibrate prints them all).", class_="facts"))
    if not rows:
        parts.append(h("p", "No labelled run carries a judge score or p_success yet: record "
                            "outcomes on the runs' pages.", class_="empty"))
    return Html("".join(parts))
