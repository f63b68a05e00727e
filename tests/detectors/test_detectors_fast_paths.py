"""The hand-written fast paths equal the general encoders they replace, on random values:
canonical call arguments (detectors) and GenAI message JSON (chat loaders)."""

from __future__ import annotations

import random
from typing import Any

from otel_eval.evaluate.detectors.canonical import _CANONICAL, _normalize, _plain_canonical
from otel_eval.receive.loaders.chat import dumps, genai_message, message_json

_TEXTS = ["", "a", "  two  words ", "tab\tnew\nline", "quote \" back \\ slash", "ünïcödé ✓",
          "\u2028sep", "emoji 😀", "ctl \x01\x1f"]


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(8 if depth < 3 else 6)
    if kind == 0:
        return rng.choice(_TEXTS)
    if kind == 1:
        return rng.randint(-10**12, 10**12)
    if kind == 2:
        return rng.choice([0.0, 250.0, -3.0, 1.5, 1e300, float(rng.randint(0, 99))])
    if kind == 3:
        return rng.choice([True, False, None])
    if kind == 4:
        return rng.choice(_TEXTS) + str(rng.random())
    if kind == 5:
        return rng.randint(0, 3)
    if kind == 6:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(_TEXTS) + str(i): _value(rng, depth + 1) for i in range(rng.randrange(4))}


def test_plain_canonical_equals_the_sorted_key_encoder() -> None:
    rng = random.Random(7)
    checked = 0
    for _ in range(20_000):
        v = _value(rng)
        fast = _plain_canonical(v)
        if fast is not None:
            assert fast == _CANONICAL(_normalize(v)), v
            checked += 1
    assert checked > 15_000  # the fast path covers plain JSON values
    assert _plain_canonical({1: "non-string key"}) is None  # falls back, not guesses
    assert _plain_canonical(2.5) is None


def _message(rng: random.Random) -> dict[str, Any]:
    role = rng.choice(["user", "assistant", "tool", "system", None])
    msg: dict[str, Any] = {"role": role}
    if rng.random() < 0.8:
        msg["content"] = rng.choice([rng.choice(_TEXTS), None, "", [{"type": "text",
                                                                     "text": "x"}]])
    if role == "tool":
        msg["tool_call_id"] = rng.choice(["call_1", None, 7])
    if role == "assistant" and rng.random() < 0.5:
        msg["tool_calls"] = [{"id": f"c{i}", "function": {
            "name": rng.choice(["search", None, "ü"]),
            "arguments": rng.choice(['{"q": "a b"}', "not json", None, {"k": [1, 2.0]},
                                     '{"a": 1e999}', "[1, 2]"])}}
            for i in range(rng.randrange(3))]
    return msg


def test_message_json_equals_dumps_of_genai_message() -> None:
    rng = random.Random(11)
    for _ in range(20_000):
        m = _message(rng)
        assert message_json(m) == dumps(genai_message(m)), m


def test_stagnation_precheck_never_rejects_a_similar_pair() -> None:
    """The pigeonhole pre-check may only say False when difflib's word ratio is below the
    threshold (random near-duplicates and unrelated outputs, several thresholds)."""
    import difflib

    from otel_eval.evaluate.detectors.stagnation import _shares_a_run, _spaced

    rng = random.Random(3)
    vocab = [f"w{i}" for i in range(12)]
    rejected = 0
    for _ in range(20_000):
        a = [rng.choice(vocab) for _ in range(rng.randint(1, 30))]
        b = list(a)
        for _ in range(rng.randint(0, 6)):  # a few edits: insert, delete, replace
            op = rng.randrange(3)
            if op == 0:
                b.insert(rng.randint(0, len(b)), rng.choice(vocab))
            elif b and op == 1:
                del b[rng.randrange(len(b))]
            elif b:
                b[rng.randrange(len(b))] = rng.choice(vocab)
        if rng.random() < 0.3:
            b = [rng.choice(vocab) for _ in range(rng.randint(1, 30))]
        threshold = rng.choice([0.8, 0.9, 0.95])
        if not _shares_a_run(_spaced(a), _spaced(b)[0], len(a) + len(b), threshold):
            rejected += 1
            ratio = difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
            assert ratio < threshold, (a, b, threshold)
    assert rejected > 1_000  # the pre-check does reject unrelated outputs
