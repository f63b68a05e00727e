"""Issue stage, step 4c: one problem, one issue.

- ``groups``: which critiques are clustered together: all of the window's (default), or each
  (level, node) apart (``issues.per_node``);
- ``same_problem``: critiques with one problem key (``Critique.problem``, e.g. the findings
  that mean the run did not end) are put in one cluster whatever their words;
- ``by_node``: an issue's breakdown by level and node within each service (``Issue.nodes``;
  an agent node is a name within its service, as the per-trace metrics count it), whose
  first entry is the issue's level and node.
Pure functions.
"""

from __future__ import annotations

from typing import Any

from otel_eval.outputs.issues.critiques import Critique


def groups(critiques: list[Critique],
           per_node: bool) -> dict[tuple[str, str, str], list[int]]:
    """Indexes of the critiques clustered together: per (level, service, node), an agent
    node being a name within its service, or all in one."""
    out: dict[tuple[str, str, str], list[int]] = {}
    for i, c in enumerate(critiques):
        out.setdefault((c.level, c.service, c.node) if per_node else ("", "", ""),
                       []).append(i)
    return out


def same_problem(labels: Any, uid: list[int], group: list[Critique]) -> Any:
    """``labels`` (of the distinct texts) with every text of one problem key
    (``Critique.problem``) in the label most of that problem's critiques have (ties: the
    smallest label): one problem, one issue, whatever its words."""
    keyed: dict[str, list[int]] = {}
    for i, c in enumerate(group):
        if c.problem:
            keyed.setdefault(c.problem, []).append(uid[i])
    if not keyed:
        return labels
    out = labels.copy()
    for texts in keyed.values():
        counts: dict[int, int] = {}
        for u in texts:
            counts[int(labels[u])] = counts.get(int(labels[u]), 0) + 1
        target = min(counts, key=lambda label: (-counts[label], label))
        out[sorted(set(texts))] = target
    return out


def by_node(members: list[Critique]) -> tuple[tuple[str, str, int, int, str], ...]:
    """(level, node, critiques, traces, service) of an issue's members per level, node and
    service ("" unknown), most critiques first (ties: system level first, then by node, then
    service): the first is the issue's level and node."""
    counts: dict[tuple[str, str, str], list[Any]] = {}
    for c in members:
        entry = counts.setdefault((c.level, c.node, c.service), [0, set()])
        entry[0] += 1
        entry[1].add(c.trace_id)
    order = sorted(counts.items(), key=lambda kv: (-kv[1][0], kv[0][0] != "system",
                                                   kv[0][1], kv[0][2]))
    return tuple((level, node, n, len(traces), service)
                 for (level, node, service), (n, traces) in order)
