"""Helpers of the predictor tests: the real ``otel-eval`` command in a subprocess, and the
tau-bench slice they train on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TAU_RUNS = Path("tau-bench/airline/gpt-4o-airline.runs.json")
SLICE_RUNS = 48  # of the 100 runs (25 tasks, 4 trials each)


def otel_eval(*args: str) -> subprocess.CompletedProcess[str]:
    """``otel-eval ARGS`` as a user runs it: a new interpreter, results on stdout."""
    return subprocess.run([sys.executable, "-m", "otel_eval", *args], capture_output=True,
                          text=True, timeout=300, check=False)
