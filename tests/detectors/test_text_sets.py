"""The detectors' word and trigram sets, made by C calls for speed (issue 34), are the ones
their plain definitions give."""

import random
from collections import Counter

from otel_eval.evaluate.detectors.reworded import trigrams
from otel_eval.evaluate.detectors.stagnation import _common


def test_trigrams_are_every_three_character_substring() -> None:
    for text in ["", "a", "ab", "abc", "abcd", "aaaa", "ça va? 日本語のテキスト", "x" * 50]:
        assert trigrams(text) == frozenset(text[i:i + 3] for i in range(len(text) - 2))


def test_common_is_the_size_of_the_multiset_intersection() -> None:
    rng = random.Random(7)
    for _ in range(500):
        x = Counter(rng.choice("abcde") for _ in range(rng.randint(0, 12)))
        y = Counter(rng.choice("abcdef") for _ in range(rng.randint(0, 12)))
        assert _common(x, y) == _common(y, x) == sum((x & y).values())
