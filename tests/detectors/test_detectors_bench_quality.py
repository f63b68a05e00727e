"""Smoke test of bench/quality.py on the tau-bench file (the fast section)."""

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "quality.py"


def test_tau_bench_section_runs(datasets: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_quality", BENCH)
    assert spec is not None and spec.loader is not None
    quality = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quality)
    figures = quality.tau_bench(datasets)
    assert figures["runs"] == 100 and figures["reward_1"] == 31
    assert figures["gold_mismatches_vs_run_info"] == 0
    assert 0.0 <= figures["auc_reference_score_vs_reward"] <= 1.0
    assert sum(figures["reference_matched"].values()) == 100
