"""A bounded, deterministic fuzz run (Hypothesis, ``derandomize=True``) over OTLP decode, the
convention adapters + trajectory build, and the detectors: the strategies and checks of
``bench/fuzz.py`` (which runs them long and counts crashes and hangs). Each input must end in
a result or a clean error; evaluation must give a verdict without ``evaluation_error``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from support.bench_module import load_bench

FUZZ = load_bench("fuzz.py", "fuzz_bench")
EXAMPLES = {"decode": 150, "decode_json": 40, "trajectory": 40, "evaluate": 40}


@pytest.mark.parametrize("target", list(FUZZ.TARGETS))
def test_fuzzed_inputs_end_cleanly(target: str) -> None:
    strategy, check = FUZZ.TARGETS[target]

    @settings(max_examples=EXAMPLES[target], derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(strategy)
    def run(value: Any) -> None:
        check(value)

    run()
