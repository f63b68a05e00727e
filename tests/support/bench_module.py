"""Test helper: load a script of ``bench/`` as a module (the bench scripts are not a package),
so tests can run its strategies or shapes in a bounded, deterministic way."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench(filename: str, name: str) -> ModuleType:
    """``bench/<filename>`` executed as a fresh module called ``name``."""
    spec = importlib.util.spec_from_file_location(name, BENCH / filename)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # registered first, as an import does: dataclasses need it
    spec.loader.exec_module(module)
    return module
