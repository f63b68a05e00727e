"""The run's text in the predictor: scikit-learn's analyzer written out in plain Python (the
same terms on the datasets' texts), bounded text, and a model with text in its JSON file."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

from otel_eval.app.config import Config
from otel_eval.base.results import Evaluation
from otel_eval.base.steps import Step, Trajectory
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.predict import Predictor
from otel_eval.evaluate.predict.config import DEFAULT_MODEL_FILE, PredictionConfig
from otel_eval.evaluate.predict.labels import Row
from otel_eval.evaluate.predict.modelfile import from_document, load_model
from otel_eval.evaluate.predict.regression import HYPERPARAMETERS, text_vocabulary
from otel_eval.evaluate.predict.text import MAX_RUN_TEXT_CHARS, NGRAM_MAX, run_text, terms
from otel_eval.evaluate.predict.train import fit
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


def test_the_text_vocabulary_is_scikit_learns_choice_where_no_count_ties_at_the_cut() -> None:
    rng = random.Random(7)
    vocab = [f"w{k}" for k in range(60)]
    texts = [" ".join(rng.choices(vocab, weights=range(1, 61), k=300)) for _ in range(30)]
    total = Counter(t for text in texts for t in terms(text))
    counts = sorted(total.values(), reverse=True)
    # a cut between two different counts, past the words into the pairs
    cut = next(n for n in range(100, len(counts)) if counts[n - 1] > counts[n])
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(HYPERPARAMETERS, "text_max_terms", cut)
        ours = text_vocabulary(texts)
    theirs = TfidfVectorizer(analyzer=terms, min_df=2, max_features=cut).fit(texts)
    assert ours == theirs.vocabulary_  # the same terms, the same (alphabetical) indices


def test_a_tie_at_the_cut_goes_to_the_term_that_sorts_first_in_any_run_order() -> None:
    # 3,000 words, each in both runs 1-3 times: the cut at 1,500 terms falls inside a run
    # of equal counts. scikit-learn's max_features ranks them with numpy's unstable argsort,
    # and on an AVX-512 machine here kept 572 terms other than these
    rng = random.Random(3)
    words = [f"t{k:04d}" for k in range(3000)]
    repeats = {w: rng.choice((1, 2, 3)) for w in words}
    texts = ["\n".join(w for w in order for _ in range(repeats[w]))
             for order in (words, words[::-1])]
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(HYPERPARAMETERS, "text_max_terms", 1500)
        kept = text_vocabulary(texts)
        assert text_vocabulary(texts[::-1]) == kept
    total = Counter(t for text in texts for t in terms(text))
    both = set(terms(texts[0])) & set(terms(texts[1]))  # min_df 2
    dropped = both - set(kept)
    assert len(kept) == 1500 and dropped
    cut = min(total[t] for t in kept)
    assert all(total[t] <= cut for t in dropped)
    tied_kept = [t for t in kept if total[t] == cut]
    tied_dropped = [t for t in dropped if total[t] == cut]
    assert tied_kept and tied_dropped and max(tied_kept) < min(tied_dropped)


def test_the_shipped_default_model_loads_and_is_small() -> None:
    model = load_model(DEFAULT_MODEL_FILE)
    assert model.name == "success-default" and model.text is not None
    assert DEFAULT_MODEL_FILE.stat().st_size < 4 * 1024 * 1024
    assert json.loads(DEFAULT_MODEL_FILE.read_text())["training"]["runs"] >= 300


def test_the_default_model_gives_every_evaluation_a_p_success(datasets: Path) -> None:
    predictor = Predictor(load_model(DEFAULT_MODEL_FILE))
    ps = [predictor.predict(ev)["p_success"] for ev in _evaluations(datasets)]
    assert len(ps) == 100 and all(0.0 < p < 1.0 for p in ps) and len(set(ps)) > 50


def _opposite_agents() -> list[Row]:
    """"svc/a" succeeds with long runs, "svc/b" with short ones (60 runs each, 20 failures),
    "svc/c" has 10 runs."""
    rows = []
    for agent, n, long_wins in (("svc/a", 60, True), ("svc/b", 60, False), ("svc/c", 10, True)):
        for i in range(n):
            ok = i % 3 != 0
            steps = (5.0 if ok == long_wins else 1.0) + (i % 7) / 10
            rows.append(Row({"steps": steps}, ok, f"{agent}-task-{i}", "test", "", agent))
    return rows


def test_an_agent_with_enough_runs_is_predicted_by_a_model_of_its_own_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _opposite_agents()
    doc = fit(rows)
    assert sorted(doc["agent_models"]) == ["svc/a", "svc/b"]  # svc/c: 10 runs
    model = from_document({**doc, "version": "t"})
    pooled = from_document({**{k: v for k, v in doc.items() if k != "agent_models"},
                            "version": "t"})
    long, short = {"steps": 5.3}, {"steps": 1.3}
    # what tells a run of its agent apart, where one model of both would learn neither
    assert model.p_success(long, "", "svc/a") > 0.8 > 0.2 > model.p_success(short, "", "svc/a")
    assert model.p_success(short, "", "svc/b") > 0.8 > 0.2 > model.p_success(long, "", "svc/b")
    own = from_document(doc["agent_models"]["svc/a"], "agent_models")
    assert model.p_success(long, "", "svc/a") == own.p_success(long, "", "svc/a")
    assert own.training["runs"] == 60 and not own.agent_models
    for agent in ("svc/c", "other/x"):  # the others: the pooled model
        assert model.p_success(long, "", agent) == pooled.p_success(long, "", agent)
    assert "agent_models" not in fit([r for r in rows if r.agent == "svc/a"])
    monkeypatch.setitem(HYPERPARAMETERS, "agent_models", False)
    assert "agent_models" not in fit(rows)


def _two_agents(n: int) -> list[Row]:
    """Two agents: "long" runs ~4 steps and mostly succeeds, "short" runs ~1 step and mostly
    fails; within each agent, a run that hit a tool error failed."""
    rows = []
    for i in range(n):
        agent = "svc/long" if i % 2 else "svc/short"
        error = i % 3 == 0
        ok = not error and (agent == "svc/long" or i % 4 == 1 or i % 5 == 1)
        steps = (4.0 if agent == "svc/long" else 1.0) + (i % 7) / 10
        rows.append(Row({"steps": steps, "errors.tool": float(error)}, ok, f"task-{i}",
                        "test", "", agent))
    return rows


@pytest.mark.parametrize("by_agent", [True, False])
def test_several_agents_are_each_compared_with_their_own_runs(
        monkeypatch: pytest.MonkeyPatch, by_agent: bool) -> None:
    monkeypatch.setitem(HYPERPARAMETERS, "agent_scaling", by_agent)
    monkeypatch.setitem(HYPERPARAMETERS, "agent_effects", by_agent)
    doc = fit(_two_agents(120))
    weight = dict(zip(doc["features"], doc["coefficients"], strict=True))
    assert doc["training"]["agents"] == 2
    if not by_agent:  # run length tells the agents apart, so it carries their base rates
        assert weight["steps"] > 0.5 * abs(weight["errors.tool"])
        assert "agents" not in doc["scaler"] and "agents" not in doc["calibration"]
        return
    # each agent's runs standardized by its own: length tells a run from its agent's
    # others (here nothing), the agent's base rate is its offset
    assert abs(weight["steps"]) < 0.2 * abs(weight["errors.tool"])
    assert sorted(doc["scaler"]["agents"]) == ["svc/long", "svc/short"]
    offsets = doc["calibration"]["agents"]
    assert offsets["svc/long"] > 0 > offsets["svc/short"]
    model = from_document({**doc, "version": "t"})
    clean = {"steps": 4.3, "errors.tool": 0.0}
    assert model.p_success(clean, "", "svc/long") > model.p_success(clean, "", "other/x")
    assert model.p_success({"steps": 1.3, "errors.tool": 0.0}, "", "svc/short") \
        < model.p_success(clean, "", "other/x")
    for agent in ("svc/long", "svc/short", "other/x"):  # an error lowers it for any agent
        assert model.p_success({"steps": 2.5, "errors.tool": 1.0}, "", agent) \
            < model.p_success({"steps": 2.5, "errors.tool": 0.0}, "", agent)
