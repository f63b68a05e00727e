"""What one clustering run produces: the ``GET /v1/issues`` object plus ``assignments``.

``to_json(result)`` is that object (schema ``otel-eval.issues/v1``). Shares are fractions of
the window's evaluated traces (0..1) with at least one critique in the issue, for both
levels, so system and node issues compare on one scale; ``trend`` is the share minus the
share stored by the previous run (None for a new issue).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Literal

from otel_eval.telemetry.labels import MAX_LABEL_CHARS, OTHER

EventKind = Literal["new", "share_jump"]

OTHER_ISSUE_ID = "_other"
MAX_AGENTS_PER_ISSUE = 20  # agents listed per issue (API, gauges); the rest counted
TITLE_LABEL_CHARS = 80  # an issue's title as a label value (the dashboard's issues table)


@dataclass(frozen=True, slots=True)
class Issue:
    issue_id: str
    level: str  # system | node: of most of its critiques (``nodes`` has them all)
    node: str  # "" for system issues
    title: str
    description: str
    share: float  # traces with the issue / traces in the window
    trend: float | None  # share - previous run's share; None when new
    critiques: int  # critiques assigned to the issue in the window
    traces: int  # distinct traces affected
    exemplars: tuple[str, ...]  # trace ids, most central critique first
    agents: tuple[str, ...]  # agents seen with the issue, the first MAX_AGENTS_PER_ISSUE
    first_seen: float  # unix seconds
    new: bool
    # every trace with the issue, sorted once when the run builds it (the runs pages);
    # not in the JSON
    trace_ids: tuple[str, ...] = field(default=(), repr=False)
    # (clustering run time, share) of the last runs, oldest first (catalogue.HISTORY_RUNS)
    history: tuple[tuple[float, float], ...] = ()
    # (level, node, critiques, traces, service) per level and node of the members, most critiques
    # first: one problem seen at system level and at several agent nodes is one issue
    # (per service: an agent node is a name within its service; "" unknown)
    nodes: tuple[tuple[str, str, int, int, str], ...] = ()
    # low | medium | high | critical: members' typical severity, one step up when wide
    severity: str = "medium"
    # new | ongoing | regressed (back after a run without it); see issues/reading.py
    status: str = "new"
    agents_omitted: int = 0  # agents seen with the issue past MAX_AGENTS_PER_ISSUE
    # (service, agent) of its members ("" unknown), the first MAX_AGENTS_PER_ISSUE: an
    # agent is a name within its service (the gauges' agent info, the JSON's)
    service_agents: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "issue_id": self.issue_id, "level": self.level, "node": self.node,
            "title": self.title, "description": self.description,
            "share": round(self.share, 6),
            "trend": None if self.trend is None else round(self.trend, 6),
            "critiques": self.critiques, "traces": self.traces,
            "exemplars": list(self.exemplars), "agents": list(self.agents),
            "agents_omitted": self.agents_omitted,
            "service_agents": [{"service": s or None, "agent": a or None}
                               for s, a in self.service_agents],
            "first_seen": self.first_seen, "new": self.new,
            "history": [[at, round(share, 6)] for at, share in self.history],
            "severity": self.severity, "status": self.status,
            "nodes": [{"level": level, "node": node, "service": service or None,
                       "critiques": n, "traces": t}
                      for level, node, n, t, service in self.nodes],
        }


@dataclass(frozen=True, slots=True)
class Assignment:
    trace_id: str
    span_id: str | None
    issue_id: str | None  # None: the critique's cluster was too small to be an issue
    level: str
    node: str
    source: str  # finding:<detector> | judge:<name>

    def to_json(self) -> dict[str, Any]:
        return {"trace_id": self.trace_id, "span_id": self.span_id, "issue_id": self.issue_id,
                "level": self.level, "node": self.node, "source": self.source}


@dataclass(frozen=True, slots=True)
class Resolved:
    """A stored issue the previous run found and this one does not (status ``resolved``)."""

    issue_id: str
    level: str
    node: str
    title: str
    previous_share: float

    def to_json(self) -> dict[str, Any]:
        return {"issue_id": self.issue_id, "level": self.level, "node": self.node,
                "title": self.title, "status": "resolved",
                "previous_share": round(self.previous_share, 6)}


@dataclass(frozen=True, slots=True)
class IssueEvent:
    kind: EventKind
    issue: Issue
    previous_share: float | None


@dataclass(frozen=True, slots=True)
class Annotated:
    """What one run's annotations came to: each event posted, failed or skipped, the
    skipped by reason (``telemetry.issues.ANNOTATION_SKIP_REASONS``)."""

    posted: int = 0
    failed: int = 0
    skipped: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class IssuesResult:
    generated_at: float  # unix seconds
    window_s: float
    embedding: str
    traces: int  # evaluated traces in the window
    critiques: int
    skipped: int  # malformed evaluations / critiques ignored
    issues: tuple[Issue, ...]  # by level, node, then share descending
    assignments: tuple[Assignment, ...]
    events: tuple[IssueEvent, ...] = ()  # new issues and share jumps (for annotations)
    aged_out: tuple[str, ...] = ()  # issue ids deleted from the catalogue by this run
    resolved: tuple[Resolved, ...] = ()  # stored issues the previous run had, this one not
    # the window held more runs than a run reads (``job.WINDOW_RUNS``): its newest only
    window_truncated: bool = False
    # the job's number for the run (``IssuesJob`` counts its runs; 0 outside a job): with
    # ``generated_at``, the run a runs page's cursor names (``issues.runs``); not in the JSON
    run: int = 0


def to_json(result: IssuesResult, assignments: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "schema": "otel-eval.issues/v1",
        "generated_at": result.generated_at,
        "window_s": result.window_s,
        "embedding": result.embedding,
        "traces": result.traces,
        "critiques": result.critiques,
        "skipped": result.skipped,
        "window_truncated": result.window_truncated,
        "issues": [i.to_json() for i in result.issues],
        "resolved": [r.to_json() for r in result.resolved],
    }
    if assignments:
        out["assignments"] = [a.to_json() for a in result.assignments]
    return out


@dataclass(frozen=True, slots=True)
class GaugeSample:
    """One shown issue's gauge values, or an ``_other`` sample standing for issues not
    shown (``issues``: the one issue, or those ``_other`` aggregates)."""

    labels: dict[str, str]  # level, node, issue_id, title
    share: float  # traces with any of ``issues`` / traces in the window
    traces: int
    issues: tuple[Issue, ...]


def top_issue_gauge_samples(result: IssuesResult, top_k: int,
                            max_issues: int) -> list[GaugeSample]:
    """Gauge samples of at most ``max_issues`` issues: the largest (by share) of the
    ``top_k`` of each (level, node) group. The rest of a group with a shown issue is one
    ``issue_id="_other"`` sample, whose share is that of traces with any of them; the groups
    with none shown are one ``node="_other", issue_id="_other"`` sample per level (as the
    (service, agent) pair budget names its overflow). So there are at most
    2 x ``max_issues`` + 2 samples whatever the number of agent nodes; the node is cut to
    ``MAX_LABEL_CHARS``, the title to ``TITLE_LABEL_CHARS``."""
    groups: dict[tuple[str, str], list[Issue]] = {}
    for issue in result.issues:
        groups.setdefault((issue.level, issue.node[:MAX_LABEL_CHARS]), []).append(issue)
    for issues in groups.values():
        issues.sort(key=_by_share)
    candidates = sorted((i for issues in groups.values() for i in issues[:top_k]),
                        key=_by_share)
    shown = {i.issue_id for i in candidates[:max_issues]}
    samples: list[GaugeSample] = []
    overflow: dict[str, list[Issue]] = {}  # level -> issues of the groups with none shown
    for (level, node), issues in sorted(groups.items()):
        top = [i for i in issues if i.issue_id in shown]
        rest = [i for i in issues if i.issue_id not in shown]
        if not top or node == OTHER:  # a node named "_other" shares the overflow's sample
            overflow.setdefault(level, []).extend(rest)
            rest = []
        samples.extend(GaugeSample({"level": level, "node": node, "issue_id": i.issue_id,
                                    "title": i.title[:TITLE_LABEL_CHARS]},
                                   i.share, i.traces, (i,)) for i in top)
        if rest:
            samples.append(_other_sample(result, level, node, rest))
    samples.extend(_other_sample(result, level, OTHER, rest)
                   for level, rest in sorted(overflow.items()) if rest)
    return samples


def _by_share(issue: Issue) -> tuple[float, str]:
    return -issue.share, issue.issue_id


def _other_sample(result: IssuesResult, level: str, node: str,
                  rest: list[Issue]) -> GaugeSample:
    traces = len(frozenset().union(*(i.trace_ids for i in rest)))
    share = traces / result.traces if result.traces else 0.0
    return GaugeSample({"level": level, "node": node, "issue_id": OTHER_ISSUE_ID,
                        "title": "other issues"}, share, traces, tuple(rest))


def run_issues(result: IssuesResult, trace_id: str) -> list[dict[str, str]]:
    """The issues of the last clustering run's window that ``trace_id``'s run is one of
    (``issue_id``, ``title``; the runs page links back to each): a binary search of each
    issue's sorted ``trace_ids``."""
    out = []
    for issue in result.issues:
        at = bisect.bisect_left(issue.trace_ids, trace_id)
        if at < len(issue.trace_ids) and issue.trace_ids[at] == trace_id:
            out.append({"issue_id": issue.issue_id, "title": issue.title})
    return out

