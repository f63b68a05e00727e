"""Hostile or malformed input files through the ``otel-eval`` command, as a subprocess: each is
reported on stderr with its path, never a traceback, and the exit code says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "otel_eval", *argv], env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def _tau_run(**fields: object) -> dict[str, object]:
    return {"task_id": 1, "reward": 1, "traj": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}], **fields}


@pytest.mark.parametrize("command", ["eval", "show", "issues", "train"])
def test_a_number_past_the_digit_limit_is_a_reported_file(tmp_path: Path, command: str) -> None:
    """Python refuses to parse an integer of more than 4,300 digits with a plain ValueError
    (not a JSONDecodeError): the file is refused with its path, not a traceback."""
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([_tau_run()]).replace('"reward": 1', '"reward": ' + "9" * 5000))
    out = ["--out", str(tmp_path / "model.json")] if command == "train" else []
    done = _cli(command, str(path), *out)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode != 0
    assert f"{path}: not valid JSON" in done.stderr
