"""``otel-eval issues`` twice over the same input, in two processes with different hash
seeds: the same issues with the same ids, titles and members (issue 29: ids stable across
two runs). Input: every human error description of the TRAIL GAIA traces we hold, each a
judge critique of its agent node, as the held-out check feeds them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.bench_module import load_bench

ROOT = Path(__file__).resolve().parents[2]


def _run(path: Path, seed: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "otel_eval", "issues", str(path),
                           "--format", "json"], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def _view(data: dict[str, Any]) -> tuple[Any, ...]:
    issues = sorted((i["issue_id"], i["title"], i["critiques"], i["traces"], i["severity"])
                    for i in data["issues"])
    members = sorted((a["trace_id"], a["span_id"], a["issue_id"] or "")
                     for a in data["assignments"])
    return tuple(issues), tuple(members)


@pytest.mark.slow
def test_two_runs_over_the_same_descriptions_give_the_same_ids(
        tmp_path: Path, datasets: Path) -> None:
    bench = load_bench("issues.py", "bench_issues_same_input")
    bench.TRAIL = datasets / "trail" / "GAIA"
    items = bench.load_items()
    path = tmp_path / "trail-critiques.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in bench.evaluations(items)))
    first, second = _run(path, "1"), _run(path, "2")
    assert len(first["issues"]) >= 10  # a real clustering, not an empty one
    assert sum(bool(a["issue_id"]) for a in first["assignments"]) >= 0.8 * len(items)
    assert _view(first) == _view(second)
