"""Operating serve: floods, one instance per store, start-up failures, malformed input."""

from __future__ import annotations

import sys
from pathlib import Path

# the in-process service harness (service_harness.py) lives with the receiver tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "receiver"))
