"""Stage: predict (text features). What a run says -> bounded text -> TF-IDF terms.

    run_text(evaluation) -> "[final] ... [last] ... [errors] ... [results] ..."
    terms(text)          -> {"unable": 2, "unable to": 1, ...}   (word 1- and 2-grams)

Text carries what counts cannot: "I'm unable to", "I apologize", "successfully cancelled",
a test run that still fails at the end. The families read (each cut to its own bound, so a
run's text is at most ``MAX_RUN_TEXT_CHARS`` whatever its size):

- ``final``: the run's final output (its last ``FAMILY_CHARS`` characters);
- ``last``: the agent's last ``LAST_ANSWERS`` replies (LLM answers), each cut likewise;
- ``errors``: the errors of failed steps and the start of their results;
- ``results``: the tail of the last ``LAST_RESULTS`` tool results (a test run's verdict).

Never read: what the user or the outcome attribute says, the verdict, the reference. So the
text is as outcome-blind as the counts (``predict.features``).

``terms`` is scikit-learn's ``CountVectorizer`` analyzer with its defaults (lowercase, token
pattern ``(?u)\\b\\w\\w+\\b``, n-grams joined by one space) written out in plain Python, so
``serve`` predicts without importing scikit-learn; ``tests/predict`` proves the two give the
same terms on the datasets, and ``train`` fits with exactly this function as the analyzer.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator

from otel_eval.base.results import Evaluation
from otel_eval.base.steps import Step

TEXT_VERSION = 1
FAMILY_CHARS = 2000
LAST_ANSWERS = 3
LAST_RESULTS = 12
RESULT_TAIL_CHARS = 300
ERROR_CHARS = 300
MAX_ERRORS = 12
NGRAM_MAX = 2
MAX_RUN_TEXT_CHARS = FAMILY_CHARS * (2 + LAST_ANSWERS) + MAX_ERRORS * 2 * ERROR_CHARS \
    + LAST_RESULTS * RESULT_TAIL_CHARS + 100
# scikit-learn's token pattern is (?u)\b\w\w+\b; a maximal run of two or more word
# characters already starts and ends at a word boundary, so the \b are dropped (the same
# tokens, found faster; tests/predict compare with scikit-learn's analyzer).
_TOKEN = re.compile(r"\w\w+")
# The same, faster, for ASCII text (almost every run): the word characters of ASCII are
# letters, digits and "_"; every other character becomes a space and the text is split.
_ASCII_NOT_WORD = str.maketrans({c: " " for c in map(chr, range(128))
                                 if not (c.isalnum() or c == "_")})


def _tail(text: str | None, n: int = FAMILY_CHARS) -> str:
    return text[-n:] if text else ""


def _output(evaluation: Evaluation) -> str:
    out = evaluation.trajectory.output
    return out if isinstance(out, str) else ""


def _answers(steps: list[Step]) -> list[str]:
    llm = [s.answer for s in steps if s.kind == "llm" and s.answer]
    return [_tail(a) for a in llm[-LAST_ANSWERS:]]


def _errors(steps: list[Step]) -> list[str]:
    failed = [s for s in steps if s.status == "error"][-MAX_ERRORS:]
    return [f"{(s.error or '')[:ERROR_CHARS]} {(s.result or '')[:ERROR_CHARS]}" for s in failed]


def _results(steps: list[Step]) -> list[str]:
    tools = [s for s in steps if s.kind == "tool"][-LAST_RESULTS:]
    return [_tail(s.result, RESULT_TAIL_CHARS) for s in tools]


def run_text(evaluation: Evaluation) -> str:
    """The run's text families, each bounded (at most ``MAX_RUN_TEXT_CHARS`` in all)."""
    steps = evaluation.trajectory.steps
    parts = [("final", [_tail(_output(evaluation))]), ("last", _answers(steps)),
             ("errors", _errors(steps)), ("results", _results(steps))]
    return "\n".join(f"[{name}] " + "\n".join(texts) for name, texts in parts)


def terms(text: str) -> list[str]:
    """Word 1- to ``NGRAM_MAX``-grams of ``text``, as scikit-learn's default word analyzer
    gives them (in order, repeated as often as they occur)."""
    tokens = _tokens(text)
    out = list(tokens)
    for n in range(2, NGRAM_MAX + 1):
        out.extend(map(" ".join, _ngrams(tokens, n)))
    return out


def _tokens(text: str) -> list[str]:
    """The words of ``text`` as scikit-learn's default token pattern finds them, lowercased."""
    lowered = text.lower()
    if lowered.isascii():
        return [w for w in lowered.translate(_ASCII_NOT_WORD).split() if len(w) > 1]
    return _TOKEN.findall(lowered)


def _ngrams(tokens: list[str], n: int) -> Iterator[tuple[str, ...]]:
    return zip(*(tokens[k:] for k in range(n)), strict=False)


def term_key(term: str) -> str | tuple[str, ...]:
    """A term as ``term_counts`` counts it: a word, or an n-gram as the tuple of its words."""
    words = term.split(" ")
    return words[0] if len(words) == 1 else tuple(words)


def term_counts(text: str) -> tuple[Counter[str], Counter[tuple[str, ...]]]:
    """How often each term of ``terms(text)`` occurs: (the words, the 2- to ``NGRAM_MAX``-grams
    as tuples of words; ``term_key``). Iterated in that order, the same terms in the same
    order as ``Counter(terms(text))``, without joining the n-grams into strings (what the
    predictor reads at prediction time)."""
    tokens = _tokens(text)
    ngrams: Counter[tuple[str, ...]] = Counter()
    for n in range(2, NGRAM_MAX + 1):
        ngrams.update(_ngrams(tokens, n))
    return Counter(tokens), ngrams
