"""Decoding OTLP attributes: every AnyValue member to its Python value, "" kept as "" (the
string fast path reads non-empty strings without asking which member is set)."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList

from otel_eval.decode.otlp import attributes_to_dict

CASES: list[tuple[str, AnyValue, Any]] = [
    ("string", AnyValue(string_value="hello"), "hello"),
    ("empty string", AnyValue(string_value=""), ""),
    ("unset", AnyValue(), None),
    ("int", AnyValue(int_value=-7), -7),
    ("zero int", AnyValue(int_value=0), 0),
    ("bool", AnyValue(bool_value=True), True),
    ("false", AnyValue(bool_value=False), False),
    ("double", AnyValue(double_value=0.25), 0.25),
    ("bytes", AnyValue(bytes_value=b"\x00\x01"), "AAE="),
    ("array", AnyValue(array_value=ArrayValue(values=[
        AnyValue(string_value="a"), AnyValue(int_value=2), AnyValue(string_value="")])),
     ["a", 2, ""]),
    ("kvlist", AnyValue(kvlist_value=KeyValueList(values=[
        KeyValue(key="k", value=AnyValue(string_value="v")),
        KeyValue(key="e", value=AnyValue(string_value=""))])), {"k": "v", "e": ""}),
]


@pytest.mark.parametrize(("name", "value", "expected"), CASES, ids=[c[0] for c in CASES])
def test_each_anyvalue_member(name: str, value: AnyValue, expected: Any) -> None:
    got = attributes_to_dict([KeyValue(key=name, value=value)])
    assert got == {name: expected}
    assert type(got[name]) is type(expected)


def test_later_key_wins_and_order_is_kept() -> None:
    kvs = [KeyValue(key="a", value=AnyValue(string_value="1")),
           KeyValue(key="b", value=AnyValue(int_value=2)),
           KeyValue(key="a", value=AnyValue(string_value=""))]
    assert list(attributes_to_dict(kvs).items()) == [("a", ""), ("b", 2)]
