"""The model file is data: malformed or hostile files give a clear error and run nothing."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from predict_helpers import otel_eval

from otel_eval.evaluate.predict import ModelFileError, load_model
from otel_eval.evaluate.predict.modelfile import MAX_FILE_BYTES, parameters_version, write_model


def _good(tau_model: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(tau_model.read_text())
    return doc


class _Marker:
    """Unpickling this would create ``path`` (what a malicious pickle would do, harmlessly)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (self.path,))


def test_a_pickle_is_refused_without_being_run(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    bad = tmp_path / "model.pkl"
    bad.write_bytes(pickle.dumps(_Marker(str(marker))))
    with pytest.raises(ModelFileError, match="not a JSON model document"):
        load_model(bad)
    assert not marker.exists()


def _edit(doc: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(doc))
    node = out
    *path, last = key.split(".")
    for part in path:
        node = node[part]
    node[last] = value
    return out


@pytest.mark.parametrize(("key", "value", "problem"), [
    ("format", "sklearn-pickle", "format: expected 'otel-eval-predictor'"),
    ("format_version", 99, "reads versions (1, 2, 3), the file is version 99"),
    ("features_version", 0, "train it again"),
    ("features", [], "features: expected a list of 1 to"),
    ("coefficients", [1.0], "coefficients: expected a list of"),
    ("scaler.scale", "x", "scaler.scale: expected a list"),
    ("intercept", "1e309", "intercept: '1e309' is not a finite number"),
    ("intercept", True, "intercept: True is not a finite number"),
    ("calibration", {"method": "isotonic"}, "calibration: expected"),
    ("name", "a@b", "name: must not contain '@'"),
    ("name", "x" * 500, "name: expected a non-empty string"),
    ("scaler.agents", {"svc/a": {"mean": [0.0], "scale": [1.0]}},
     "scaler.agents['svc/a'].scale: expected a list of"),
    ("scaler.agents", {"svc/a": []}, "scaler.agents['svc/a']: expected an object"),
    ("scaler.agents", {f"s/{i}": {} for i in range(1001)}, "at most 1000"),
    ("calibration.agents", {"svc/a": "high"}, "calibration.agents['svc/a']: 'high' is not"),
    ("calibration.agents", {"": 1.0}, "calibration.agents key: expected a non-empty"),
])
def test_malformed_fields_are_named(tau_model: Path, tmp_path: Path, key: str, value: Any,
                                    problem: str) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_edit(_good(tau_model), key, value)))
    with pytest.raises(ModelFileError) as e:
        load_model(path)
    assert problem in str(e.value) and str(path) in str(e.value)


def test_repeated_names_zero_scale_and_nan_are_refused(tau_model: Path,
                                                       tmp_path: Path) -> None:
    doc = _good(tau_model)
    n = len(doc["features"])
    cases = {
        "names repeat": _edit(doc, "features", [doc["features"][0]] * n),
        "every scale must be >= 1e-09": _edit(doc, "scaler.scale", [0.0] * n),
    }
    for problem, bad in cases.items():
        path = tmp_path / "m.json"
        path.write_text(json.dumps(bad))
        with pytest.raises(ModelFileError, match=problem):
            load_model(path)
    path.write_text(json.dumps(doc).replace('"intercept": ', '"intercept": NaN, "x": '))
    with pytest.raises(ModelFileError, match="NaN is not a number JSON allows"):
        load_model(path)
    path.write_text(json.dumps(doc).replace('"intercept": ', '"intercept": 1e309, "x": '))
    with pytest.raises(ModelFileError, match="intercept: inf is not a finite number"):
        load_model(path)


def test_an_agent_model_is_checked_as_a_model_and_holds_none_of_its_own(
        tau_model: Path, tmp_path: Path) -> None:
    doc = _good(tau_model)
    own = {k: v for k, v in doc.items() if k != "agent_models"}
    path = tmp_path / "m.json"
    cases = {
        "agent_models['svc/a'].coefficients": {"svc/a": _edit(own, "coefficients", [1.0])},
        "agent_models['svc/a'].agent_models: an agent's own model holds no agent_models": {
            "svc/a": {**own, "agent_models": {"svc/b": own}}},
        "agent_models: expected an object of at most 100": [own],
    }
    for problem, bad in cases.items():
        path.write_text(json.dumps({**doc, "agent_models": bad}))
        with pytest.raises(ModelFileError) as e:
            load_model(path)
        assert problem in str(e.value)
    path.write_text(json.dumps({**doc, "agent_models": {"svc/a": own}}))
    assert list(load_model(path).agent_models) == ["svc/a"]


def test_huge_deep_and_binary_files_are_refused(tmp_path: Path) -> None:
    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    for path, problem in ((huge, "larger than"), (deep, "not a JSON model document"),
                          (binary, "not a JSON model document"),
                          (tmp_path / "missing.json", "cannot be read")):
        with pytest.raises(ModelFileError, match=problem):
            load_model(path)


def test_version_is_the_hash_of_the_parameters(tau_model: Path, tmp_path: Path) -> None:
    doc = _good(tau_model)
    assert doc["version"] == parameters_version(doc)
    changed = _edit(doc, "intercept", doc["intercept"] + 0.5)
    model = write_model(changed, tmp_path / "m.json")
    assert model.version != doc["version"] and load_model(tmp_path / "m.json") == model


def test_eval_with_a_bad_model_stops_before_any_output(tau_slice: Path,
                                                       tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "otel-eval-predictor", "format_version": 1}')
    done = otel_eval("eval", str(tau_slice), "--model", str(bad), "--format", "jsonl")
    assert done.returncode == 2 and done.stdout == ""
    assert f"prediction.model_path: model file {bad}: features_version" in done.stderr


def test_the_counts_score_is_the_sum_of_each_standardized_feature() -> None:
    """``Model.score`` computes each feature's standardized value inline (no call a feature):
    the same floats as ``_standardized`` gives, summed in the same order, for values inside
    and past the clip, absent features, and each agent's own scaler."""
    import random

    from otel_eval.evaluate.predict.config import DEFAULT_MODEL_FILE

    model = load_model(DEFAULT_MODEL_FILE)
    assert model.clip is not None
    rnd = random.Random(34)
    for agent in ["", "unknown-agent", *model.agent_scalers]:
        rows = model._by_agent.get(agent, model._rows)
        for _ in range(20):
            values = {name: rnd.choice([0.0, m, m + s * rnd.uniform(-9, 9), 1e300, -1e300])
                      for name, _, m, s, _ in rows if rnd.random() < 0.8}
            z = model.intercept
            for name, absent, m, s, w in rows:
                z += absent if name not in values else w * model._standardized(values[name],
                                                                               m, s)
            assert model.score(values, agent) == z
