"""The failure taxonomy's pull on critique vectors (``outputs/issues/taxonomy.py``): the shipped
model loads and is small, a hostile file is refused with the reason, a critique with no word
the model knows is left where its words put it, two critiques of one category in different
words are pulled together, and the tracker's stored centroids name the taxonomy's columns."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from otel_eval.outputs.issues.catalogue import Catalogue
from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.embed import TfidfEmbedder
from otel_eval.outputs.issues.taxonomy import (
    COLUMN_PREFIX,
    DEFAULT_MODEL,
    TaxonomyFileError,
    load_taxonomy,
)
from otel_eval.outputs.issues.tracker import IssueTracker


def _doc() -> dict[str, Any]:
    """A two-category model: "formatting" reads "format", "tool selection" reads "wrong"."""
    return {"format": "otel-eval-issue-taxonomy", "format_version": 1, "name": "t",
            "stem_chars": 5, "categories": ["formatting", "tool selection"],
            "terms": ["forma", "wrong"], "idf": [1.0, 1.0],
            "coefficients": [[4.0, -4.0], [-4.0, 4.0]], "intercepts": [0.0, 0.0]}


def _write(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "taxonomy.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_the_shipped_taxonomy_loads_and_is_small() -> None:
    taxonomy = load_taxonomy("default")
    assert len(taxonomy.categories) >= 10 and "formatting" in taxonomy.categories
    assert DEFAULT_MODEL.stat().st_size < 1024 * 1024
    p = taxonomy.probabilities(["formatting error: the code block was not wrapped in the "
                                "required format"])
    assert p.shape == (1, len(taxonomy.categories)) and p.sum() == pytest.approx(1.0)
    assert taxonomy.categories[int(p.argmax())] == "formatting"


@pytest.mark.parametrize(("change", "problem"), [
    ({"format": "pickle"}, "format"),
    ({"idf": [1.0, float("nan")]}, "not a finite number"),
    ({"coefficients": [[1.0, 2.0]]}, "one list per category"),
    ({"terms": ["forma", "forma"]}, "must not repeat"),
    ({"categories": ["only one"]}, "categories"),
    ({"stem_chars": True}, "stem_chars"),
])
def test_a_bad_file_is_refused_with_the_reason(tmp_path: Path, change: dict[str, Any],
                                               problem: str) -> None:
    with pytest.raises(TaxonomyFileError, match=problem):
        load_taxonomy(_write(tmp_path, {**_doc(), **change}))
    with pytest.raises(TaxonomyFileError, match="taxonomy file"):
        load_taxonomy(_write(tmp_path, "{not json"))


def test_a_tracker_with_a_missing_taxonomy_file_fails_at_start(tmp_path: Path) -> None:
    config = IssuesConfig(taxonomy_model=str(tmp_path / "absent.json"), taxonomy_weight=1.0)
    with pytest.raises(TaxonomyFileError, match=r"absent\.json"):
        IssueTracker(config, sqlite3.connect(":memory:"))


def test_unknown_words_get_no_pull_and_one_category_in_other_words_is_pulled_together(
        tmp_path: Path) -> None:
    taxonomy = load_taxonomy(_write(tmp_path, _doc()))
    texts = ["answer format broken badly", "format of output totally off",
             "nothing the model knows here"]
    x, features = TfidfEmbedder(stem_chars=5).embed(texts)
    pulled, names = taxonomy.extend(x, features, texts, 2.0)
    assert names[-2:] == [COLUMN_PREFIX + "formatting", COLUMN_PREFIX + "tool selection"]
    dense = pulled.toarray()
    assert np.allclose(dense[2, -2:], 0.0)  # no known word: no pull
    assert np.allclose(dense[2, :-2], x.toarray()[2])  # and its words' vector unchanged
    words = x.toarray()
    before, after = float(words[0] @ words[1]), float(dense[0] @ dense[1])
    assert after > before + 0.3  # both "format": one category, pulled together
    assert not taxonomy.extend(x, features, texts, 0.0)[0].toarray()[:, -2:].any()


def test_the_tracker_clusters_with_the_taxonomy_columns_named(tmp_path: Path) -> None:
    path = _write(tmp_path, _doc())
    evaluations = [{"trace_id": f"{k:032x}", "agent": "a", "steps": [], "findings": [],
                    "judge": {"judges": {"j": {"critiques": [
                        {"span_id": "s1", "score": 0.0,
                         "text": ["the format is broken", "wrong format of the answer",
                                  "picked the wrong tool"][k % 3]}]}}}}
                   for k in range(9)]
    stored = {}
    for weight in (2.0, 0.0):
        db = sqlite3.connect(":memory:")
        tracker = IssueTracker(IssuesConfig(taxonomy_model=str(path), taxonomy_weight=weight),
                               db)
        assert tracker.run(evaluations, now=0.0).issues
        stored[weight] = [set(s.centroid) for s in Catalogue(db).load("tfidf")]
    assert any(COLUMN_PREFIX + "formatting" in c for c in stored[2.0])
    assert not any(COLUMN_PREFIX + "formatting" in c for c in stored[0.0])


def test_probabilities_a_chunk_at_a_time_are_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    from otel_eval.outputs.issues import taxonomy as module

    taxonomy = load_taxonomy("default")
    texts = [f"formatting error number {i}: tool output was misread" if i % 2 else
             "the agent repeated the same search" for i in range(7)]
    whole = taxonomy.probabilities(texts)
    monkeypatch.setattr(module, "CHUNK", 2)
    assert np.array_equal(taxonomy.probabilities(texts), whole)
