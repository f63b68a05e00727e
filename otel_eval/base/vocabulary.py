"""The terms a TF-IDF model keeps, chosen the same on every machine.

``top_terms`` is what scikit-learn's ``min_df`` and ``max_features`` choose (terms in at least
``min_df`` documents, the ``max_terms`` most frequent by count over all documents, indexed in
alphabetical order), but for a tie at the cut: scikit-learn ranks by numpy's unstable
``argsort``, whose SIMD kernels order equal counts differently from one CPU to another (the
same 350 dev runs kept 318 of 8,000 terms differently on two machines). Here a tie goes to
the term that sorts first, whatever the machine and the documents' order. Passed to
``TfidfVectorizer(vocabulary=...)`` by the success predictor's ``train`` and the issues
embedder.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

__all__ = ["top_terms"]


def top_terms(documents: Iterable[Iterable[str]], max_terms: int,
              min_df: int = 1) -> dict[str, int]:
    """term -> column: the chosen terms of the analysed ``documents``, in alphabetical order."""
    total: Counter[str] = Counter()
    in_documents: Counter[str] = Counter()
    for document in documents:
        counts = Counter(document)
        total.update(counts)
        in_documents.update(counts.keys())
    frequent = sorted((t for t, n in in_documents.items() if n >= min_df),
                      key=lambda t: (-total[t], t))
    return {t: i for i, t in enumerate(sorted(frequent[:max_terms]))}
