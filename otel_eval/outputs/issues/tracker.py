"""Recurring-issue discovery: one clustering run over a window of evaluations.

    evaluation JSON (v1) -> critiques.extract -> normalize -> embed -> cluster (all
      together, or per level and node) -> refine (merge, attach stragglers) -> problems
      (one problem key, one cluster) -> synthesis (judge model, optional)
      -> match to the catalogue (stable ids, carry-over, age-out) -> name new clusters
      -> IssuesResult (issues, assignments, events) -> annotator (Grafana), if any

``IssueTracker.run`` is synchronous and CPU bound (seconds for tens of thousands of
critiques): the service should call it from a worker thread on its periodic job.
"""

from __future__ import annotations

import hashlib
import logging
import math
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from otel_eval.outputs.issues.catalogue import (
    Catalogue,
    StoredIssue,
    blend,
    match,
    new_issue_id,
    sparse_centroid,
)
from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.continuity import (
    Carried,
    Cluster,
    carry_over,
    kept_members,
    merged,
)
from otel_eval.outputs.issues.critiques import (
    Critique,
    Extraction,
    Redact,
    critique_fields,
    extract,
)
from otel_eval.outputs.issues.embed import (
    Embedder,
    Matrix,
    TfidfEmbedder,
    make_embedder,
    recurring_terms,
)
from otel_eval.outputs.issues.normalize import normalize
from otel_eval.outputs.issues.problems import by_node, groups, same_problem
from otel_eval.outputs.issues.reading import severity, status, titled
from otel_eval.outputs.issues.result import (
    MAX_AGENTS_PER_ISSUE,
    Annotated,
    Assignment,
    Issue,
    IssueEvent,
    IssuesResult,
    Resolved,
)
from otel_eval.outputs.issues.synthesis import Draft, Synthesizer, synthesize
from otel_eval.outputs.issues.taxonomy import load_taxonomy
from otel_eval.store.base import SessionLimits

if TYPE_CHECKING:  # naming and cluster import numpy, scipy, scikit-learn: see _clusters
    from otel_eval.outputs.issues.naming import Name, Namer

log = logging.getLogger(__name__)

_NAMER_EXAMPLES = 5  # central critiques shown to an injected namer
_SYNTHESIS_EXAMPLES = 3  # central critiques per issue shown to an injected synthesizer
# The centroid feature of a normalized text with no term (a cluster of such texts had an
# empty centroid, matched no stored issue and got a new id every run); no term has a colon.
_TEXT_FEATURE = "text:"


class Annotator(Protocol):
    def annotate(self, events: Sequence[IssueEvent], now: float) -> Annotated:
        """Publish events; returns how many were published, failed, skipped (by reason)."""
        ...


def _revision(ev: Mapping[str, Any]) -> float:
    """An evaluation's ``revision`` (none: 0); one that is not a finite number is unknown,
    below every known one (a malformed object loses to its trace's well-formed one)."""
    value = ev.get("revision")
    if value is None:
        return 0
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return value
    return -math.inf


