"""Output (part): the recurring issues (``/ui/issues``), as ``GET /v1/issues`` holds them.

Each issue: its title and description, level and agent (with its service: an agent node
is a name within its service), the share of runs it affects, how
that moved since the previous clustering run and over the last runs (a line drawn in inline
SVG from the stored numbers: no script), runs and critiques counted, when it was first seen,
and its example runs linked to the run view; the runs count links to every run of the issue
(``/ui/issues/{id}/runs``, paginated by the cursor of its clustering run, so a
re-clustering between two pages neither repeats nor skips a run). ``#issue-{id}`` anchors
one issue (the Grafana annotations link there). A window cut to the newest runs
(``window_truncated``) is said above the table: its shares are of those runs.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from otel_eval.base.model import is_trace_id
from otel_eval.outputs.ui.html import Html, h, segment
from otel_eval.outputs.ui.values import short, when

_ANCHOR = re.compile(r"^[A-Za-z0-9_.:-]{1,80}$")


def _trend(trend: Any, status: Any = None) -> str:
    if not isinstance(trend, int | float):
        return "new"
    moved = f"{trend * 100:+.1f} pts" if trend else "steady"
    return f"{status}, {moved}" if status in ("ongoing", "regressed") else moved


_SPARK_W, _SPARK_H = 120, 24


def _history(history: Any) -> Html | None:
    """The issue's share over the recorded runs as a small line, scaled to its own peak."""
    shares = [min(1.0, max(0.0, float(p[1]))) for p in (history or [])[-100:]
              if isinstance(p, list | tuple) and len(p) == 2
              and isinstance(p[1], int | float) and p[1] == p[1]]
    if len(shares) < 2:
        return None
    peak = max(max(shares), 0.001)
    step = _SPARK_W / (len(shares) - 1)
    points = " ".join(f"{i * step:.1f},{_SPARK_H - 1 - v / peak * (_SPARK_H - 2):.1f}"
                      for i, v in enumerate(shares))
    about = (f"share over the last {len(shares)} runs: {shares[0] * 100:.1f} % to "
             f"{shares[-1] * 100:.1f} %, peak {peak * 100:.1f} %")
    return h("svg", h("title", about), h("polyline", points=points), class_="spark",
             viewBox=f"0 0 {_SPARK_W} {_SPARK_H}", width=_SPARK_W, height=_SPARK_H,
             role="img", aria_label=about)


_SERVICES_SHOWN = 3


def _where(issue: dict[str, Any]) -> list[str]:
    """Level, node and the services it is seen at (from ``nodes``): an agent node is a name
    within its service, so two services' ``planner`` issues are told apart."""
    level, node = issue.get("level"), issue.get("node") or ""
    services = list(dict.fromkeys(
        str(n["service"]) for n in (issue.get("nodes") or [])[:100]
        if isinstance(n, dict) and n.get("level") == level and (n.get("node") or "") == node
        and isinstance(n.get("service"), str) and n["service"]))
    where: list[str] = [short(level, 20), " ", short(node, 80)]
    if services:
        more = len(services) - _SERVICES_SHOWN
        shown = ", ".join(short(s, 80) for s in services[:_SERVICES_SHOWN])
        where.append(h("p", f"service {shown}" + (f" (+{more})" if more > 0 else ""),
                       class_="desc"))
    return where


def _issue(issue: dict[str, Any]) -> Html:
    issue_id = str(issue.get("issue_id") or "")
    examples = [h("a", str(t)[:8], href="/ui/runs/" + segment(str(t)))
                for t in (issue.get("exemplars") or [])[:5] if is_trace_id(t)]
    share = issue.get("share")
    first = issue.get("first_seen")
    return h("tr", h("td", h("b", short(issue.get("title"), 120)),
                     h("p", short(issue.get("description"), 400), class_="desc")),
             h("td", short(issue.get("severity"), 20)),
             h("td", _where(issue)),
             h("td", f"{share * 100:.1f} %" if isinstance(share, int | float) else ""),
             h("td", _trend(issue.get("trend"), issue.get("status")), " ",
               _history(issue.get("history"))),
             h("td", h("a", str(issue.get("traces", "")),
                       href=f"/ui/issues/{segment(issue_id)}/runs",
                       title="every run of this issue") if _ANCHOR.match(issue_id)
               else str(issue.get("traces", ""))),
             h("td", str(issue.get("critiques", ""))),
             h("td", when(int(first * 1e9)) if isinstance(first, int | float) else ""),
             h("td", [[a, " "] for a in examples]),
             id=f"issue-{issue_id}" if _ANCHOR.match(issue_id) else None,
             class_="new" if issue.get("new") else None)


