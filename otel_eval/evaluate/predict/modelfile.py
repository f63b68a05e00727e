"""Stage: predict (the model). A versioned JSON model file -> p_success, in plain Python.

The file is data, never code (no pickle): loading parses JSON and checks every field, so a
hostile or damaged file gives ``ModelFileError`` naming the file and the problem, nothing
runs. Prediction needs neither numpy nor scikit-learn (``serve`` keeps its idle memory);
only ``otel-eval train`` imports scikit-learn (otel_eval.evaluate.predict.train, .regression).

    {"format": "otel-eval-predictor", "format_version": 1,
     "name": "success", "version": "3f2a9c0e1b7d",      # shown as "success@3f2a9c0e1b7d"
     "features_version": 1, "features": [names...],
     "scaler": {"mean": [...], "scale": [...],            # standardization, per feature
                "clip": 4.0},                             # |standardized| <= clip (optional)
     "coefficients": [...], "intercept": z0,              # logistic regression
     "calibration": {"method": "platt", "a": a, "b": b},  # p = 1 / (1 + exp(-(a*z + b)))
     "text": {"text_version": 1, "terms": [...],          # optional (format_version 2):
              "idf": [...], "coefficients": [...],        # a logistic regression over the
              "intercept": zt0},                          # run's TF-IDF terms (predict.text)
     "training": {...}}                                    # summary, free-form, not read

With ``text``, calibration is ``{"method": "stack", "a": [a_counts, a_text], "b": b}``:
p = 1 / (1 + exp(-(a_counts*z + a_text*zt + b))), the two scores stacked on out-of-fold
values. Files of format_version 1 (counts only) still load.

A model trained on runs of several agents knows each of them by ``agent_key``
(``service/agent``; at most ``MAX_AGENTS``): ``scaler.agents`` holds an agent's own
``{"mean": [...], "scale": [...]}`` (its runs are standardized by them) and
``calibration.agents`` its offset added to b (its base rate). Any other agent gets the
pooled scaler and b. Format version 3 adds ``agent_models``: ``{"service/agent": {a model
document of that agent's runs alone}}`` (at most ``MAX_AGENT_MODELS``, themselves without
``agent_models``), which predict that agent's runs instead of the pooled model.

``version`` is a hash of the parameters: two files with the same version predict the same.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from otel_eval.base.documents import finite_numbers, short_name, short_names
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.predict.features import FEATURES_VERSION, READABLE_FEATURES_VERSIONS
from otel_eval.evaluate.predict.text import TEXT_VERSION, term_counts, term_key

FORMAT = "otel-eval-predictor"
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
MAX_TERMS = 50_000
MAX_FILE_BYTES = 16 * 1024 * 1024  # a model of 10,000 features is ~1 MB
MAX_FEATURES = 10_000
MAX_AGENTS = 1_000  # agents a model knows by name (scaler.agents, calibration.agents)
MAX_AGENT_MODELS = 100  # agents with a model of their own (agent_models)
# A feature's scale, at least: a smaller one divides a value past any weight's reach (a
# standardized value of inf, times a weight 0, was NaN)
MIN_SCALE = 1e-9


class ModelFileError(ValueError):
    """A model file that cannot be used, with the reason."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"model file {path}: {problem}")


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


@dataclass(frozen=True)
class TextModel:
    """A linear model over a run's TF-IDF terms (sublinear tf, l2-normalized)."""

    terms: dict[str, tuple[float, float]]  # term -> (idf, coefficient)
    intercept: float

    def score(self, text: str) -> float:
        """The intercept plus the coefficients of the run's known terms, weighted by their
        l2-normalized TF-IDF, in one pass over the run's distinct terms (the norm divides
        the sum once: equal to scikit-learn's to ~1e-14, not bit for bit)."""
        get = self._by_key.get
        log = math.log
        squares = dot = 0.0
        for counts in term_counts(text):
            for term, n in counts.items():
                known = get(term)
                if known is not None:
                    idf, c = known
                    w = idf if n == 1 else (1.0 + log(n)) * idf
                    squares += w * w
                    dot += w * c
        return self.intercept + dot / (math.sqrt(squares) or 1.0)

    @cached_property
    def _by_key(self) -> dict[str | tuple[str, ...], tuple[float, float]]:
        """``terms`` keyed as ``term_counts`` counts (n-grams as tuples of words)."""
        return {term_key(t): e for t, e in self.terms.items()}


