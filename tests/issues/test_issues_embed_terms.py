"""The recurring-terms filter (``embed.recurring_terms``): a TF-IDF term seen in the
critiques of one trace only is dropped before clustering, which is the same as removing the
word from the texts before TF-IDF (idf and sublinear tf are per term)."""

from __future__ import annotations

import numpy as np
from scipy import sparse

from otel_eval.outputs.issues.embed import TfidfEmbedder, recurring_terms

TEXTS = [
    "tool called with wrong arguments while searching bulgarian census",  # trace 0
    "final answer hallucinated the bulgarian census figure",  # trace 0
    "tool called with wrong arguments on the page reader",  # trace 1
    "final answer hallucinated a population",  # trace 2
]
TRACES = [[0], [0], [1], [2]]


def _dense(x: object) -> np.ndarray:
    return np.asarray(x.toarray() if sparse.issparse(x) else x)  # type: ignore[attr-defined]


def test_terms_of_one_trace_are_dropped_and_rows_renormalized() -> None:
    x, terms = TfidfEmbedder(ngram_max=1, stem_chars=5).embed(TEXTS)
    out = _dense(recurring_terms(x, TRACES, 2))
    kept = {terms[j] for j in np.flatnonzero(out.any(axis=0))}
    assert {"bulga", "censu", "searc", "page", "reade", "popul"}.isdisjoint(kept)
    assert {"tool", "calle", "wrong", "argum", "final", "answe", "hallu"} <= kept
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0)
    # the two critiques of trace 0 were alike through the subject words; now they are not,
    # and each is closer to the other trace's critique of its own problem
    before, after = _dense(x @ x.T), out @ out.T
    assert before[0, 1] > 0 and after[0, 1] == 0
    assert after[0, 2] > before[0, 2] and after[1, 3] > before[1, 3]


def test_same_as_removing_the_words_before_tfidf() -> None:
    x, terms = TfidfEmbedder(ngram_max=1, stem_chars=5).embed(TEXTS)
    out = _dense(recurring_terms(x, TRACES, 2))
    gone = ("searching", "bulgarian", "census", "figure", "page", "reader", "population")
    stripped = [" ".join(w for w in t.split() if w not in gone) for t in TEXTS]
    y, names = TfidfEmbedder(ngram_max=1, stem_chars=5).embed(stripped)
    order = [terms.index(n) for n in names]
    assert np.allclose(out[:, order], _dense(y), atol=1e-6)


def test_a_text_in_two_traces_counts_both_and_a_text_left_empty_is_zero() -> None:
    texts = ["alpha beta", "alpha gamma", "delta"]
    x, terms = TfidfEmbedder(ngram_max=1).embed(texts)
    out = _dense(recurring_terms(x, [[0, 1], [2], [3]], 2))
    assert set(terms[j] for j in np.flatnonzero(out.any(axis=0))) == {"alpha", "beta"}
    assert not out[2].any()  # "delta": one trace only; no term left: distance 1 to all


def test_unchanged_when_nothing_could_recur_or_the_filter_is_off() -> None:
    x, _ = TfidfEmbedder(ngram_max=1).embed(TEXTS)
    assert recurring_terms(x, [[0]] * 4, 2) is x  # a one-trace window: carry-over needs it
    assert recurring_terms(x, TRACES, 1) is x
    dense = _dense(x)
    assert recurring_terms(dense, TRACES, 2) is dense  # MiniLM's dimensions are no terms


def test_the_vectors_are_scikit_learns_where_no_count_ties_at_the_cut() -> None:
    from sklearn.feature_extraction.text import TfidfVectorizer

    texts = ["timeout timeout timeout retry retry search", "timeout retry search search",
             "timeout error"]  # counts: timeout 5, retry 3, search 3, error 1: cut at 3
    x, terms = TfidfEmbedder(ngram_max=1, max_features=3).embed(texts)
    theirs = TfidfVectorizer(stop_words="english", token_pattern=r"(?u)\b[a-z][a-z_]+\b",
                             sublinear_tf=True, max_features=3, dtype=np.float32)
    expected = theirs.fit_transform(texts)
    assert terms == list(theirs.get_feature_names_out()) == ["retry", "search", "timeout"]
    assert np.allclose(_dense(x), _dense(expected))


def test_a_tie_at_the_cut_keeps_the_terms_that_sort_first_in_any_order() -> None:
    # 3,000 words, each once or twice: the cut at 1,000 falls inside a run of equal counts,
    # where scikit-learn's max_features chose by numpy's unstable sort (different per CPU)
    words = [f"w{chr(97 + k // 676)}{chr(97 + k // 26 % 26)}{chr(97 + k % 26)}"
             for k in range(3000)]
    texts = [" ".join(words[i::7]) + " " + " ".join(words[i::2][:50]) for i in range(7)]
    kept = TfidfEmbedder(ngram_max=1, max_features=1000).embed(texts)[1]
    assert TfidfEmbedder(ngram_max=1, max_features=1000).embed(texts[::-1])[1] == kept
    count = {w: sum(t.split().count(w) for t in texts) for w in words}
    dropped = set(words) - set(kept)
    assert len(kept) == 1000
    cut = min(count[w] for w in kept)
    assert all(count[w] <= cut for w in dropped)
    tied_kept = [w for w in kept if count[w] == cut]
    tied_dropped = [w for w in dropped if count[w] == cut]
    assert tied_kept and tied_dropped and max(tied_kept) < min(tied_dropped)
