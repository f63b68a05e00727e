"""Issue stage, step 5: name each cluster.

Deterministic by default: the title is the first clause of the cluster's most central
critique (the one closest to the centroid), cut to a phrase at a word boundary ("read_file
called 2 times in a row with identical arguments"), the description that critique; the top
TF-IDF terms only name a cluster whose central critique has no words.
When the lead injects a ``Namer`` (e.g. the judge model), it is asked for a short title and a
one-sentence description from the central critiques, as CLEAR synthesises its issues; a namer
that fails or answers None falls back to the deterministic name. Only *new* issues are named:
a matched issue keeps its stored name so dashboard series do not churn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
from scipy import sparse

from otel_eval.base.words import join_words
from otel_eval.outputs.issues.embed import PLACEHOLDERS, Matrix

log = logging.getLogger(__name__)

# (central critiques, most central first) -> (title, description); None: the call was sent
# and failed (the evidence title stands: a name is asked once); NOT_SENT: no call was sent
# (the judge's hourly budget spent, no judge running): the issue is marked unnamed and a
# later run names it
Namer = Callable[[Sequence[str]], "tuple[str, str] | Literal['not_sent'] | None"]
NOT_SENT: Final = "not_sent"

_DESCRIPTION_CHARS = 300


@dataclass(frozen=True, slots=True)
class Name:
    title: str
    description: str


def centroid(x: Matrix) -> np.ndarray:
    """L2-normalized mean row of ``x`` (dense 1-d)."""
    mean = np.asarray(x.mean(axis=0)).ravel().astype(np.float64)
    norm = float(np.linalg.norm(mean))
    return mean / norm if norm > 0 else mean


def central_order(x: Matrix, keys: Sequence[str] | None = None) -> list[int]:
    """Row indexes of ``x`` from most to least similar to the centroid. Ties (equal to 6
    decimals, so summation order does not matter) go to the smaller key (the row's text:
    independent of input order), else to the first row."""
    sims = np.round(np.asarray(x @ centroid(x)).ravel(), 6)
    if keys is None:
        return [int(i) for i in np.argsort(-sims, kind="stable")]
    order = sorted(range(len(keys)), key=lambda i: (-float(sims[i]), keys[i]))
    return order


def top_terms(x: Matrix, terms: Sequence[str], k: int) -> list[str]:
    """The ``k`` highest-weight terms of the cluster rows (no placeholder, no sub-term of a
    chosen bigram)."""
    if x.shape[1] == 0:
        return []
    weights = np.asarray(x.sum(axis=0)).ravel() if sparse.issparse(x) else x.sum(axis=0)
    chosen: list[str] = []
    for i in np.argsort(-weights, kind="stable"):
        term = terms[int(i)]
        words = term.split()
        if weights[int(i)] <= 0 or any(w in PLACEHOLDERS for w in words):
            continue
        if any(term in c.split() or c in words for c in chosen):
            continue
        chosen.append(term)
        if len(chosen) == k:
            break
    return chosen


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


_TITLE_CHARS = 72
# Where a critique's first clause ends: a sentence end, a semicolon, a dash between words.
_CLAUSE_ENDS = (". ", "; ", " - ", " — ", ": ")


def phrase(text: str, limit: int = _TITLE_CHARS) -> str:
    """The first clause of ``text``, on one line, cut at a word boundary to ``limit``
    characters (with an ellipsis), without a trailing full stop."""
    flat = " ".join(text.split())
    cut = min((i for i in (flat.find(e) for e in _CLAUSE_ENDS) if i > 0), default=len(flat))
    clause = flat[:cut].rstrip(" .;:,")
    if len(clause) <= limit:
        return clause
    head = clause[: limit - 1]
    space = head.rfind(" ")
    return (head[:space] if space > limit // 2 else head).rstrip(" ,;:") + "…"


def terms_title(terms: Sequence[str]) -> str:
    """The terms as a title: comma-separated, each written as a reader writes it (a Chinese
    term's characters without the analyser's spaces: "答案", not "答 案")."""
    return ", ".join(join_words(t) for t in terms)


def deterministic_name(terms: list[str], central_text: str) -> Name:
    title = phrase(central_text) or terms_title(terms)
    return Name(title=title, description=_shorten(central_text, _DESCRIPTION_CHARS))


def name_cluster(terms: list[str], central_texts: Sequence[str],
                 namer: Namer | None = None) -> Name | None:
    """Name one new cluster; ``central_texts`` most central first (non-empty). None when
    the namer sent no call (``NOT_SENT``): the cluster is still to be named."""
    fallback = deterministic_name(terms, central_texts[0])
    if namer is None:
        return fallback
    try:
        named = namer(central_texts)
    except Exception:  # a stage boundary: the namer is someone else's model call
        log.warning("issue namer failed; using the deterministic name", exc_info=True)
        return fallback
    if named == NOT_SENT:
        return None
    if not named or not named[0].strip():
        return fallback
    return Name(title=_shorten(named[0], 80), description=_shorten(named[1], _DESCRIPTION_CHARS))
