"""Deterministic issue titles read as a phrase: the central critique's first clause."""

from __future__ import annotations

import pytest

from otel_eval.outputs.issues.naming import deterministic_name, phrase


@pytest.mark.parametrize(("critique", "title"), [
    ("read_file called 2 times in a row with identical arguments",
     "read_file called 2 times in a row with identical arguments"),
    ("Re-read docs/config.md although its content was already in context. Wasted a call.",
     "Re-read docs/config.md although its content was already in context"),
    ("The agent never verified the edit; it declared success anyway",
     "The agent never verified the edit"),
    ("search  was\n called with the same query over and over again until the step budget "
     "of the whole run ran out", "search was called with the same query over and over again "
                                  "until the…"),
    ("x" * 200, "x" * 71 + "…"),
])
def test_title_is_the_first_clause_cut_at_a_word(critique: str, title: str) -> None:
    assert phrase(critique) == title
    assert len(phrase(critique)) <= 72


def test_terms_only_when_the_critique_has_no_words() -> None:
    assert deterministic_name(["any_order", "arguments"], "  ").title == "any_order, arguments"
    named = deterministic_name(["any_order", "arguments", "calls"],
                               "expected calls in any order; got them out of order")
    assert named.title == "expected calls in any order"
    assert named.description == "expected calls in any order; got them out of order"
