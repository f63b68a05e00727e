"""store.retention_days: evaluations older than the retention are deleted, newer ones kept."""

from __future__ import annotations

from pathlib import Path

from support.harness import Harness, running_service

from otel_eval.base.results import Evaluation
from otel_eval.base.steps import Trajectory

DAY_NS = 86400 * 10**9


def _put(h: Harness, trace_id: str, evaluated_at_ns: int) -> None:
    traj = Trajectory(trace_id, "otlp", "complete", [])
    h.svc.store.put_many([Evaluation(traj, [], None, evaluated_at_ns=evaluated_at_ns)])


def test_retention_deletes_only_what_is_older(tmp_path: Path) -> None:
    now = 1_800_000_000 * 10**9
    with running_service(tmp_path, **{"store.retention_days": 7.0}) as h:
        _put(h, "a" * 32, now - 8 * DAY_NS)
        _put(h, "b" * 32, now - 6 * DAY_NS)
        assert h.svc.apply_retention(now) == 1
        assert h.svc.store.get("a" * 32) is None and h.svc.store.get("b" * 32) is not None


def test_zero_keeps_everything(tmp_path: Path) -> None:
    now = 1_800_000_000 * 10**9
    with running_service(tmp_path, **{"store.retention_days": 0.0}) as h:
        _put(h, "a" * 32, now - 800 * DAY_NS)
        assert h.svc.apply_retention(now) == 0
        assert h.svc.store.get("a" * 32) is not None


def test_a_retention_longer_than_the_epoch_keeps_everything(tmp_path: Path) -> None:
    """``store.retention_days: .inf`` (or 1,000,000) is accepted and keeps every row: the
    cutoff was a time past a 64-bit integer, and every pass raised (logged hourly as a
    failure) instead of deleting nothing."""
    now = 1_800_000_000 * 10**9
    for days in (float("inf"), 1_000_000.0):
        with running_service(tmp_path, **{"store.retention_days": days}) as h:
            _put(h, "a" * 32, now - 800 * DAY_NS)
            assert h.svc.apply_retention(now) == 0
            assert h.svc.store.get("a" * 32) is not None
