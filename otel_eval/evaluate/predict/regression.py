"""Stage: predict (training: the regressions). A training matrix and texts, with each run's
label, task and agent -> the fitted pieces a model file keeps, and their out-of-fold figures.

    counts: standardize (``Scaler``: by each agent's own runs when several) -> logistic
      regression (``Linear``; a fixed effect per agent, folded into the intercept)
    text: TF-IDF over word 1-2-grams (``predict.text.terms``) -> logistic regression
    out of fold (``out_of_fold``, folds grouped by task): the counts' decision values per C
      of ``C_grid`` -> ``choose_c``; with the text's -> ``calibrate`` (standardized, summed,
      Platt-scaled)

With ``predict.train`` (which assembles the model document from these), the only modules
that import scikit-learn and numpy (lazily, inside the functions), so ``serve`` and ``eval``
never load them. Training's hyperparameters are fixed here (``HYPERPARAMETERS``; ``train``
reads its own from it: the features kept, the agents' own models), with one exception: the
counts' C is chosen from ``C_grid``, declared up front, on the training runs' own folds
(``choose_c``; the file records the value). The rest were declared before any figure was
measured, or (the text's and ``name_features``) chosen by task-disjoint cross-validation on
the dev half of the public runs (bench/README.md).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from otel_eval.base.documents import MAX_NAME_CHARS
from otel_eval.base.vocabulary import top_terms
from otel_eval.evaluate.predict.text import terms

# Fixed before measuring, but for the counts' C; see the module docstring.
HYPERPARAMETERS: dict[str, Any] = {
    "estimator": "LogisticRegression", "penalty": "l2", "solver": "lbfgs",
    "max_iter": 1000, "class_weight": None,
    # the counts' C: the value of C_grid with the lowest out-of-fold log loss of the counts'
    # regression on the training runs (the folds grouped by task of the Platt step); the
    # model file's training.hyperparameters.C is the one chosen. C = 1 was declared, never
    # searched; the grid was declared before this choice was measured. bench/predictor.py
    # --orders 5, C = 1 -> chosen inside each outer training part (bench/README.md, "Sixth
    # session"): own model tau-bench 0.719 -> 0.731, SWE-bench 0.678 -> 0.684; the default's
    # design 0.679 / 0.666 -> 0.686 / 0.664.
    "C_grid": (0.03, 0.1, 0.3, 1.0), "C_choice": "out-of-fold log loss",
    # a finding kind becomes a feature when >= 3 training traces have it
    "min_finding_support": 3,
    # the calls per tool name and per program (tool.*, program.*) are left out: a name means
    # something for one agent only, and on a few hundred runs these sparse counts cost more
    # than they give (task-disjoint AUC, bench/README.md "Third session": tau-bench 0.671 ->
    # 0.714, SWE-bench 0.659 -> 0.667); models trained before read them
    "name_features": False,
    # standardized values are clipped to +-4 (training and prediction): a run far outside
    # the training range (another agent's token counts) does not extrapolate the line
    "clip": 4.0,
    "calibration": "platt on out-of-fold scores", "folds": 5, "fold_groups": "task id",
    # the text model (predict.text): TF-IDF (sublinear tf, l2) over word 1-2-grams seen in
    # >= text_min_df training runs, the text_max_terms most frequent; L2 logistic regression
    # with C = text_C. Chosen by task-disjoint cross-validation on the dev half of tau-bench
    # and SWE-bench (bench/README.md, "Success prediction"); with text, the two scores are
    # standardized on their out-of-fold values, summed and Platt-scaled.
    "text_min_df": 2, "text_max_terms": 8000, "text_C": 10.0,
    # runs of several agents (service/agent): each agent with >= min_agent_runs training
    # runs has its counts standardized by its own mean and scale (a run is compared with its
    # agent's usual runs: 30 steps is long for one agent and short for another), and both
    # regressions and the calibration get a hardly penalized column per agent (agent_column,
    # a fixed effect) whose weights the file keeps as the agent's offset of the calibration
    # (its base rate). An agent the model never saw gets the pooled values. One model of
    # tau-bench and SWE-bench, AUC within each, 5 task orders (bench/README.md, "Fourth
    # session", features version 4, C = 1): 0.684 / 0.595 -> 0.690 / 0.629; with version 5
    # and the counts' C chosen (C_grid) the default's design measures 0.686 / 0.664.
    "agent_scaling": True, "min_agent_runs": 20, "agent_effects": True, "agent_column": 10.0,
    # and an agent with >= min_agent_model_runs training runs, >= min_agent_model_class of
    # each outcome, gets a model of its own runs alone (agent_models), which predicts its
    # runs: a model does not transfer between agents (bench/README.md). The pooled model
    # above predicts every other agent. The default's design, 5 task orders (bench/README.md,
    # "Seventh session"): 0.686 / 0.664 -> 0.687 / 0.683.
    "agent_models": True, "min_agent_model_runs": 50, "min_agent_model_class": 10,
}


@dataclass(frozen=True)
class Scaler:
    """How counts are standardized: the training runs' mean and scale per feature, and for
    each agent with enough training runs (``min_agent_runs``) its own (``agent_scaling``)."""

    mean: Any
    scale: Any
    agents: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    def apply(self, x: Any, agents: list[str]) -> Any:
        """(x - mean) / scale of each row's agent (else the pooled), clipped to +-clip (as
        ``Model.p_success`` does)."""
        import numpy as np

        mean = np.array([self.agents.get(a, (self.mean, None))[0] for a in agents])
        scale = np.array([self.agents.get(a, (None, self.scale))[1] for a in agents])
        clip = HYPERPARAMETERS["clip"]
        return np.clip((x - mean) / scale, -clip, clip)


def _scaler(x: Any, agents: list[str]) -> Scaler:
    import numpy as np

    def of(rows: Any) -> tuple[Any, Any]:
        scale = rows.std(axis=0)
        return rows.mean(axis=0), np.where(scale > 1e-12, scale, 1.0)

    hp = HYPERPARAMETERS
    named = np.array(agents)
    own = {a: of(x[named == a]) for a, n in Counter(agents).items()
           if hp["agent_scaling"] and n >= hp["min_agent_runs"] and len(set(agents)) > 1}
    return Scaler(*of(x), own)


@dataclass(frozen=True)
class Linear:
    """A fitted logistic regression as the model file keeps it: the features' weights, the
    intercept (the agents' effects folded in, see ``_regression``) and each agent's effect
    relative to it."""

    coefficients: Any
    intercept: float
    agents: dict[str, float] = field(default_factory=dict)

    def decision(self, x: Any) -> Any:
        return x @ self.coefficients + self.intercept


def _regression(x: Any, y: Any, agents: list[str], c: float) -> Linear:
    """An L2 logistic regression of ``y`` on ``x`` (dense or sparse); with runs of several
    agents (``agent_effects``), a column per agent, valued ``agent_column`` so its weight is
    hardly penalized (a fixed effect): what tells the agents apart goes there, the features'
    weights learn what tells a run from its agent's other runs. The agents' columns are
    dropped, their runs-weighted mean effect added to the intercept."""
    import numpy as np
    import scipy.sparse as sp
    from sklearn.linear_model import LogisticRegression

    hp = HYPERPARAMETERS
    lr = LogisticRegression(C=c, solver=hp["solver"], max_iter=hp["max_iter"],
                            class_weight=hp["class_weight"])
    names = sorted(set(agents))
    if not hp["agent_effects"] or len(names) < 2:
        lr.fit(x, y)
        return Linear(lr.coef_[0], float(lr.intercept_[0]))
    index = {a: i for i, a in enumerate(names)}
    onehot = np.zeros((len(agents), len(names)))
    onehot[np.arange(len(agents)), [index[a] for a in agents]] = hp["agent_column"]
    lr.fit(sp.hstack([x, onehot]).tocsr() if sp.issparse(x) else np.hstack([x, onehot]), y)
    n = x.shape[1]
    effects = lr.coef_[0][n:] * hp["agent_column"]
    mean = float(effects[[index[a] for a in agents]].mean())
    return Linear(lr.coef_[0][:n], float(lr.intercept_[0]) + mean,
                  {a: float(effects[i]) - mean for a, i in index.items()})


def fit_counts(x: Any, y: Any, agents: list[str], c: float) -> tuple[Scaler, Linear]:
    scaler = _scaler(x, agents)
    return scaler, _regression(scaler.apply(x, agents), y, agents, c)


def fit_text(texts: list[str], y: Any, agents: list[str]) -> tuple[Any, Linear] | None:
    """(fitted TfidfVectorizer, regression) on the runs' texts; None when no term is
    frequent enough (a few short runs)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    chosen = text_vocabulary(texts)
    if not chosen:
        return None
    vectorizer = TfidfVectorizer(analyzer=terms, vocabulary=chosen, sublinear_tf=True)
    m = vectorizer.fit_transform(texts)
    return vectorizer, _regression(m, y, agents, HYPERPARAMETERS["text_C"])


def text_vocabulary(texts: list[str]) -> dict[str, int]:
    """The terms the text model reads (``base.vocabulary.top_terms``: in at least
    ``text_min_df`` runs, the ``text_max_terms`` most frequent, ties at the cut to the term
    that sorts first), so the same runs train the same model on any machine."""
    hp = HYPERPARAMETERS
    named = ([t for t in terms(text) if len(t) <= MAX_NAME_CHARS] for text in texts)
    return top_terms(named, hp["text_max_terms"], hp["text_min_df"])


def out_of_fold(x: Any, y: Any, groups: list[str], texts: list[str],
                 agents: list[str]) -> tuple[Any, Any, Any, Any]:
    """Out-of-fold values (folds grouped by task): the counts' decision values, a column per
    C of ``C_grid``; the same with each training agent's effect added (the regression's own
    log-odds, for ``choose_c``); the text's (0 where its fold had no vocabulary); which rows
    got one."""
    import numpy as np
    from sklearn.model_selection import GroupKFold

    grid = HYPERPARAMETERS["C_grid"]
    z, odds = np.zeros((len(y), len(grid))), np.zeros((len(y), len(grid)))
    zt, done = np.zeros(len(y)), np.zeros(len(y), dtype=bool)
    folds = min(HYPERPARAMETERS["folds"], len(set(groups)))
    for train, test in GroupKFold(n_splits=folds).split(x, y, groups):
        if len(set(y[train].tolist())) < 2:
            continue  # a fold whose training part holds one class predicts nothing
        part, held = [agents[i] for i in train], [agents[i] for i in test]
        scaler = _scaler(x[train], part)
        xs, xt = scaler.apply(x[train], part), scaler.apply(x[test], held)
        for j, c in enumerate(grid):
            lr = _regression(xs, y[train], part, c)
            z[test, j] = lr.decision(xt)
            odds[test, j] = z[test, j] + np.array([lr.agents.get(a, 0.0) for a in held])
        text = fit_text([texts[i] for i in train], y[train], part)
        if text is not None:
            zt[test] = text[1].decision(text[0].transform([texts[i] for i in test]))
        done[test] = True
    return z, odds, zt, done


def choose_c(odds: Any, y: Any) -> tuple[int, dict[str, float]]:
    """The column of ``C_grid`` whose out-of-fold log-odds have the lowest mean log loss
    (the first on a tie; the last, C = 1 as shipped before, without held-out runs), and each
    C's loss. Log loss, not AUC: it is defined on every held-out run, pooled over the folds
    (a fold of a few tasks can hold one class, where AUC is not), and it is the regression's
    own objective, and it charges the confident wrong predictions that too weak a penalty
    makes, which a ranking would not see. The text's C stays fixed (``text_C``)."""
    import numpy as np
    from sklearn.metrics import log_loss

    grid = HYPERPARAMETERS["C_grid"]
    if len(y) == 0:
        return len(grid) - 1, {}
    losses = [float(log_loss(y, 1.0 / (1.0 + np.exp(-odds[:, j])), labels=[0, 1]))
              for j in range(len(grid))]
    return int(np.argmin(losses)), {str(c): round(v, 4) for c, v in zip(grid, losses,
                                                                        strict=True)}


def calibrate(scores: list[Any], y: Any, agents: list[str]
               ) -> tuple[list[float], float, dict[str, float], dict[str, Any]]:
    """The scores (counts, and text when there is one) combined: each standardized by its
    out-of-fold spread and summed with equal weights (on runs this few, weights learned on
    the folds' scores overfit), then Platt-scaled with the regressions' agent effects
    (``_regression``): ([a per score], b, each training agent's offset from b: its base
    rate; an agent the model never saw gets b), and the out-of-fold figures."""
    import numpy as np
    from sklearn.metrics import brier_score_loss, roc_auc_score

    if len(set(y.tolist())) < 2:
        return [1.0, 0.0][:len(scores)], 0.0, {}, {"calibrated": False}
    spread = [float(np.std(v)) or 1.0 for v in scores]
    both = sum(v / d for v, d in zip(scores, spread, strict=True)).reshape(-1, 1)
    platt = _regression(both, y, agents, 1e6)
    u = platt.decision(both) + np.array([platt.agents.get(a, 0.0) for a in agents])
    p = 1.0 / (1.0 + np.exp(-u))
    k = float(platt.coefficients[0])
    cv: dict[str, Any] = {"calibrated": True, "runs": len(y),
                          "auc": round(float(roc_auc_score(y, p)), 4)}
    named = np.array(agents)
    within = [(int(m.sum()), roc_auc_score(y[m], p[m])) for a in sorted(set(agents))
              if len(set(y[m := named == a].tolist())) == 2]
    if len(set(agents)) > 1 and within:
        cv["auc_within_agents"] = round(sum(n * v for n, v in within)
                                        / sum(n for n, _ in within), 4)
    if len(scores) == 2:
        cv["auc_counts"] = round(float(roc_auc_score(y, scores[0])), 4)
        cv["auc_text"] = round(float(roc_auc_score(y, scores[1])), 4)
    cv["brier"] = round(float(brier_score_loss(y, p)), 4)
    cv["note"] = ("out-of-fold on the training runs; Brier is after the Platt fit on the "
                  "same scores (slightly optimistic)")
    return [k / d for d in spread], platt.intercept, platt.agents, cv
