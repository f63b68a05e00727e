"""The ``otel-eval`` command as a Unix tool, as a subprocess: its output into a pipe whose
reader has gone (``| head``, ``| true``) and Ctrl-C end it quietly, never with a traceback or
Python's "Exception ignored" line, and with the exit status a shell expects."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "loaders"


def _env() -> dict[str, str]:
    """The environment of a user's shell: stdout block-buffered (no PYTHONUNBUFFERED), so
    what a command prints small is written when the interpreter exits."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return {**env, "PYTHONPATH": str(ROOT)}


@pytest.mark.parametrize("argv", [
    ["eval", str(DATA / "tau_runs.json"), "--format", "jsonl"],
    ["eval", str(DATA / "tau_runs.json")],
    ["issues", str(DATA / "tau_runs.json"), "--format", "json"],
    ["inspect", str(DATA / "otlp_request.json")],
    ["serve", "--help"],
])
def test_output_into_a_closed_pipe_ends_quietly(argv: list[str]) -> None:
    """A small output is buffered and written at interpreter exit, past main's handler of
    a closed pipe: Python printed "Exception ignored ... BrokenPipeError" and exited 120."""
    read, write = os.pipe()
    os.close(read)  # the reader has gone (``| true``; ``| head -1`` once it has its line)
    try:
        done = subprocess.run([sys.executable, "-m", "otel_eval", *argv], env=_env(),
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=300,
                              check=False)
    finally:
        os.close(write)
    assert "BrokenPipeError" not in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 0


def test_ctrl_c_ends_quietly_with_130(tmp_path: Path) -> None:
    """Ctrl-C while eval read its input printed a KeyboardInterrupt traceback (the loaders',
    the evaluator's or the judge's frames, whichever was running)."""
    fifo = tmp_path / "traces.json"
    os.mkfifo(fifo)
    child = subprocess.Popen([sys.executable, "-m", "otel_eval", "eval", str(fifo),
                              "--format", "jsonl"], env=_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        with fifo.open("w"):  # returns once eval has opened it: it is reading its input
            child.send_signal(signal.SIGINT)
            out, err = child.communicate(timeout=300)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert "Traceback" not in err, err[-2000:]
    assert "KeyboardInterrupt" not in err, err[-2000:]
    assert child.returncode == 130
    assert out == ""
