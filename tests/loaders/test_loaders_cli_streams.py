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


@pytest.mark.parametrize("argv", [
    ["eval", "--format", "jsonl"], ["eval"], ["inspect"],
])
def test_a_closed_pipe_keeps_the_exit_code_a_bad_file_earned(tmp_path: Path,
                                                              argv: list[str]) -> None:
    """A file that could not be read makes the command exit 1; when the output pipe then
    closed (``| head``), main's handler returned 0, and a script (``set -o pipefail``) saw
    a clean run. Now it returns the status earned by then: 1."""
    bad = tmp_path / "a_bad.json"
    bad.write_text('{"foo": 1}')
    good = DATA / ("otlp_request.json" if argv[0] == "inspect" else "tau_runs.json")
    paths = [str(good), str(bad)] if argv[0] == "inspect" else [str(tmp_path / "in")]
    if argv[0] != "inspect":
        (tmp_path / "in").mkdir()
        bad.rename(tmp_path / "in" / bad.name)
        (tmp_path / "in" / ("z_" + good.name)).write_bytes(good.read_bytes())
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "otel_eval", argv[0], *paths, *argv[1:]],
                              env=_env(), stdout=write, stderr=subprocess.PIPE, text=True,
                              timeout=300, check=False)
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "a_bad.json" in done.stderr and done.returncode == 1, done.stderr[-2000:]
