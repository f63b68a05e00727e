"""Issue stage, step 4: group critique vectors into clusters.

Algorithm (chosen by measurement on TRAIL GAIA, see bench/README.md): agglomerative
clustering, average linkage, cosine distance, cut at a distance threshold, so the number of
issues is not fixed in advance and one odd critique does not chain clusters together (as
single linkage does) nor force equal-size clusters (as k-means does).

Exact agglomerative clustering needs the n x n distance matrix (memory and time quadratic).
Above ``max_exact`` rows the vectors are first reduced to ``max_exact`` k-means
micro-clusters (sparse inputs projected to 128 dimensions by truncated SVD first), and the
micro-cluster centroids are clustered agglomeratively; each row takes its micro-cluster's
label. Results are deterministic (fixed seeds).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from scipy import sparse
from sklearn.cluster import AgglomerativeClustering, MiniBatchKMeans
from sklearn.decomposition import TruncatedSVD
from sklearn.preprocessing import normalize as l2_normalize

from otel_eval.outputs.issues.embed import Matrix

Linkage = Literal["average", "complete", "single"]

_SVD_DIMS = 128
_SEED = 0


def _agglomerate(x: Matrix, threshold: float, linkage: Linkage) -> np.ndarray:
    n = x.shape[0]
    if n == 1:
        return np.zeros(1, dtype=np.int64)
    sims = x @ x.T
    sims = sims.toarray() if sparse.issparse(sims) else np.asarray(sims)
    dist = np.clip(1.0 - sims.astype(np.float64), 0.0, 2.0)
    np.fill_diagonal(dist, 0.0)
    # An all-zero row (no known term) is at distance 1 from everything: its own cluster.
    model = AgglomerativeClustering(n_clusters=None, metric="precomputed", linkage=linkage,
                                    distance_threshold=threshold)
    return np.asarray(model.fit_predict(dist), dtype=np.int64)


def _reduce(x: Matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Micro-clusters: (label of each row, L2-normalized centroid of each micro-cluster)."""
    if sparse.issparse(x):
        dims = min(_SVD_DIMS, x.shape[1] - 1)
        if dims >= 2:
            x = l2_normalize(TruncatedSVD(dims, random_state=_SEED).fit_transform(x))
        else:
            x = x.toarray()
    # Random init: k-means++ seeding of thousands of centres costs minutes and only serves
    # the reduction, which the agglomerative step then corrects.
    km = MiniBatchKMeans(n_clusters=k, init="random", random_state=_SEED, n_init=1,
                         batch_size=4096, max_iter=20)
    labels = km.fit_predict(np.asarray(x, dtype=np.float32))
    return labels, l2_normalize(km.cluster_centers_)


def cluster(x: Matrix, threshold: float, max_exact: int,
            linkage: Linkage = "average") -> np.ndarray:
    """Cluster label (0..m-1) of each row of ``x`` (L2-normalized rows). ``linkage`` other
    than average is for the benchmark's comparison."""
    n = x.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if n <= max_exact or x.shape[1] == 0:
        return (_agglomerate(x, threshold, linkage) if x.shape[1]
                else np.arange(n, dtype=np.int64))
    micro, centroids = _reduce(x, max_exact)
    return _agglomerate(centroids, threshold, linkage)[micro]
