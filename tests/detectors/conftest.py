"""Detector test fixtures. The trajectory factory is ``detector_factory`` (imported by name,
like the other test helper modules), so table-driven cases can build steps at collection."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_eval.evaluate.detectors.config import DetectorsConfig

DATA = Path(__file__).resolve().parents[1] / "data" / "detectors"


@pytest.fixture
def config() -> DetectorsConfig:
    return DetectorsConfig()


@pytest.fixture(scope="session")
def detector_data() -> Path:
    return DATA
