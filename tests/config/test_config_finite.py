"""Every float setting refuses a number that is not finite (``.inf``, ``.nan``, ``1e400`` and
an integer past a float's range, which overflow to infinity) at load, with one line naming
the setting: ``assembly.grace_s: 1e400`` was taken as a grace period of infinity (no run ever
released), and a 400-digit integer was an ``OverflowError`` out of the loader."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

import pytest

from otel_eval.app.config import Config, build, load_config
from otel_eval.base.configcheck import ConfigError


def _float_settings(cls: Any, prefix: str = "") -> list[str]:
    """The dotted path of every float field (float or float | None) under ``cls``."""
    out: list[str] = []
    for name, tp in typing.get_type_hints(cls).items():
        if name not in {f.name for f in dataclasses.fields(cls)}:
            continue
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if dataclasses.is_dataclass(tp):
            out += _float_settings(tp, f"{prefix}{name}.")
        elif tp is float or args == [float]:
            out.append(f"{prefix}{name}")
    return out


def _nested(path: str, value: Any) -> dict[str, Any]:
    data: Any = value
    for key in reversed(path.split(".")):
        data = {key: data}
    return data


FLOATS = _float_settings(Config)


def test_the_float_settings_are_found() -> None:
    assert "assembly.grace_s" in FLOATS and "judge.sampling.rate" in FLOATS
    assert len(FLOATS) > 40, FLOATS


@pytest.mark.parametrize("value", ["1e400", float("inf"), float("-inf"), float("nan"),
                                   "nan", "-Infinity", 10**400],
                         ids=["1e400", "inf", "-inf", "nan", "nan-text", "-Infinity", "10^400"])
def test_every_float_setting_refuses_a_number_that_is_not_finite(value: Any) -> None:
    for path in FLOATS:
        with pytest.raises(ConfigError) as e:
            build(Config, _nested(path, value))
        mine = [err for err in e.value.errors if err.split(": ")[0] == path]
        assert len(mine) == 1 and mine[0].startswith(f"{path}: must be a finite number, got"), (
            path, e.value.errors)


@pytest.mark.parametrize(("text", "shown"), [
    ("assembly:\n  grace_s: 1e400\n", "'1e400'"),
    ("assembly:\n  grace_s: .inf\n", "inf"),
    ("assembly:\n  grace_s: -.inf\n", "-inf"),
    ("assembly:\n  grace_s: .nan\n", "nan"),
    ("assembly:\n  grace_s: ${GRACE:-inf}\n", "'inf'"),
    ("assembly:\n  grace_s: " + "9" * 400 + "\n", "99999"),
    ("judge:\n  sampling:\n    rate_by_agent:\n      planner: .nan\n", "nan"),
])
def test_a_yaml_number_that_is_not_finite_is_one_line_naming_it(tmp_path: Path, text: str,
                                                                 shown: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(path, {})
    assert len(e.value.errors) == 1, e.value.errors
    setting = "judge.sampling.rate_by_agent.planner" if "planner" in text \
        else "assembly.grace_s"
    assert e.value.errors[0].startswith(f"{setting}: must be a finite number, got {shown}")
    assert len(e.value.errors[0]) < 200  # the 400 digits are cut short


def test_finite_numbers_are_still_taken() -> None:
    cfg = build(Config, {"assembly": {"grace_s": "1e3"}, "judge": {"sampling": {"rate": 0.5}}})
    assert cfg.assembly.grace_s == 1000.0 and cfg.judge.sampling.rate == 0.5
