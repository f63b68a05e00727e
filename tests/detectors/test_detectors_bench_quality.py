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


def test_trail_loop_section_runs(datasets: Path) -> None:
    """The loop / code-action / localisation figures (bench/quality_loops.py) on TRAIL GAIA."""
    spec = importlib.util.spec_from_file_location("bench_quality_loops",
                                                  BENCH.with_name("quality_loops.py"))
    assert spec is not None and spec.loader is not None
    loops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loops)
    figures = loops.trail_loops(datasets)
    before, after = (figures["loop_vs_resource_abuse"][k] for k in ("before", "after"))
    for counts in (before, after):
        assert sum(counts[k] for k in ("tp", "fp", "fn", "tn")) == 56
    assert after["tp"] >= before["tp"]  # code actions and rule (f) only add loop findings
    assert figures["code_actions"]["rebuilt_steps"] == 22  # the managed-agent calls
    abuse = figures["localisation_after"]["resource abuse"]
    assert abuse["annotations"] == 14 == sum(v for k, v in abuse.items() if k != "annotations")
