"""The run's text in the predictor: scikit-learn's analyzer written out in plain Python (the
same terms on the datasets' texts), bounded text, and a model with text in its JSON file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

from otel_eval.app.config import Config
from otel_eval.base.model import Evaluation, Step, Trajectory
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.predict import Predictor
from otel_eval.evaluate.predict.config import DEFAULT_MODEL_FILE, PredictionConfig
from otel_eval.evaluate.predict.modelfile import from_document, load_model
from otel_eval.evaluate.predict.text import MAX_RUN_TEXT_CHARS, NGRAM_MAX, run_text, terms
from otel_eval.evaluate.predict.train import Row, fit
from otel_eval.receive.loaders import load_path

TAU = Path("tau-bench/airline/gpt-4o-airline.runs.json")


def _evaluations(datasets: Path) -> list[Evaluation]:
    evaluator = Evaluator(Config(prediction=PredictionConfig(model_path="")))
    return [evaluator.evaluate(t) for t in load_path(datasets / TAU)]


def test_terms_are_scikit_learns_word_analyzer_on_the_datasets(datasets: Path) -> None:
    sklearn_terms = CountVectorizer(ngram_range=(1, NGRAM_MAX)).build_analyzer()
    texts = [run_text(ev) for ev in _evaluations(datasets)]
    texts += ["Straße ÉTÉ x y_z 42 a-b", "", "\ud800? \u00e9t\u00e9", "\u212a\u212a ok",
              "".join(map(chr, range(128))) * 2, "ab\x1fcd\x0bef gh\x1cij_k l m9 99"]
    for text in texts:
        assert terms(text) == sklearn_terms(text)


def test_run_text_is_bounded_whatever_the_run_says() -> None:
    huge = "unable " * 100_000
    steps = [Step(index=i, span_id=f"{i:016x}", parent_span_id=None, kind=kind, name="x",
                  status="error", error=huge, result=huge, answer=huge)
             for i, kind in enumerate(["llm", "tool"] * 200)]
    t = Trajectory(trace_id="ab" * 16, source="test", status="complete", steps=steps,
                   output=huge)
    text = run_text(Evaluation(trajectory=t, findings=[]))
    assert len(text) <= MAX_RUN_TEXT_CHARS
    assert {"[final]", "[last]", "[errors]", "[results]"} <= set(text.split())


def _rows(n: int) -> list[Row]:
    said = ["I have successfully cancelled your booking", "I'm unable to change that flight"]
    return [Row({"steps": float(i % 5)}, i % 2 == 0, f"task-{i}", "test", said[i % 2])
            for i in range(n)]


def test_a_model_with_text_predicts_from_what_the_run_says(tmp_path: Path) -> None:
    doc = fit(_rows(40))
    assert doc["calibration"]["method"] == "stack" and "successfully" in doc["text"]["terms"]
    model = from_document({**doc, "version": "t"})
    good = model.p_success({"steps": 2.0}, "[final] successfully cancelled")
    bad = model.p_success({"steps": 2.0}, "[final] I'm unable to do that")
    assert good > 0.5 > bad


def test_the_text_score_is_scikit_learns_tfidf_and_logistic_regression() -> None:
    rows = _rows(40)
    doc = fit(rows)
    model = from_document({**doc, "version": "t"})
    assert model.text is not None
    vectorizer = TfidfVectorizer(analyzer=terms, min_df=2, sublinear_tf=True)
    vectorizer.fit([r.text for r in rows])
    for text in ("successfully cancelled successfully", "unable unable to", "nothing known"):
        row = vectorizer.transform([text]).toarray()[0]
        by_term = dict(zip(vectorizer.get_feature_names_out(), row, strict=True))
        coefs = dict(zip(doc["text"]["terms"], doc["text"]["coefficients"], strict=True))
        expected = doc["text"]["intercept"] + sum(v * coefs[t] for t, v in by_term.items())
        assert model.text.score(text) == pytest.approx(expected, abs=1e-9)


def test_the_shipped_default_model_loads_and_is_small() -> None:
    model = load_model(DEFAULT_MODEL_FILE)
    assert model.name == "success-default" and model.text is not None
    assert DEFAULT_MODEL_FILE.stat().st_size < 4 * 1024 * 1024
    assert json.loads(DEFAULT_MODEL_FILE.read_text())["training"]["runs"] >= 300


def test_the_default_model_gives_every_evaluation_a_p_success(datasets: Path) -> None:
    predictor = Predictor(load_model(DEFAULT_MODEL_FILE))
    ps = [predictor.predict(ev)["p_success"] for ev in _evaluations(datasets)]
    assert len(ps) == 100 and all(0.0 < p < 1.0 for p in ps) and len(set(ps)) > 50
