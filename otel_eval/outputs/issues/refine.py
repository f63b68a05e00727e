"""Issue stage, step 4b: refine the clusters before they become issues.

    cluster labels -> merge_clusters (one kind of problem, one cluster)
                   -> attach_stragglers (a critique left out joins the issue it is typical of)

Both rules compare a cluster through its *centroid* (the mean of its L2-normalized rows)
and are relative to the clusters' own cohesion, so they need no threshold fitted to the
embedding's scale:

- the cosine of two normalized centroids is the mean similarity of cross pairs divided by
  the geometric mean of the two within-cluster mean similarities; ``merge_similarity`` 0.5
  merges two clusters whose critiques are, across, at least half as alike as within;
- a member's mean cosine to its normalized centroid is the norm of the unnormalized mean
  (the cluster's cohesion); a straggler joins its nearest issue only when it is at least
  that close to it, i.e. when it would be an average member, not an outlier.

Cost is bounded: merging works on the centroid matrix (m x m, m clusters, at most
``IssuesConfig.max_exact`` when the input is reduced to micro-clusters first), attaching
is linear in the rows (rows x issues, in chunks of ``_CHUNK`` rows). Pure functions.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse
from sklearn.cluster import AgglomerativeClustering

from otel_eval.outputs.issues.embed import Matrix

_CHUNK = 4096  # rows scored against the issue centroids at a time (bounds memory)


def _relabel(labels: np.ndarray) -> np.ndarray:
    """Labels renumbered 0..k-1 in order of first appearance (deterministic)."""
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    order = np.argsort(np.argsort(first, kind="stable"), kind="stable")
    return np.asarray(order[inverse], dtype=np.int64)


def centroid_means(x: Matrix, labels: np.ndarray) -> np.ndarray:
    """Dense (k x d) mean row of each label 0..k-1 (unnormalized)."""
    k = int(labels.max()) + 1 if labels.size else 0
    n = labels.shape[0]
    counts = np.bincount(labels, minlength=k).astype(np.float64)
    member = sparse.csr_matrix((1.0 / counts[labels], (labels, np.arange(n))), shape=(k, n))
    means = member @ x
    return np.asarray(means.toarray() if sparse.issparse(means) else means, dtype=np.float64)


def _unit(means: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    norms = np.linalg.norm(means, axis=1)
    safe = np.where(norms > 0, norms, 1.0)
    return means / safe[:, None], norms


def merge_clusters(x: Matrix, labels: np.ndarray, similarity: float) -> np.ndarray:
    """Merge clusters whose normalized centroids all have cosine >= ``similarity`` with each
    other (complete linkage over centroids: no chaining of unlike clusters through a middle
    one). Returns new labels 0..k'-1."""
    if labels.size == 0 or x.shape[1] == 0:
        return labels
    labels = _relabel(labels)
    units, _ = _unit(centroid_means(x, labels))
    if units.shape[0] < 2:
        return labels
    dist = np.clip(1.0 - units @ units.T, 0.0, 2.0)
    np.fill_diagonal(dist, 0.0)
    model = AgglomerativeClustering(n_clusters=None, metric="precomputed", linkage="complete",
                                    distance_threshold=1.0 - similarity)
    merged = np.asarray(model.fit_predict(dist), dtype=np.int64)
    return _relabel(merged[labels])


def attach_stragglers(x: Matrix, labels: np.ndarray, is_issue: np.ndarray) -> np.ndarray:
    """Move each row whose label is not an issue (``is_issue[label]`` False) to its nearest
    issue when its cosine to that issue's centroid reaches the issue's cohesion (its
    members' mean cosine to the centroid). Other rows keep their label."""
    issues = np.flatnonzero(is_issue)
    out = labels.copy()
    if issues.size == 0 or x.shape[1] == 0:
        return out
    units, cohesion = _unit(centroid_means(x, labels)[issues])
    stragglers = np.flatnonzero(~is_issue[labels])
    for start in range(0, stragglers.size, _CHUNK):
        rows = stragglers[start : start + _CHUNK]
        sims = x[rows] @ units.T
        sims = np.asarray(sims.toarray() if sparse.issparse(sims) else sims)
        best = np.argmax(sims, axis=1)
        close = sims[np.arange(rows.size), best] >= cohesion[best]
        out[rows[close]] = issues[best[close]]
    return out
