"""Deterministic trajectory detectors (stage: evaluate). Each is a pure function of a trajectory."""
