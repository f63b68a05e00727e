"""Predictor fixtures: a slice of the real tau-bench airline runs, and a model trained on it by
the real ``otel-eval train`` command in a subprocess (once per session)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "receiver"))

TAU_RUNS = Path("tau-bench/airline/gpt-4o-airline.runs.json")
SLICE_RUNS = 48  # of the 100 runs (25 tasks, 4 trials each)


def otel_eval(*args: str) -> subprocess.CompletedProcess[str]:
    """``otel-eval ARGS`` as a user runs it: a new interpreter, results on stdout."""
    return subprocess.run([sys.executable, "-m", "otel_eval", *args], capture_output=True,
                          text=True, timeout=300, check=False)


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
