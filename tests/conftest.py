"""Shared test helpers: span factories and free-port servers live next to the tests using them."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT.parent / "shared" / "datasets"


@pytest.fixture(scope="session")
def datasets() -> Path:
    """The shared public datasets (read-only). Their absence is a broken checkout, not a skip."""
    assert DATASETS.is_dir(), f"expected the shared datasets at {DATASETS}"
    return DATASETS
