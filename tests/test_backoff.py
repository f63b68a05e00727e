"""base.backoff: the one retry schedule (sender, judge client, worker pool, store health)."""

from __future__ import annotations

import pytest

from otel_eval.base.backoff import Backoff


def test_doubles_from_initial_up_to_the_cap() -> None:
    b = Backoff(0.5, 5.0)
    assert [b.delay_s(n) for n in range(7)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    assert b.delay_s(10_000) == 5.0  # no overflow however long it fails


@pytest.mark.parametrize("draw, want", [(0.0, 4.0), (0.5, 3.0), (0.999, 2.002)])
def test_jitter_takes_off_up_to_its_fraction(draw: float, want: float) -> None:
    assert Backoff(1.0, 10.0, jitter=0.5, rng=lambda: draw).delay_s(2) == pytest.approx(want)


def test_a_servers_hint_replaces_the_schedule_even_past_the_cap() -> None:
    b = Backoff(0.5, 5.0, jitter=0.5, rng=lambda: 0.9)
    assert b.delay_s(0, hint_s=30.0) == 30.0 and b.delay_s(3, hint_s=-1.0) == 0.0


def test_within_a_deadline() -> None:
    assert Backoff.within(10.0, 2.0, 12.0) and not Backoff.within(10.0, 2.1, 12.0)


@pytest.mark.parametrize("kw", [{"initial_s": -1, "max_s": 1}, {"initial_s": 1, "max_s": 1,
                                                                "multiplier": 0.5},
                                {"initial_s": 1, "max_s": 1, "jitter": 1.5}])
def test_invalid_schedules_are_refused(kw: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="invalid back-off"):
        Backoff(**kw)
