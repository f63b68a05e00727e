"""Issue stage, step 6b: carry issues over from the catalogue, so ids stay put between runs.

The catalogue matches this run's clusters to stored issues one to one (``catalogue.match``).
Two cases would still change ids though nothing changed in the agents:

- an issue splits in this window (the cut falls differently on fewer or other critiques):
  the part that did not get the stored id would get a new one. A cluster whose most similar
  stored issue (cosine >= ``match_similarity``) went to another cluster joins that cluster;
- an issue recurs in only one trace of this window (its other traces left the window): the
  window alone cannot tell it recurs, and its critiques would be in no issue. A cluster below
  ``min_cluster_size`` traces whose most similar stored issue reaches ``match_similarity``
  takes that issue (joining the cluster that holds it, if any): it did recur, across runs.

- a critique the previous run put in an issue falls on the other side of a cut this run (the
  cut moved a little with the window): ``kept_members`` puts it back in that issue when the
  issue is found again. Only between issues of this run: what the previous run decided
  stays decided while the evidence stays in the window.

Cost: one sparse product, clusters x stored issues (both bounded: clusters by
``max_exact`` per group, stored issues by ``max_issues``), in blocks of rows
(``catalogue.cosine_blocks``: memory a block x stored issues); only numpy/scipy, imported on
use.
"""

from __future__ import annotations

from dataclasses import dataclass

from otel_eval.outputs.issues.catalogue import Centroid, StoredIssue, nearest, sparse_centroid


@dataclass(slots=True)
class Cluster:
    members: list[int]  # indexes into the group's critiques, most central text first
    centroid: Centroid
    terms: list[str]
    name: tuple[str, str] | None = None  # (title, description) from the synthesizer


def merged(parts: list[Cluster], name: tuple[str, str] | None) -> Cluster:
    """One cluster made of ``parts``: the largest part's members and terms first, the
    centroid weighted by the parts' sizes."""
    parts = sorted(parts, key=lambda c: -len(c.members))
    weights: dict[str, float] = {}
    for part in parts:
        for feature, value in part.centroid.items():
            weights[feature] = weights.get(feature, 0.0) + len(part.members) * value
    return Cluster(members=[m for part in parts for m in part.members],
                   centroid=sparse_centroid(weights), terms=parts[0].terms, name=name)


Carried = tuple[list[Cluster], dict[int, StoredIssue], list[Cluster]]


def carry_over(clusters: list[Cluster], small: list[Cluster], stored: list[StoredIssue],
               matched: dict[int, StoredIssue], threshold: float) -> Carried:
    """``clusters`` (issues of this run, ``matched`` by index to stored issues) after the
    unmatched ones and the ``small`` ones (below the recurrence floor) whose nearest stored
    issue reaches ``threshold`` joined it; and the small clusters that reach none."""
    extra = [i for i in range(len(clusters)) if i not in matched]
    pool = [clusters[i] for i in extra] + small
    if not pool or not stored:
        return clusters, matched, small
    near = nearest([c.centroid for c in pool], [s.centroid for s in stored])
    holder = {matched[i].issue_id: i for i in matched}  # stored id -> index in `clusters`
    into: dict[int, list[Cluster]] = {}
    out = list(clusters)
    out_matched = dict(matched)
    gone: set[int] = set()
    left: list[Cluster] = []
    for p, c in enumerate(pool):
        j, sim = near[p]
        if sim < threshold:
            if p >= len(extra):
                left.append(c)
            continue
        k = holder.get(stored[j].issue_id)
        if k is None:  # a known issue with no cluster yet: this one takes its id
            k = extra[p] if p < len(extra) else len(out)
            if p >= len(extra):
                out.append(c)
            holder[stored[j].issue_id], out_matched[k] = k, stored[j]
            continue
        into.setdefault(k, []).append(c)
        if p < len(extra):
            gone.add(extra[p])
    for k, parts in into.items():
        out[k] = merged([out[k], *parts], out[k].name)
    keep = [i for i in range(len(out)) if i not in gone]
    return [out[i] for i in keep], {n: out_matched[i] for n, i in enumerate(keep)
                                    if i in out_matched}, left


def kept_members(clusters: list[Cluster], matched: dict[int, StoredIssue], texts: list[str],
                 previous: dict[str, str]) -> list[Cluster]:
    """``clusters`` after every critique (index into ``texts``, its normalized text) that the
    previous run put in an issue this run found again (``matched``: cluster index -> stored
    issue) is moved to that issue's cluster, from another cluster or from none. Others stay,
    in order; indexes are kept (a cluster may be left empty: its issue is not seen this
    run). Linear in the critiques."""
    home = {s.issue_id: i for i, s in matched.items()}
    target: dict[int, int] = {}
    for m, text in enumerate(texts):
        issue_id = previous.get(text)
        if issue_id is not None and issue_id in home:
            target[m] = home[issue_id]
    if not target:
        return clusters
    now = {m: i for i, c in enumerate(clusters) for m in c.members}
    moving = {m: i for m, i in target.items() if now.get(m) != i}
    if not moving:
        return clusters
    joining: dict[int, list[int]] = {}
    for m, i in sorted(moving.items()):
        joining.setdefault(i, []).append(m)
    return [Cluster([m for m in c.members if m not in moving] + joining.get(i, []),
                    c.centroid, c.terms, c.name) for i, c in enumerate(clusters)]
