"""Call keys are bounded (``detectors.canonical``): the canonical text of a call's arguments,
streamed, is the key itself when short, else its head and a digest. The pieces join into
exactly ``canonical_arguments``'s text (random values, the non-plain ones too), keys
are equal exactly when the texts are, and a key holds at most ~300 characters whatever the
argument's size: before, each call kept its whole canonical text (~290 kB for a 48 kB
argument of control characters)."""

from __future__ import annotations

import random
import tracemalloc
from collections import OrderedDict
from decimal import Decimal

import pytest
from detector_factory import tool, traj
from test_detectors_fast_paths import _value

from otel_eval.evaluate.detectors.calls import Context, calls
from otel_eval.evaluate.detectors.canonical import (
    HEAD_CHARS,
    _canonical,
    arguments_key,
    canonical_arguments,
    canonical_pieces,
    key_text,
    normalized_text,
)
from otel_eval.evaluate.detectors.config import DetectorsConfig
from otel_eval.evaluate.detectors.loop import detect as loop_detect

_ODD = [2.5, -0.1, float("nan"), float("inf"), float("-inf"), 1e300, (1, "a  b"),
        {1: "x", "1": "y"}, {2: "b", "a": 1}, OrderedDict([("b", 1), ("a", " x ")]),
        Decimal("1.5"), b"by  tes", {"k": [1.0, 2.5, {"n": None}]}, "\x1c sep\u2028x\x1f",
        [True, False, None, "", "  "], "a" * 10_000 + " " + "\x01" * 9_000]


@pytest.mark.parametrize("value", _ODD, ids=repr)
def test_the_pieces_join_into_the_canonical_text(value: object) -> None:
    assert "".join(canonical_pieces(value)) == _canonical(value)


def test_the_pieces_join_into_the_canonical_text_of_random_values() -> None:
    rng = random.Random(21)
    for _ in range(20_000):
        v = _value(rng)
        assert "".join(canonical_pieces(v)) == _canonical(v), v


@pytest.mark.parametrize("text", ["", "  ", " a  b\tc\n", "x" * 9000 + "  y", "\x85z\u3000w"])
def test_normalized_text_in_pieces_is_split_and_joined(text: str) -> None:
    assert "".join(normalized_text(text)) == " ".join(text.split())


@pytest.mark.parametrize("arguments", [None, '{"b": 1, "a": " x  y "}', "not json  at all",
                                       {"q": "short"}, {"q": "long " * 200}, "[1, 2.5]"])
def test_a_short_key_is_the_text_a_long_one_its_head_and_digest(arguments: object) -> None:
    text = canonical_arguments(arguments)
    key = arguments_key(arguments)
    if len(text) <= HEAD_CHARS:
        assert key == text
    else:
        head, tail = key.split("\x02")
        assert head == text[:HEAD_CHARS] and tail.startswith(f"{len(text)}:")
        assert len(key) < HEAD_CHARS + 60


def test_keys_are_equal_exactly_when_the_texts_are() -> None:
    big = "\x01" * 48_000
    assert arguments_key({"data": big}) == arguments_key({"data": big + "  "})  # same text
    assert arguments_key({"data": big}) != arguments_key({"data": big[:-1] + "\x02"})
    assert arguments_key({"data": big}) != arguments_key({"data": big + "\x01"})
    # a short text shaped like a long one's key is no equal of it: keys past HEAD_CHARS
    # are always digested
    long_key = key_text(["x" * 300])
    assert key_text([long_key]) != long_key


def test_a_calls_key_is_bounded_whatever_its_arguments_size() -> None:
    big = "\x01" * 48_000  # JSON: 6 bytes each, ~290 kB of canonical text
    t = traj(*(tool("get_weather", {"location": big}) for _ in range(3)))
    cs = calls(t, DetectorsConfig().loop, DetectorsConfig().tool_call)
    assert len({c.key for c in cs}) == 1 and all(len(c.key) < 400 for c in cs)
    findings = loop_detect(t, DetectorsConfig(), Context())
    assert [f.kind for f in findings] == ["repeated_call"]  # still found, as before


def test_computing_a_key_holds_memory_independent_of_the_argument_size() -> None:
    big = {"data": "\x01" * 480_000}  # 2.9 MB of canonical text when built whole
    tracemalloc.start()
    try:
        arguments_key(big)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 200_000, peak  # one 4096-character piece escaped, not the whole text