def issues_page(result: dict[str, Any] | None) -> Html:
    if result is None:
        return Html(h("h1", "Issues") + h("p", "Issue clustering is not enabled "
                                               "(issues.interval_s).", class_="empty"))
    issues = [i for i in result.get("issues") or [] if isinstance(i, dict)][:500]
    generated = result.get("generated_at")
    about = (f"{result.get('traces', 0)} runs and {result.get('critiques', 0)} critiques "
             f"in the last {float(result.get('window_s') or 0) / 3600:g} h, clustered "
             + (when(int(generated * 1e9)) if isinstance(generated, int | float)
                else "not yet"))
    head = h("tr", [h("th", c) for c in ("issue", "severity", "where", "share of runs",
                                         "over the runs",
                                         "runs", "critiques", "first seen", "example runs")])
    body = [h("h1", "Issues"), h("p", about, class_="facts")]
    if result.get("window_truncated") is True:
        body.append(h("p", f"The window held more runs than a clustering run reads: these "
                           f"are the newest {result.get('traces', 0)} runs, the older ones "
                           f"left out (shares are of the newest).", class_="truncated"))
    body += [h("table", h("thead", head), h("tbody", [_issue(i) for i in issues]),
              class_="issues")]
    if not issues:
        body.append(h("p", "No recurring issue yet.", class_="empty"))
    return Html("".join(body))


def issue_runs_page(runs: dict[str, Any]) -> Html:
    """One page of an issue's runs (``GET /v1/issues/{id}/runs``), each linked to its run."""
    offset, ids = int(runs.get("offset") or 0), list(runs.get("trace_ids") or [])
    issue_id = str(runs.get("issue_id") or "")
    items = [h("li", h("a", str(t), href="/ui/runs/" + segment(str(t))))
             for t in ids if is_trace_id(t)]
    body = [h("h1", short(runs.get("title"), 120)),
            h("p", f"runs {offset + 1 if ids else 0}-{offset + len(ids)} of "
                   f"{runs.get('runs', 0)} with this issue in the clustering window",
              class_="facts"),
            h("ol", items, start=offset + 1)]
    # by cursor: the next page is of this page's clustering run, whatever ran since
    nxt = runs.get("next_cursor")
    if isinstance(nxt, str) and _ANCHOR.match(issue_id):
        body.append(h("p", h("a", "next runs", href=f"/ui/issues/{segment(issue_id)}/runs"
                                                     f"?cursor={quote(nxt, safe='')}")))
    return Html("".join(body))


def issue_runs_gone(issue_id: str) -> Html:
    """The page of a "next runs" link whose clustering run is gone (the issues were
    clustered twice since its first page): its list cannot go on; the first page again."""
    return Html("".join([
        h("h1", "Clustered again"),
        h("p", "The issues were clustered again since the runs listed before this page "
               "(every issues.interval_s): that list is gone, and the next one holds other "
               "runs.", class_="error"),
        h("p", h("a", "the issue's runs, from the first",
                 href=f"/ui/issues/{segment(issue_id)}/runs"))]))


def run_issues_section(issues: list[dict[str, str]]) -> Html | None:
    """On a run's page: the recurring issues it is one of, each linked to its place on the
    issues page (``#issue-{id}``) and to its other runs; None when it is in none."""
    if not issues:
        return None
    items = [h("li", h("a", str(i.get("title") or i["issue_id"]),
                       href="/ui/issues#issue-" + segment(str(i["issue_id"]))), " (",
               h("a", "its runs", href=f"/ui/issues/{segment(str(i['issue_id']))}/runs"), ")")
             for i in issues[:20]]
    return h("section", h("h2", "Recurring issues"), h("ul", items), class_="run-issues")