def _logistic(u: float) -> float:
    """1 / (1 + exp(-u)) without overflow for large |u|."""
    return 1.0 / (1.0 + math.exp(-u)) if u >= 0 else math.exp(u) / (1.0 + math.exp(u))


@dataclass(frozen=True)
class Model:
    """A loaded, validated model: ``p_success(features)`` in O(features)."""

    name: str
    version: str
    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coefficients: tuple[float, ...]
    intercept: float
    platt_a: float
    platt_b: float
    training: dict[str, Any]
    clip: float | None = None  # standardized values are clipped to +-clip (None: not)
    text: TextModel | None = None  # with it, platt_text weighs its score (stacked)
    platt_text: float = 0.0
    # agent_key -> its own (mean, scale), and its offset of platt_b
    agent_scalers: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = field(
        default_factory=dict)
    agent_offsets: dict[str, float] = field(default_factory=dict)
    # agent_key -> the model of that agent's runs alone, which predicts them
    agent_models: dict[str, Model] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"

    def p_success(self, values: dict[str, float], text: str = "", agent: str = "") -> float:
        own = self.agent_models.get(agent)
        if own is not None:
            return own.p_success(values, text, agent)
        u = (self.platt_a * self.score(values, agent) + self.platt_b
             + self.agent_offsets.get(agent, 0.0))
        if self.text is not None:
            u += self.platt_text * self.text.score(text)
        return _logistic(u)

    def score(self, values: dict[str, float], agent: str = "") -> float:
        """The counts' linear score (before calibration), standardized as the agent's runs
        are (its own scaler when the model knows it). ``_standardized`` inlined: ~50 features
        a run, a Python call each was a fifth of the predictor's calls (tests/cost)."""
        z = self.intercept
        get = values.get
        clip = self.clip
        for name, absent, m, s, w in self._by_agent.get(agent, self._rows):
            value = get(name)
            if value is None:
                z += absent
                continue
            v = (value - m) / s
            if clip is not None:
                v = -clip if v < -clip else clip if v > clip else v
            z += w * v
        return z

    def _standardized(self, value: float, m: float, s: float) -> float:
        """(value - mean) / scale, clipped to +-clip: as ``score`` computes it inline."""
        v = (value - m) / s
        clip = self.clip
        if clip is not None:
            v = -clip if v < -clip else clip if v > clip else v
        return v

    @cached_property
    def _rows(self) -> tuple[tuple[str, float, float, float, float], ...]:
        """(name, what the feature adds when absent, mean, scale, weight) per feature: an
        absent feature is 0, and its term is the same number whichever run lacks it."""
        return self._rows_of(self.mean, self.scale)

    def _rows_of(self, mean: tuple[float, ...], scale: tuple[float, ...]
                 ) -> tuple[tuple[str, float, float, float, float], ...]:
        return tuple((name, w * self._standardized(0.0, m, s), m, s, w)
                     for name, m, s, w in zip(self.features, mean, scale, self.coefficients,
                                              strict=True))

    @cached_property
    def _by_agent(self) -> dict[str, tuple[tuple[str, float, float, float, float], ...]]:
        return {a: self._rows_of(m, s) for a, (m, s) in self.agent_scalers.items()}


def agent_key(t: Trajectory) -> str:
    """The name a model knows an agent by: ``service/agent`` (either may be empty)."""
    return f"{t.service or ''}/{t.agent or ''}"


