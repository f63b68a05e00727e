"""The cost guard: the work per span may not grow unnoticed (issue 34).

Each stage's Python calls per span and per run on the fixed corpus (``work.py``) must stay
within ``budget.toml``; a stage over budget fails with what to do. The guard is shown to trip:
a convention reader made to do a few more calls per span fails it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cost import work

from otel_eval.evaluate.conventions import ADAPTERS, fields
from otel_eval.receive.loaders import load_path

BUDGET = Path(__file__).with_name("budget.toml")
ROOT = Path(__file__).resolve().parents[2]
UNITS = {"calls_per_span": ("per_span", "calls/span"), "calls_per_run": ("per_run", "calls/run")}


def budget() -> dict[str, dict[str, float]]:
    data = tomllib.loads(BUDGET.read_text())
    return {f"{corpus}.{stage}": limits for corpus, stages in data.items()
            for stage, limits in stages.items()}


def over_budget(measured: dict[str, work.Work], limits: dict[str, dict[str, float]]
                ) -> list[str]:
    """One line per stage and unit over its budget, saying what to do about it."""
    out = []
    for stage, done in sorted(measured.items()):
        for key, (attr, unit) in UNITS.items():
            value, allowed = getattr(done, attr), limits[stage][key]
            if value > allowed:
                out.append(f"stage {stage}: {value:.1f} {unit} > budget {allowed}: raise "
                           f"tests/cost/budget.toml in a commit of its own with its reason "
                           f"(or find the new work: {done.calls} calls over {done.spans} "
                           f"spans, {done.runs} runs)")
    return out


@pytest.fixture(scope="module")
def recordings() -> list[work.Requests]:
    return work.conformance_requests()


@pytest.fixture(scope="module")
def measured(recordings: list[work.Requests], datasets: Path,
             tmp_path_factory: pytest.TempPathFactory) -> dict[str, work.Work]:
    tau = work.tau_slice(datasets, tmp_path_factory.mktemp("cost"))
    conformance = work.stage_work(lambda: work.decode_recordings(recordings))
    dataset = work.stage_work(lambda: list(load_path(tau)))
    return ({f"conformance.{k}": v for k, v in conformance.items()}
            | {f"tau.{k}": v for k, v in dataset.items()})


def test_every_stage_has_a_budget(measured: dict[str, work.Work]) -> None:
    assert sorted(budget()) == sorted(measured)
    assert all(sorted(limits) == sorted(UNITS) for limits in budget().values())


def test_the_work_per_span_and_per_run_is_within_budget(measured: dict[str, work.Work]) -> None:
    problems = over_budget(measured, budget())
    assert not problems, "\n".join(problems)


@contextmanager
def slowed_readers(extra_calls: int) -> Iterator[None]:
    """Every convention's field reader (``Adapter.fill``) makes ``extra_calls`` more calls."""
    def nothing() -> None:
        pass

    def slowed(fill: Any) -> Any:
        def fill_slowly(step: Any, span: Any, attrs: Any) -> None:
            for _ in range(extra_calls):
                nothing()
            fill(step, span, attrs)
        return fill_slowly

    originals = [(adapter, adapter.fill) for adapter in ADAPTERS]
    try:
        for adapter, fill in originals:  # frozen: set as the dataclass itself would
            object.__setattr__(adapter, "fill", slowed(fill))
        yield
    finally:
        for adapter, fill in originals:
            object.__setattr__(adapter, "fill", fill)


def test_a_slowed_reader_trips_the_guard(recordings: list[work.Requests]) -> None:
    with slowed_readers(extra_calls=20):
        slow = work.stage_work(lambda: work.decode_recordings(recordings), ("trajectory",))
    problems = over_budget({"conformance.trajectory": slow["trajectory"]}, budget())
    assert len(problems) == 2  # per span and per run
    assert problems[0].startswith("stage conformance.trajectory: ")
    assert "raise tests/cost/budget.toml in a commit of its own with its reason" in problems[0]
    normal = work.stage_work(lambda: work.decode_recordings(recordings), ("trajectory",))
    assert not over_budget({"conformance.trajectory": normal["trajectory"]}, budget())
    assert normal["trajectory"].calls < slow["trajectory"].calls  # restored: the same work


_SEEDED = """
import json
from cost import work
recordings = work.conformance_requests()[:12]
print(json.dumps({k: v.calls for k, v in
                  work.stage_work(lambda: work.decode_recordings(recordings)).items()}))
"""


def test_the_counts_do_not_depend_on_the_hash_seed() -> None:
    """Sets of strings iterate in another order under another ``PYTHONHASHSEED``: the count
    must not follow (else the guard would be flaky)."""
    def counts(seed: str) -> dict[str, int]:
        env = {**os.environ, "PYTHONHASHSEED": seed,
               "PYTHONPATH": os.pathsep.join((str(ROOT), str(ROOT / "tests")))}
        out = subprocess.run([sys.executable, "-c", _SEEDED], env=env, capture_output=True,
                             text=True, check=True, timeout=300)
        return dict(json.loads(out.stdout))

    first = counts("1")
    assert first == counts("2") and all(first.values())


def test_the_count_does_not_depend_on_what_ran_before(recordings: list[work.Requests]) -> None:
    """A plan cache nearly full when the guard runs (other tests' shapes) emptied itself
    inside the count and added ~3 calls a span (CI failed on the order, not the code)."""
    def trajectory() -> int:
        return work.stage_work(lambda: work.decode_recordings(recordings),
                               ("trajectory",))["trajectory"].calls

    fresh = trajectory()
    fields._plans.clear()
    fields._plans.update({("another test's shape", i): None  # type: ignore[misc]
                          for i in range(fields._PLAN_CACHE - 10)})
    assert trajectory() == fresh
