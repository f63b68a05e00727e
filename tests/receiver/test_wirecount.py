"""``decode.wirecount.count_messages``: the tags counted in one pass equal a count per tag,
in a request of one slice and in one of several (``_COUNT_CHUNK``), tags on a slice's edge."""

from __future__ import annotations

import random

import pytest

from otel_eval.decode import wirecount
from otel_eval.decode.wirecount import MESSAGE_TAGS, count_messages


def _per_tag(body: bytes) -> int:
    return sum(body.count(tag) for tag in MESSAGE_TAGS)


@pytest.mark.parametrize("size", [0, 1, 4096, 200_000])
def test_counted_in_one_pass_as_tag_by_tag(size: int) -> None:
    body = random.Random(size).randbytes(size)
    assert count_messages(body) == _per_tag(body)


def test_a_request_of_several_slices_counts_each_tag_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wirecount, "_COUNT_CHUNK", 7)
    body = MESSAGE_TAGS[0] * 7 + random.Random(1).randbytes(100) + MESSAGE_TAGS[-1] * 8
    assert count_messages(body) == _per_tag(body) >= 15