def parameters_version(doc: dict[str, Any]) -> str:
    """The hash of what decides predictions (features, scaler, weights, calibration)."""
    keys = ("features_version", "features", "scaler", "coefficients", "intercept",
            "calibration", "text")
    decides = {k: doc.get(k) for k in keys}
    if "agent_models" in doc:  # (absent: the hash of a file written before version 3)
        decides["agent_models"] = doc["agent_models"]
    text = json.dumps(decides, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _number(value: Any, where: str) -> float:
    return finite_numbers([value], 1, where)[0]


def _header(doc: Any) -> None:
    if not isinstance(doc, dict):
        raise ValueError("expected a JSON object")
    if doc.get("format") != FORMAT:
        raise ValueError(f"format: expected {FORMAT!r}, got {doc.get('format')!r} (not an "
                         "otel-eval model; `otel-eval train` writes one)")
    if doc.get("format_version") not in READABLE_VERSIONS:
        raise ValueError(f"format_version: this otel-eval reads versions {READABLE_VERSIONS}, "
                         f"the file is version {doc.get('format_version')!r}")
    if doc.get("features_version") not in READABLE_FEATURES_VERSIONS:
        raise ValueError(f"features_version: this otel-eval computes features version "
                         f"{FEATURES_VERSION} (and reads models of versions "
                         f"{READABLE_FEATURES_VERSIONS}), the model was trained on "
                         f"{doc.get('features_version')!r}: train it again")


def from_document(doc: Any, where: str = "") -> Model:
    """A ``Model`` from a parsed model document; ValueError says which field is wrong
    (``where``: the path of a document inside another, ``agent_models[...]``)."""
    try:
        return _model(doc, nested=bool(where))
    except ValueError as e:
        raise ValueError(f"{where}.{e}" if where else str(e)) from None


def _model(doc: Any, nested: bool) -> Model:
    _header(doc)
    names = doc.get("features")
    if not isinstance(names, list) or not 0 < len(names) <= MAX_FEATURES:
        raise ValueError(f"features: expected a list of 1 to {MAX_FEATURES} names")
    features = tuple(short_names(names, "features[]"))
    if len(set(features)) != len(features):
        raise ValueError("features: names repeat")
    n = len(features)
    scaler, cal = doc.get("scaler"), doc.get("calibration")
    if not isinstance(scaler, dict):
        raise ValueError("scaler: expected an object with mean and scale")
    scale = finite_numbers(scaler.get("scale"), n, "scaler.scale")
    if any(s < MIN_SCALE for s in scale):
        raise ValueError(f"scaler.scale: every scale must be >= {MIN_SCALE:g}")
    clip = scaler.get("clip")
    if clip is not None and not _number(clip, "scaler.clip") > 0:
        raise ValueError("scaler.clip: must be > 0")
    text = _text_model(doc.get("text"))
    a, a_text, offsets = _calibration(cal, text is not None)
    training = doc.get("training", {})
    if not isinstance(training, dict):
        raise ValueError("training: expected an object")
    model = Model(short_name(doc.get("name"), "name"), short_name(doc.get("version"), "version"),
                  features, finite_numbers(scaler.get("mean"), n, "scaler.mean"), scale,
                  finite_numbers(doc.get("coefficients"), n, "coefficients"),
                  _number(doc.get("intercept"), "intercept"),
                  a, _number(cal.get("b"), "calibration.b"),
                  training, None if clip is None else float(clip), text, a_text,
                  _agent_scalers(scaler.get("agents", {}), n), offsets,
                  _agent_models(doc.get("agent_models"), nested))
    if "@" in model.name:
        raise ValueError("name: must not contain '@'")
    return model


def _agent_models(doc: Any, nested: bool) -> dict[str, Model]:
    if doc is None:
        return {}
    if nested:
        raise ValueError("agent_models: an agent's own model holds no agent_models")
    if not isinstance(doc, dict) or len(doc) > MAX_AGENT_MODELS:
        raise ValueError(f"agent_models: expected an object of at most {MAX_AGENT_MODELS} "
                         '"service/agent" entries')
    return {short_name(key, "agent_models key"): from_document(own, f"agent_models[{key!r}]")
            for key, own in doc.items()}


def _text_model(doc: Any) -> TextModel | None:
    if doc is None:
        return None
    if not isinstance(doc, dict) or doc.get("text_version") != TEXT_VERSION:
        raise ValueError(f"text: expected an object with text_version {TEXT_VERSION}")
    names = doc.get("terms")
    if not isinstance(names, list) or not 0 < len(names) <= MAX_TERMS:
        raise ValueError(f"text.terms: expected a list of 1 to {MAX_TERMS} terms")
    words = short_names(names, "text.terms[]")
    idf = finite_numbers(doc.get("idf"), len(words), "text.idf")
    coefficients = finite_numbers(doc.get("coefficients"), len(words), "text.coefficients")
    table = dict(zip(words, zip(idf, coefficients, strict=True), strict=True))
    if len(table) != len(words):
        raise ValueError("text.terms: terms repeat")
    return TextModel(table, _number(doc.get("intercept"), "text.intercept"))


def _calibration(cal: Any, stacked: bool) -> tuple[float, float, dict[str, float]]:
    """(a for the counts' score, a for the text's score, the agents' offsets of b)."""
    if stacked:
        if not isinstance(cal, dict) or cal.get("method") != "stack":
            raise ValueError('calibration: expected {"method": "stack", "a": [a_counts, '
                             'a_text], "b": ...} (a model with text)')
        a, a_text = finite_numbers(cal.get("a"), 2, "calibration.a")
    else:
        if not isinstance(cal, dict) or cal.get("method") != "platt":
            raise ValueError('calibration: expected {"method": "platt", "a": ..., "b": ...}')
        a, a_text = _number(cal.get("a"), "calibration.a"), 0.0
    return a, a_text, {k: _number(v, f"calibration.agents[{k!r}]")
                       for k, v in _agents(cal.get("agents", {}), "calibration").items()}


def _agents(doc: Any, where: str) -> dict[str, Any]:
    if not isinstance(doc, dict) or len(doc) > MAX_AGENTS:
        raise ValueError(f"{where}.agents: expected an object of at most {MAX_AGENTS} "
                         '"service/agent" entries')
    for key in doc:
        short_name(key, f"{where}.agents key")
    return doc


def _agent_scalers(doc: Any, n: int) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
    out = {}
    for key, own in _agents(doc, "scaler").items():
        where = f"scaler.agents[{key!r}]"
        if not isinstance(own, dict):
            raise ValueError(f"{where}: expected an object with mean and scale")
        scale = finite_numbers(own.get("scale"), n, f"{where}.scale")
        if any(s < MIN_SCALE for s in scale):
            raise ValueError(f"{where}.scale: every scale must be >= {MIN_SCALE:g}")
        out[key] = (finite_numbers(own.get("mean"), n, f"{where}.mean"), scale)
    return out


def load_model(path: str | Path) -> Model:
    """Read and validate a model file; ``ModelFileError`` says what is wrong."""
    where = str(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ModelFileError(where, f"cannot be read ({e.strerror or e})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ModelFileError(where, f"larger than {MAX_FILE_BYTES} bytes")
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ModelFileError(where, f"not a JSON model document ({e})") from None
    try:
        return from_document(doc)
    except ValueError as e:
        raise ModelFileError(where, str(e)) from None


def write_model(doc: dict[str, Any], path: str | Path) -> Model:
    """Check ``doc`` as ``load_model`` would, then write it (the version set from its
    parameters)."""
    doc = {**doc, "version": parameters_version(doc)}
    model = from_document(doc)
    target = Path(path)
    partial = target.with_name(f".{target.name}.partial")
    partial.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    partial.replace(target)  # a reader sees the old file or the new one, never half of one
    return model