def latest_revisions(evaluations: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One evaluation per trace id: the highest ``revision`` (late spans supersede)."""
    best: dict[str, Mapping[str, Any]] = {}
    bad: list[Mapping[str, Any]] = []
    for ev in evaluations:
        tid = ev.get("trace_id") if isinstance(ev, Mapping) else None
        if not isinstance(tid, str):
            bad.append(ev)
            continue
        old = best.get(tid)
        if old is None or _revision(ev) >= _revision(old):
            best[tid] = ev
    return [*best.values(), *bad]


class IssueTracker:
    def __init__(self, config: IssuesConfig, store: str | sqlite3.Connection,
                 clock: Callable[[], float] = time.time, *, namer: Namer | None = None,
                 annotator: Annotator | None = None, embedder: Embedder | None = None,
                 synthesizer: Synthesizer | None = None,
                 session: SessionLimits | None = None,
                 monotonic: Callable[[], float] = time.monotonic,
                 redact: Redact = None) -> None:
        """``clock``: unix seconds (run times); ``monotonic``: seconds, the naming
        deadline's (``issues.naming_deadline_s``); ``redact``: applied to every critique's
        text (``critiques.extract``)."""
        self._config = config
        self._store = store
        self._session = session  # a PostgreSQL catalogue's limits (store.session)
        # a path is opened by open() (the job's start) or at first use, never here
        self._opened = (Catalogue(store) if isinstance(store, sqlite3.Connection) else None)
        self._owns_store = not isinstance(store, sqlite3.Connection)
        self._clock = clock
        self._namer = namer
        self._annotator = annotator
        self._synthesizer = synthesizer
        self._synthesis_calls_left = 0  # set by run()
        self._naming_calls_left = 0  # set by run()
        self._monotonic = monotonic
        self._redact = redact
        self._naming_deadline = 0.0  # set by run(): no namer or merge call starts past it
        self.naming_deferred = 0  # namer calls the deadline put off, since start (a counter)
        # digest of a normalized critique text -> the issue id the previous run gave it
        # (one entry per distinct text of that run's window, 32 hex digits whatever the text's
        # length; in memory: lost on restart, when only the catalogue keeps ids)
        self._previous: dict[str, str] = {}
        self._current: dict[str, str] = {}
        # the time of the run ``_previous`` is from: another process's run recorded in the
        # catalogue since (a fleet's job moved) makes it no longer the previous run's
        self._previous_at: float | None = None
        self._embedder = (embedder if embedder is not None
                          else make_embedder(config.embedding, config.stem_chars))
        self._taxonomy = load_taxonomy(config.taxonomy_model) if config.taxonomy else None

    def open(self) -> None:
        """Open the catalogue (its file or database) now; idempotent."""
        if self._opened is None:
            assert not isinstance(self._store, sqlite3.Connection)
            self._opened = Catalogue.open(self._store, self._session)

    @property
    def _catalogue(self) -> Catalogue:
        self.open()
        assert self._opened is not None
        return self._opened

    def leads(self) -> bool:
        """Whether this tracker's runs are the fleet's (``Catalogue.lead``)."""
        return self._catalogue.lead()

    def close(self) -> None:
        if self._owns_store and self._opened is not None:
            self._opened.close()
            self._opened = None

    def run(self, evaluations: Iterable[Mapping[str, Any]],
            now: float | None = None) -> IssuesResult:
        """Cluster the critiques of ``evaluations`` (the caller's window) and update the
        catalogue; ``now`` (unix seconds) defaults to the injected clock."""
        now = self._clock() if now is None else now
        self._synthesis_calls_left = self._config.synthesis_max_calls
        self._naming_calls_left = self._config.naming_max_calls
        self._naming_deadline = self._monotonic() + self._config.naming_deadline_s
        cfg = self._config
        # what clustering reads of each, kept as it is read (an evaluation file's objects
        # are whole: every step's inputs and outputs), as serve's store read keeps it
        kept = (critique_fields(ev) if isinstance(ev, dict) else ev for ev in evaluations)
        ext = extract(latest_revisions(kept), cfg.low_score_threshold,
                      cfg.include_findings, self._redact)
        if self._previous and self._catalogue.last_run() != self._previous_at:
            self._previous = {}  # another worker ran the job since: its run decided
        aged = self._catalogue.age_out(now, cfg.age_out_s, cfg.max_issues)
        stored = self._redacted(self._catalogue.load(self._embedder.name))
        taken = self._catalogue.ids()
        issues: list[Issue] = []
        events: list[IssueEvent] = []
        assigned: dict[int, str] = {}
        seen: set[str] = set()
        self._current = {}
        for (level, service, node), idxs in sorted(groups(ext.critiques,
                                                          cfg.per_node).items()):
            group = [ext.critiques[i] for i in idxs]
            candidates = [s for s in stored if not cfg.per_node
                          or (s.level, s.service, s.node) == (level, service, node)]
            for issue, event, members in self._issues_of(group, candidates, ext, taken, now):
                issues.append(issue)
                seen.add(issue.issue_id)
                taken.add(issue.issue_id)
                assigned.update((idxs[m], issue.issue_id) for m in members)
                if event is not None:
                    events.append(event)
        self._previous = self._current
        resolved = self._forget_unseen(stored, seen)
        self._catalogue.record_shares(now, {**{s.issue_id: 0.0 for s in stored},
                                            **{i.issue_id: i.share for i in issues}})
        self._previous_at = now
        history = self._catalogue.history([i.issue_id for i in issues])
        issues = [replace(i, history=tuple(history.get(i.issue_id, ()))) for i in issues]
        issues.sort(key=lambda i: (i.level != "system", i.node, -i.share, i.issue_id))
        result = IssuesResult(
            generated_at=now, window_s=cfg.window_s, embedding=self._embedder.name,
            traces=len(ext.trace_ids), critiques=len(ext.critiques), skipped=ext.skipped,
            issues=tuple(issues), assignments=tuple(
                Assignment(c.trace_id, c.span_id, assigned.get(i), c.level,
                           c.node, c.source) for i, c in enumerate(ext.critiques)),
            events=tuple(events), aged_out=tuple(aged),
            resolved=tuple(sorted(resolved, key=lambda r: (-r.previous_share, r.issue_id))))
        if self._annotator is not None and events:
            self._annotator.annotate(events, now)
        return result

    def _redacted(self, stored: list[StoredIssue]) -> list[StoredIssue]:
        """``stored`` with its titles and descriptions redacted as critiques are now: an
        issue catalogued before they were (its words the message as recorded) is published,
        and saved again, redacted, not as stored until it ages out."""
        if self._redact is not None:
            for s in stored:
                s.title, s.description = self._redact(s.title), self._redact(s.description)
        return stored

    def _model_name(self, name: Name) -> Name:
        """A judge model's name (namer or synthesis) redacted as critiques are: its reply is
        model output over span text (an injected instruction can make it write an address),
        published as the title on /v1/issues, the gauges and a Grafana annotation."""
        if self._redact is None:
            return name
        return replace(name, title=self._redact(name.title),
                       description=self._redact(name.description))

    def _forget_unseen(self, stored: list[StoredIssue], seen: set[str]) -> list[Resolved]:
        """Issues absent from this run had share 0 in it (the next trend starts there);
        those the previous run still had are resolved by this one."""
        unseen = [s for s in stored if s.issue_id not in seen and s.last_share != 0.0]
        resolved = [Resolved(s.issue_id, s.level, s.node, s.title, s.last_share)
                    for s in unseen]
        for s in unseen:
            s.last_share = 0.0
        if unseen:
            self._catalogue.save(unseen)
        return resolved

    def _issues_of(self, group: list[Critique], candidates: list[StoredIssue],
                   ext: Extraction, taken: set[str],
                   now: float) -> list[tuple[Issue, IssueEvent | None, list[int]]]:
        cfg = self._config
        clusters, matched = self._resolved(group, candidates)
        texts_of = [_digest(normalize(c.text)) for c in group]
        clusters = kept_members(clusters, matched, texts_of, self._previous)
        out: list[tuple[Issue, IssueEvent | None, list[int]]] = []
        saved: list[StoredIssue] = []
        names = self._names(clusters, self._to_name(clusters, matched, group), group)
        for i, c in enumerate(clusters):
            if not c.members:  # all its critiques went back to their previous issues
                continue
            stored = matched.get(i)
            texts = list(dict.fromkeys(group[m].text for m in c.members))
            traces = frozenset(group[m].trace_id for m in c.members)
            share = len(traces) / len(ext.trace_ids) if ext.trace_ids else 0.0
            breakdown = by_node([group[m] for m in c.members])
            level, node, service = breakdown[0][0], breakdown[0][1], breakdown[0][4]
            if stored is None:
                from otel_eval.outputs.issues.naming import Name, deterministic_name

                name = (self._model_name(Name(*c.name)) if c.name is not None
                        else names.get(i) or deterministic_name(c.terms, texts[0]))
                title = titled(name.title, [group[m] for m in c.members])
                stored = StoredIssue(new_issue_id(level, node, texts[0], taken, service),
                                     level, node, self._embedder.name, title,
                                     name.description, c.centroid, now, now, share, service)
                previous = None
                taken.add(stored.issue_id)
                # left by this run's naming_max_calls, its deadline or a call not sent (the
                # judge's budget spent, no judge running): a later run names it
                stored.unnamed = self._namer is not None and c.name is None and i not in names
            else:
                if i in names:  # a new issue an earlier run left unnamed
                    stored.title = titled(names[i].title, [group[m] for m in c.members])
                    stored.description = names[i].description
                    stored.unnamed = False
                previous = stored.last_share
                stored.centroid = blend(stored.centroid, c.centroid, cfg.centroid_update_weight)
                stored.last_seen, stored.last_share = now, share
                stored.level, stored.node, stored.service = level, node, service
            saved.append(stored)
            self._current.update((texts_of[m], stored.issue_id) for m in c.members)
            issue = replace(self._issue(stored, c, group, traces, share, previous),
                            nodes=breakdown, status=status(previous),
                            severity=severity([group[m] for m in c.members], share))
            out.append((issue, _event(issue, previous, cfg.share_jump), c.members))
        self._catalogue.save(saved)
        return out

    def _to_name(self, clusters: list[Cluster], matched: dict[int, StoredIssue],
                 group: list[Critique]) -> list[int]:
        """Indexes of the new clusters the namer names (one call each), and of those
        matching an issue an earlier run left unnamed (its calls or its deadline spent): the
        largest (by traces) first, while this run's ``naming_max_calls`` last; the others
        keep the name from their evidence until a later run names them."""
        if self._namer is None:
            return []
        new = [i for i, c in enumerate(clusters) if c.members and (
            matched[i].unnamed if i in matched else c.name is None)]
        traces = {i: len({group[m].trace_id for m in clusters[i].members}) for i in new}
        new.sort(key=lambda i: (-traces[i], i))
        chosen = new[:max(0, self._naming_calls_left)]
        self._naming_calls_left -= len(chosen)
        if len(chosen) < len(new):
            log.info("issues.naming_max_calls reached: %d new issues keep their evidence "
                     "titles until a later run", len(new) - len(chosen))
        return chosen

    def _names(self, clusters: list[Cluster], order: list[int],
               group: list[Critique]) -> _Names:
        """The namer's names of ``clusters[i]`` for ``i`` in ``order`` (largest first), a
        call started only before this run's naming deadline; those past it are
        ``deferred`` (counted) and named at a later run, as those whose call was not sent."""
        from otel_eval.outputs.issues.naming import name_cluster

        names = _Names()
        for k, i in enumerate(order):
            if self._monotonic() >= self._naming_deadline:
                names.deferred.update(order[k:])
                self.naming_deferred += len(order) - k
                log.warning("issues.naming_deadline_s reached: %d new issues keep their "
                            "evidence titles until a later run", len(order) - k)
                break
            c = clusters[i]
            texts = list(dict.fromkeys(group[m].text for m in c.members))
            name = name_cluster(c.terms, texts[:_NAMER_EXAMPLES], self._namer)
            if name is not None:  # None: not sent, still to be named
                names[i] = self._model_name(name)
        return names

    def _issue(self, stored: StoredIssue, c: Cluster, group: list[Critique],
               traces: frozenset[str], share: float, previous: float | None) -> Issue:
        # the first distinct traces, central first; stop at enough: scanning the list for
        # every member was quadratic (2.5 s for an issue of 20,000 traces)
        exemplars: list[str] = []
        for m in c.members:
            if len(exemplars) == self._config.exemplars:
                break
            if group[m].trace_id not in exemplars:
                exemplars.append(group[m].trace_id)
        agents = sorted({group[m].agent for m in c.members if group[m].agent})
        return Issue(
            issue_id=stored.issue_id, level=stored.level, node=stored.node, title=stored.title,
            description=stored.description, share=share,
            trend=None if previous is None else share - previous, critiques=len(c.members),
            traces=len(traces), exemplars=tuple(exemplars),
            agents=tuple(agents[:MAX_AGENTS_PER_ISSUE]), first_seen=stored.first_seen,
            service_agents=tuple(sorted({(group[m].service, group[m].agent)
                                         for m in c.members})[:MAX_AGENTS_PER_ISSUE]),
            new=previous is None, trace_ids=tuple(sorted(traces)),
            agents_omitted=max(0, len(agents) - MAX_AGENTS_PER_ISSUE))

    def _resolved(self, group: list[Critique], candidates: list[StoredIssue]
                  ) -> tuple[list[Cluster], dict[int, StoredIssue]]:
        """The group's issues (clusters recurring in enough traces, or carried over from
        the catalogue, merged by the synthesizer when one is new) and their stored issues."""
        found: list[Cluster] = []
        small: list[Cluster] = []
        for c in self._clusters(group, candidates):
            recurs = len({group[m].trace_id for m in c.members}) >= self._config.min_cluster_size
            (found if recurs else small).append(c)
        clusters, matched, strays = self._matched(found, small, candidates)
        if any(i not in matched for i in range(len(clusters))):  # a new issue: synthesize
            synthesized = self._synthesized(clusters, strays, group)
            if synthesized is not clusters:
                clusters, matched, _ = self._matched(synthesized, [], candidates)
        return clusters, matched

    def _matched(self, clusters: list[Cluster], small: list[Cluster],
                 candidates: list[StoredIssue]) -> Carried:
        """Clusters (with ``small`` ones carried over), their stored issues by index, and
        the small clusters left in no issue."""
        cfg = self._config
        matched = match([c.centroid for c in clusters], candidates, cfg.match_similarity)
        if cfg.carry_over:
            return carry_over(clusters, small, candidates, matched, cfg.match_similarity)
        return clusters, matched, small

    def _synthesized(self, clusters: list[Cluster], strays: list[Cluster],
                     group: list[Critique]) -> list[Cluster]:
        """Clusters after the synthesizer's merges of the largest ones and assignment of
        stragglers to them; the same list when nothing changed (no synthesizer, calls of
        this run spent, its judge deadline passed, nothing to merge or assign, a refused
        reply)."""
        limit = self._config.synthesis_max_issues
        if (self._synthesizer is None or limit == 0 or not clusters
                or (len(clusters) < 2 and not strays) or self._synthesis_calls_left <= 0):
            return clusters
        if self._monotonic() >= self._naming_deadline:  # a hanging judge: no call more
            log.warning("issues.naming_deadline_s reached: a group's issues are not merged "
                        "in this run")
            return clusters
        self._synthesis_calls_left -= 1
        order = sorted(range(len(clusters)), key=lambda i: (-len(clusters[i].members), i))
        order = order[:limit]
        strays = sorted(strays, key=lambda c: -len(c.members))[:limit]
        from otel_eval.outputs.issues.naming import terms_title

        drafts = []
        for i in order:
            examples = tuple(dict.fromkeys(group[m].text for m in clusters[i].members))
            drafts.append(Draft(terms_title(clusters[i].terms) or examples[0][:80],
                                examples[:_SYNTHESIS_EXAMPLES], len(clusters[i].members)))
        plan = synthesize(drafts, [group[c.members[0]].text for c in strays],
                          self._synthesizer)
        if not plan:
            return clusters
        joins: dict[int, list[Cluster]] = {}
        for s, d in plan.assign:
            joins.setdefault(order[d], []).append(strays[s])

        def whole(i: int) -> Cluster:
            parts = joins.get(i)
            return merged([clusters[i], *parts], clusters[i].name) if parts else clusters[i]
        gone = {order[d] for m in plan.merges for d in m.drafts}
        joined = [merged([whole(order[d]) for d in m.drafts], (m.title, m.description))
                  for m in plan.merges]
        return joined + [whole(i) for i in range(len(clusters)) if i not in gone]

    def _labels(self, x: Matrix, uid: list[int], group: list[Critique]) -> Any:
        """Cluster label of each distinct text (numpy array): cut, merged, stragglers
        attached. Imports scikit-learn, like ``_clusters``."""
        import numpy as np

        from otel_eval.outputs.issues.cluster import cluster
        from otel_eval.outputs.issues.refine import attach_stragglers, merge_clusters

        cfg = self._config
        labels = cluster(x, cfg.threshold, cfg.max_exact)
        if labels.size == 0:
            return labels
        if cfg.merge_similarity < 1.0:
            labels = merge_clusters(x, labels, cfg.merge_similarity)
        if cfg.attach_stragglers:
            traces: dict[int, set[str]] = {}
            for i, u in enumerate(uid):
                traces.setdefault(int(labels[u]), set()).add(group[i].trace_id)
            is_issue = np.array([len(traces.get(k, ())) >= cfg.min_cluster_size
                                 for k in range(int(labels.max()) + 1)])
            labels = attach_stragglers(x, labels, is_issue)
        return labels

    def _clusters(self, group: list[Critique],
                  candidates: list[StoredIssue]) -> list[Cluster]:
        """Cluster one (level, node) group on its distinct normalized texts. numpy, scipy
        and scikit-learn (~100 MB resident) are imported here, on the first group to cluster:
        an idle serve never pays for them."""
        import numpy as np

        from otel_eval.outputs.issues.naming import central_order, centroid, top_terms

        position: dict[str, int] = {}
        uid = [position.setdefault(normalize(c.text), len(position)) for c in group]
        unique = list(position)
        x, features = self._embedder.embed(unique)
        known = {f for s in candidates for f in s.centroid}
        x = recurring_terms(x, _row_traces(uid, group, len(unique)),
                            self._config.term_min_traces, [f in known for f in features])
        whole_words = isinstance(self._embedder, TfidfEmbedder) and not self._embedder.stem_chars
        term_x, terms = (x, features) if whole_words else TfidfEmbedder().embed(unique)
        if self._taxonomy is not None:
            x, features = self._taxonomy.extend(x, features, unique, self._config.taxonomy)
        labels = same_problem(self._labels(x, uid, group), uid, group)
        # texts and critiques by label in one pass each: a scan of the labels per label was
        # quadratic when every text is its own cluster (a window with no vocabulary)
        rows_of: dict[int, list[int]] = {}
        for r, label in enumerate(np.asarray(labels).tolist()):
            rows_of.setdefault(label, []).append(r)
        by_label: dict[int, list[int]] = {}
        for i, u in enumerate(uid):
            by_label.setdefault(int(labels[u]), []).append(i)
        out: list[Cluster] = []
        for label, members in sorted(by_label.items()):
            rows = np.asarray(rows_of[label], dtype=np.int64)
            sub = x[rows]
            cen = centroid(sub)
            ordered = central_order(sub, [unique[int(r)] for r in rows])
            rank = {int(rows[k]): r for r, k in enumerate(ordered)}
            weights = {features[j]: float(cen[j]) for j in np.flatnonzero(cen)}
            if not weights:  # no term (stop words only): its texts match it across runs
                weights = {_TEXT_FEATURE + _digest(unique[int(r)]): 1.0 for r in rows}
            out.append(Cluster(
                members=sorted(members, key=lambda m: (rank[uid[m]], group[m].text, m)),
                centroid=sparse_centroid(weights),
                terms=top_terms(term_x[rows], terms, self._config.title_terms)))
        return out


class _Names(dict[int, "Name"]):
    """Cluster index -> the namer's name, and the indexes the naming deadline deferred."""

    def __init__(self) -> None:
        super().__init__()
        self.deferred: set[int] = set()


def _digest(text: str) -> str:
    """A bounded key for a normalized critique text (``IssueTracker._previous``)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _row_traces(uid: list[int], group: list[Critique], rows: int) -> list[list[int]]:
    """For each distinct text (row), the traces (numbered) whose critiques have it."""
    number: dict[str, int] = {}
    out: list[set[int]] = [set() for _ in range(rows)]
    for i, u in enumerate(uid):
        out[u].add(number.setdefault(group[i].trace_id, len(number)))
    return [sorted(s) for s in out]


def _event(issue: Issue, previous: float | None, jump: float) -> IssueEvent | None:
    if previous is None:
        return IssueEvent("new", issue, None)
    if issue.share - previous >= jump:
        return IssueEvent("share_jump", issue, previous)
    return None


def issues_offline(evaluations: Iterable[Mapping[str, Any]],
                   config: IssuesConfig | None = None, now: float | None = None,
                   namer: Namer | None = None,
                   synthesizer: Synthesizer | None = None,
                   redact: Redact = None) -> IssuesResult:
    """One run with a throw-away in-memory catalogue (the ``otel-eval issues`` command)."""
    tracker = IssueTracker(config or IssuesConfig(), sqlite3.connect(":memory:"),
                           namer=namer, synthesizer=synthesizer, redact=redact)
    return tracker.run(evaluations, time.time() if now is None else now)

