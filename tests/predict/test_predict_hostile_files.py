"""Model and labels files that loaded but could not be used: a 400-digit number (a
traceback), numbers that make a prediction NaN (a subnormal scale, products past a float),
a text term longer than a model file's name (``train`` wrote a file its loader refused),
and a run labelled both ways (the last line won)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from otel_eval.evaluate.predict.labels import Row, TrainError, read_labels
from otel_eval.evaluate.predict.modelfile import ModelFileError, load_model, write_model


def _doc(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "format": "otel-eval-predictor", "format_version": 3, "name": "m", "version": "v",
        "features_version": 5, "features": ["a", "b"],
        "scaler": {"mean": [0, 0], "scale": [1, 1]}, "coefficients": [1, 1], "intercept": 0,
        "calibration": {"method": "platt", "a": 1, "b": 0}}
    return {**doc, **over}


def test_a_huge_json_integer_is_a_model_file_error_not_a_crash(tmp_path: Path) -> None:
    raw = json.dumps(_doc()).replace('"intercept": 0', '"intercept": ' + "9" * 400)
    path = tmp_path / "m.json"
    path.write_text(raw)
    with pytest.raises(ModelFileError):
        load_model(path)


@pytest.mark.parametrize(("over", "values", "text"), [
    # a subnormal scale (> 0, accepted) makes (value - mean) / scale infinite; * 0 -> NaN
    ({"scaler": {"mean": [0, 0], "scale": [5e-324, 1]}, "coefficients": [0, 1]},
     {"a": 4.0, "b": 1.0}, ""),
    # finite but huge text idf/coefficients: squares and dot overflow to inf, inf/inf = NaN
    ({"format_version": 2, "calibration": {"method": "stack", "a": [1, 1], "b": 0},
      "text": {"text_version": 1, "terms": ["hello", "world"], "idf": [1e200, 1e200],
               "coefficients": [1e200, -1e200], "intercept": 0}},
     {"a": 0.0, "b": 0.0}, "hello world"),
])
def test_a_model_that_loads_never_predicts_nan(tmp_path: Path, over: dict[str, Any],
                                               values: dict[str, float], text: str) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_doc(**over)))
    try:
        model = load_model(path)
    except ModelFileError:
        return  # refusing the file is fine
    p = model.p_success(values, text)
    assert not math.isnan(p) and 0.0 <= p <= 1.0, p


def test_train_writes_a_model_when_runs_share_a_word_longer_than_a_name(tmp_path: Path) -> None:
    # a word of > MAX_NAME_CHARS (200) word characters in >= 2 runs' text becomes a text term;
    # write_model's own check (short_name on text.terms[]) then refuses the document
    from otel_eval.evaluate.predict.train import fit

    word = "x" * 250
    rows = [Row({"steps": float(i % 3), "tool_calls": float(i)}, i % 2 == 0, f"task{i % 4}",
                "otlp", f"[final] {word} {'done fixed' if i % 2 == 0 else 'unable sorry'}", "/a")
            for i in range(12)]
    model = write_model(fit(rows), tmp_path / "m.json")
    assert load_model(tmp_path / "m.json").label == model.label


def test_conflicting_labels_for_one_trace_are_refused(tmp_path: Path) -> None:
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    path = tmp_path / "labels.jsonl"
    path.write_text(f'{{"trace_id": "{trace}", "outcome": true}}\n'
                    f'{{"trace_id": "{trace}", "outcome": false}}\n')
    with pytest.raises(TrainError):
        read_labels([str(path)])


@pytest.mark.parametrize("text", [
    '{"instances": ' + "[" * 5000 + "]" * 5000 + "}",  # a SWE-bench results summary
    '{"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "outcome": ' + "[" * 1500
    + "]" * 1500 + "}",  # one line, under MAX_LABEL_LINE_CHARS
], ids=["summary", "line"])
def test_labels_nested_past_the_recursion_limit_are_a_train_error(tmp_path: Path,
                                                                 text: str) -> None:
    """json.loads raises RecursionError (no ValueError) on such nesting: it escaped
    read_labels, and ``otel-eval train --labels`` stopped with a traceback."""
    path = tmp_path / "labels.json"
    path.write_text(text + "\n")
    with pytest.raises(TrainError, match=str(path)):
        read_labels([str(path)])


def test_a_labels_line_holding_unicode_line_separators_reads(tmp_path: Path) -> None:
    """JSON lines end at "\\n" only: JSON writes U+2028 and NEL (U+0085) inside a string as
    they are (a reviewer's note beside the outcome, json.dumps with ensure_ascii=False).
    str.splitlines cut the line there, and ``train --labels`` stopped: 'not JSON'."""
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    path = tmp_path / "labels.jsonl"
    path.write_text(json.dumps({"trace_id": trace, "outcome": True,
                                "note": "\u0635\u062d\u064a\u062d\u2028ok\x85"},
                               ensure_ascii=False) + "\n", encoding="utf-8")
    assert read_labels([str(path)]).by_trace == {trace: True}


def _text_doc(idf: str) -> str:
    """A model with 1,000 text terms whose idf list is ``idf`` (JSON text, as written)."""
    terms = [f"t{i}" for i in range(1000)]
    doc = _doc(format_version=2, calibration={"method": "stack", "a": [1, 1], "b": 0},
               text={"text_version": 1, "terms": terms, "idf": "IDF",
                     "coefficients": [0.5] * 1000, "intercept": 0})
    return json.dumps(doc).replace('"IDF"', idf)


_FINE = ["1.5"] * 1000


@pytest.mark.parametrize(("token", "problem"), [
    ("NaN", "NaN is not a number JSON allows"),
    ("Infinity", "Infinity is not a number JSON allows"),
    ("-Infinity", "-Infinity is not a number JSON allows"),
    ("1e999", "text.idf: inf is not a finite number"),
    ("-1e999", "text.idf: -inf is not a finite number"),
    ("1e10", "text.idf: 10000000000.0 is not a finite number"),
    ("9" * 400, "text.idf: 9999999999"),
    ("true", "text.idf: True is not a finite number"),
    ("null", "text.idf: None is not a finite number"),
    ('"1"', "text.idf: '1' is not a finite number"),
    ("[1]", "text.idf: [1] is not a finite number"),
])
@pytest.mark.parametrize("at", [0, 617, 999])
def test_one_bad_number_anywhere_in_a_long_list_is_named(tmp_path: Path, token: str,
                                                         problem: str, at: int) -> None:
    path = tmp_path / "m.json"
    path.write_text(_text_doc("[" + ", ".join([*_FINE[:at], token, *_FINE[at + 1:]]) + "]"))
    with pytest.raises(ModelFileError, match=re.escape(problem)):
        load_model(path)


@pytest.mark.parametrize("idf", ["[" + ", ".join(_FINE[:999]) + "]",
                                 "[" + ", ".join([*_FINE, "1"]) + "]",
                                 '{"0": 1.5}', "1.5", "null"])
def test_a_number_list_of_the_wrong_shape_is_named(tmp_path: Path, idf: str) -> None:
    path = tmp_path / "m.json"
    path.write_text(_text_doc(idf))
    with pytest.raises(ModelFileError, match=re.escape("text.idf: expected a list of 1000")):
        load_model(path)


def test_ints_floats_and_the_bounds_load_as_the_floats_they_are(tmp_path: Path) -> None:
    values = [1, -2.5, 1e9, -1e9, 0, -0.0, 5e-324, 10**9, -(10**9)] * 111 + [3]
    path = tmp_path / "m.json"
    path.write_text(_text_doc(json.dumps(values)))
    terms = load_model(path).text.terms  # type: ignore[union-attr]
    got = [terms[f"t{i}"][0] for i in range(1000)]
    assert got == [float(v) for v in values]
    assert all(type(v) is float for v in got)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 2e9, True, 10**400])
@pytest.mark.parametrize("at", [0, 617, 999])
def test_write_model_refuses_a_non_finite_number_computed_anywhere(tmp_path: Path, bad: Any,
                                                                    at: int) -> None:
    """A document built in Python (``train``'s) may hold a NaN, which no JSON token gives:
    a NaN compares false to every bound, so it must be refused wherever it sits."""
    doc = json.loads(_text_doc(json.dumps([1.5] * 1000)))
    doc["text"]["idf"][at] = bad
    with pytest.raises(ValueError, match=r"text\.idf: .* is not a finite number"):
        write_model(doc, tmp_path / "m.json")
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("bad", ["", "x" * 201, 5, None, True, ["t"]])
@pytest.mark.parametrize("at", [0, 617, 999])
def test_one_bad_term_anywhere_in_a_long_list_is_named(tmp_path: Path, bad: Any,
                                                       at: int) -> None:
    doc = json.loads(_text_doc(json.dumps([1.5] * 1000)))
    doc["text"]["terms"][at] = bad
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ModelFileError, match=re.escape("text.terms[]: expected a non-empty")):
        load_model(path)
