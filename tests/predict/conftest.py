"""Predictor fixtures: a slice of the real tau-bench airline runs, and a model trained on it by
the real ``otel-eval train`` command in a subprocess (once per session)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from predict_helpers import SLICE_RUNS, TAU_RUNS, otel_eval


@pytest.fixture(scope="session")
def tau_slice(datasets: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = json.loads((datasets / TAU_RUNS).read_text())[:SLICE_RUNS]
    path = tmp_path_factory.mktemp("tau") / "airline-slice.runs.json"
    path.write_text(json.dumps(runs))
    return path


@pytest.fixture(scope="session")
def tau_model(tau_slice: Path) -> Path:
    out = tau_slice.with_name("success.model.json")
    done = otel_eval("train", str(tau_slice), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote {out}: success@")
    return out
