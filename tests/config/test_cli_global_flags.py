"""The command's global flags (``--log-level``) are taken before the command and after it,
in any case (``debug``), by every command, and its ``--help`` says so: ``otel-eval serve
--log-level debug`` was "unrecognized arguments" (exit 2), and ``--log-level debug`` was
refused anywhere ("invalid choice": only ``DEBUG``)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from otel_eval.app.cli_args import build_parser


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions
               if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize(("argv", "level"), [
    (["config"], "INFO"),
    (["--log-level", "debug", "config"], "DEBUG"),
    (["config", "--log-level", "debug"], "DEBUG"),
    (["config", "--log-level", "WARNING"], "WARNING"),
    (["--log-level", "ERROR", "config"], "ERROR"),  # not reset by the command's default
    (["--log-level", "ERROR", "config", "--log-level", "debug"], "DEBUG"),  # the last
    (["eval", "runs.json", "--log-level", "debug"], "DEBUG"),
    (["serve", "--log-level", "debug", "--config", "c.yaml"], "DEBUG"),
])
def test_log_level_is_taken_before_and_after_the_command(argv: list[str], level: str) -> None:
    assert build_parser().parse_args(argv).log_level == level


def test_every_command_takes_the_global_flags_and_its_help_says_so() -> None:
    for name, parser in _commands().items():
        assert "--log-level" in parser._option_string_actions, name
        assert "--log-level" in parser.format_help(), name
    assert "before or after the command" in build_parser().format_help()


def test_a_level_that_is_none_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["config", "--log-level", "loud"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "invalid choice: 'LOUD'" in err, err


def test_the_command_line_takes_it_after_the_command() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-m", "otel_eval.app.cli", "config",
                           "--log-level", "debug"], capture_output=True, text=True,
                          timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert "receiver:" in done.stdout
