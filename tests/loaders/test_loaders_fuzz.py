"""Mutated files: every loader either returns traces or raises LoaderError, nothing else."""

from __future__ import annotations

import contextlib
import json
import random
from pathlib import Path
from typing import Any

import pytest

from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.trajectory import build_trajectory
from otel_eval.receive.loaders import LoaderError, load_file

DATA = Path(__file__).resolve().parents[1] / "data" / "loaders"
FILES = ["otlp_request.json", "span_tree.json", "tau_runs.json", "mini.traj.json"]
ODD_VALUES: list[Any] = [None, 0, -1, 1.5, "", "x", [], {}, [1, "a"], {"a": None}, True,
                         "PT", "2025-13-45T99:99:99Z", "zz" * 8, "\ud800"]


def _mutate(node: Any, rng: random.Random) -> Any:
    """Replace a random subset of values anywhere in the document with odd values."""
    if isinstance(node, dict):
        return {k: (rng.choice(ODD_VALUES) if rng.random() < 0.08 else _mutate(v, rng))
                for k, v in node.items()}
    if isinstance(node, list):
        return [rng.choice(ODD_VALUES) if rng.random() < 0.08 else _mutate(v, rng)
                for v in node]
    return node


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("seed", range(25))
def test_mutated_documents_load_or_fail_cleanly(tmp_path: Path, name: str, seed: int) -> None:
    rng = random.Random(seed)
    doc = _mutate(json.loads((DATA / name).read_text()), rng)
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    try:
        traces = load_file(path)
    except LoaderError as e:
        assert str(path) in str(e)
        return
    for trace in traces:
        build_trajectory(trace, TrajectoryConfig())


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("seed", range(10))
def test_truncated_and_corrupted_bytes(tmp_path: Path, name: str, seed: int) -> None:
    rng = random.Random(seed)
    data = bytearray((DATA / name).read_bytes())
    if seed % 2:
        del data[rng.randrange(len(data)):]
    else:
        for _ in range(5):
            data[rng.randrange(len(data))] = rng.randrange(256)
    path = tmp_path / name
    path.write_bytes(bytes(data))
    with contextlib.suppress(LoaderError):
        load_file(path)
