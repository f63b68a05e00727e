"""Issue stage, step 3b: a failure taxonomy's pull on the critique vectors.

    normalized critique -> 5-letter stems -> TF-IDF (the model's vocabulary) -> logistic
      regression -> P(category) -> (P - prior) x weight -> K more columns of the vector

Words alone put two critiques of one kind of problem far apart when they use different words
("the final answer is not in the requested format" and "printed the list where a number was
asked"), and two of different kinds close when they share a topic. A taxonomy of agent
failures learnt from people's labels (TRAIL's categories: formatting errors, goal deviation,
tool selection, resource abuse, ...) adds one column per category, each critique's
probability of it minus the model's prior (its probability for a text with no word it
knows), times ``IssuesConfig.taxonomy_weight``: critiques the model puts in one category
are pulled together; one with no word it knows gets zeros there and is clustered by its
words alone, as before. The columns
are named ``category:<name>``, so stored centroids keep comparing term by term.

The shipped model (``models/taxonomy.json``) is trained by ``bench/issues_taxonomy.py
--train`` on the human error descriptions of TRAIL GAIA's dev half and their categories,
and on nothing else. A model file is data (JSON, validated), never code.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from otel_eval.base.documents import finite_numbers, short_name
from otel_eval.outputs.issues.embed import Matrix, TfidfEmbedder

FORMAT = "otel-eval-issue-taxonomy"
FORMAT_VERSION = 1
DEFAULT_MODEL = Path(__file__).resolve().parent / "models" / "taxonomy.json"
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_TERMS = 50_000
MAX_CATEGORIES = 100
COLUMN_PREFIX = "category:"
CHUNK = 1024  # texts whose terms are held at once


class TaxonomyFileError(ValueError):
    """A taxonomy file that cannot be used, with the reason."""


@dataclass(frozen=True)
class Taxonomy:
    """A loaded, validated taxonomy model: ``probabilities(texts)`` in O(words)."""

    name: str
    categories: tuple[str, ...]
    stem_chars: int
    terms: dict[str, tuple[int, float]]  # stem -> (column, idf)
    coefficients: tuple[tuple[float, ...], ...]  # per category, per term
    intercepts: tuple[float, ...]  # per category

    @cached_property
    def _arrays(self) -> tuple[Any, Any]:
        """(weights (terms, categories), intercepts) as numpy arrays: made on first use, so
        loading a taxonomy (serve's start) does not import numpy."""
        import numpy as np

        return np.array(self.coefficients).T, np.array(self.intercepts)

    @property
    def columns(self) -> list[str]:
        return [COLUMN_PREFIX + c for c in self.categories]

    def probabilities(self, texts: list[str]) -> Any:
        """P(category) of each normalized text (rows sum to 1), ``CHUNK`` texts at a time
        (what is held in Python objects stays bounded whatever the window)."""
        import numpy as np

        if len(texts) <= CHUNK:
            return self._chunk(texts)
        return np.vstack([self._chunk(texts[i:i + CHUNK])
                          for i in range(0, len(texts), CHUNK)])

    def _chunk(self, texts: list[str]) -> Any:
        import numpy as np
        from scipy import sparse

        stems = TfidfEmbedder(stem_chars=self.stem_chars)._analyzer()
        rows, cols, vals = [], [], []
        for r, text in enumerate(texts):
            counts = Counter(s for s in stems(text) if s in self.terms)
            weighted = {self.terms[s][0]: (1 + math.log(n)) * self.terms[s][1]
                        for s, n in counts.items()}
            norm = math.sqrt(sum(v * v for v in weighted.values())) or 1.0
            for c, v in weighted.items():
                rows.append(r)
                cols.append(c)
                vals.append(v / norm)
        x = sparse.csr_matrix((vals, (rows, cols)), shape=(len(texts), len(self.terms)))
        weights, intercepts = self._arrays
        z = np.asarray(x @ weights) + intercepts
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        return p / p.sum(axis=1, keepdims=True)

    def extend(self, x: Matrix, features: list[str], texts: list[str],
               weight: float) -> tuple[Matrix, list[str]]:
        """``x`` (one L2-normalized row per text) with the taxonomy's columns appended,
        (P - P of no known word) x ``weight``, rows normalized again."""
        import numpy as np
        from scipy import sparse
        from sklearn.preprocessing import normalize as l2_normalize

        # minus what the model says of a text with no word it knows (its prior): a critique
        # it cannot place is left where its words put it
        pull = (self.probabilities(texts) - self.probabilities([""])) * weight
        if sparse.issparse(x):
            both = sparse.hstack([x, sparse.csr_matrix(pull.astype(np.float32))]).tocsr()
        else:
            both = np.hstack([np.asarray(x), pull.astype(np.float32)])
        return l2_normalize(both), [*features, *self.columns]


def from_document(doc: Any) -> Taxonomy:
    """A ``Taxonomy`` from a parsed document; ValueError says which field is wrong."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"format: expected {FORMAT!r}")
    if doc.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"format_version: this otel-eval reads version {FORMAT_VERSION}")
    categories = doc.get("categories")
    if not isinstance(categories, list) or not 2 <= len(categories) <= MAX_CATEGORIES:
        raise ValueError(f"categories: expected a list of 2 to {MAX_CATEGORIES} names")
    names = tuple(short_name(c, "categories[]") for c in categories)
    terms = doc.get("terms")
    if not isinstance(terms, list) or not 0 < len(terms) <= MAX_TERMS:
        raise ValueError(f"terms: expected a list of 1 to {MAX_TERMS} stems")
    stems = [short_name(t, "terms[]") for t in terms]
    idf = finite_numbers(doc.get("idf"), len(stems), "idf")
    rows = doc.get("coefficients")
    if not isinstance(rows, list) or len(rows) != len(names):
        raise ValueError("coefficients: expected one list per category")
    weights = tuple(finite_numbers(r, len(stems), "coefficients[]") for r in rows)
    table = {s: (i, w) for i, (s, w) in enumerate(zip(stems, idf, strict=True))}
    if len(table) != len(stems) or len(set(names)) != len(names):
        raise ValueError("terms and categories must not repeat")
    stem_chars = doc.get("stem_chars")
    if isinstance(stem_chars, bool) or not isinstance(stem_chars, int) or stem_chars < 1:
        raise ValueError("stem_chars: expected a positive integer")
    return Taxonomy(short_name(doc.get("name"), "name"), names, stem_chars, table, weights,
                    finite_numbers(doc.get("intercepts"), len(names), "intercepts"))


def load_taxonomy(path: str | Path) -> Taxonomy:
    """Read and validate a taxonomy file (``default``: the shipped one)."""
    where = DEFAULT_MODEL if str(path) == "default" else Path(path)
    try:
        with open(where, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise ValueError(f"larger than {MAX_FILE_BYTES} bytes")
        return from_document(json.loads(raw.decode("utf-8")))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise TaxonomyFileError(f"taxonomy file {where}: {e}") from None
