"""Loop rule (d), stagnation (stage: evaluate): consecutive near-identical LLM outputs, the
model saying the same thing again without progress.

Outputs are compared on the word-level similarity of what differs between them, each
character of Chinese, Japanese or Thai a word (``base.words``): the lines two outputs share,
such as a framework's output template, are left out, so six DSPy ReAct turns that share the
template but call the tool with six cities are not alike, nor are outputs that asked for
different calls: the next page of one long query is progress. ``loop.detect`` runs
``stagnation`` over the outputs of each invocation (``calls.invocations``) and drops a run
that ``explained`` finds to be a loop of calls already flagged, seen from the model's side.
The text comparison (``_similar``) puts cheap bounds before difflib: it is read for every
pair of consecutive outputs of every run.
"""

from __future__ import annotations

import difflib
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Sequence
from itertools import accumulate
from operator import add

from otel_eval.base.results import Finding
from otel_eval.base.steps import Step
from otel_eval.base.words import wide_len
from otel_eval.base.words import words as _words
from otel_eval.evaluate.conventions.values import cut_json
from otel_eval.evaluate.detectors.canonical import arguments_key, canonical_arguments
from otel_eval.evaluate.detectors.config import LoopConfig

_MAX_COMPARE_WORDS = 800  # similarity beyond this prefix adds cost, not information


def _common(x: Counter[str], y: Counter[str]) -> int:
    """Size of the multiset intersection (= sum((x & y).values()), without building it):
    the shared words by a set intersection, their counts' minima summed, all in C calls (a
    generator's step a word was a Python call each: tests/cost)."""
    shared = x.keys() & y.keys()
    return sum(map(min, map(x.__getitem__, shared), map(y.__getitem__, shared)))


def _spaced(words: list[str]) -> tuple[str, list[int]]:
    """``" w0 w1 ... wn "`` and the offset of the space before each word (and the last)."""
    bounds = [0]
    bounds += map(add, accumulate(map(len, words)), range(1, len(words) + 1))
    return f" {' '.join(words)} ", bounds


def _shares_a_run(a: tuple[str, list[int]], b: str, total: int, threshold: float) -> bool:
    """False only when the word-level difflib ratio of outputs ``a`` and ``b`` (as
    ``_spaced``, ``total`` words together) is below threshold.

    A ratio >= threshold means at most ``d = (1 - threshold) * total`` words are inserted or
    deleted between them (difflib's matches are a common subsequence). Each such edit breaks
    at most one of ``a``'s consecutive pieces, so cut into more than ``d`` pieces, one piece
    appears unbroken, word for word, in ``b``: a few substring searches reject unrelated
    outputs before any counting."""
    text, bounds = a
    n = len(bounds) - 1
    pieces = int((1 - threshold) * total) + 2  # + 2: d rounded up, and one more piece than d
    if pieces > n:
        return True  # pieces of single words could all be edited away: no bound
    size, extra = divmod(n, pieces)
    start = 0
    for p in range(pieces):
        end = start + size + (p < extra)
        if text[bounds[start]:bounds[end] + 1] in b:
            return True
        start = end
    return False


def _lines(text: str) -> Counter[str]:
    """The non-blank lines of an output, stripped; a line break JSON-escaped (an output
    recorded as a JSON list of strings: OpenInference's DSPy ``LM.__call__``) breaks a line
    too."""
    found = Counter(map(str.strip, text.replace("\\n", "\n").splitlines()))
    found.pop("", None)
    return found


def _differing(a: str, b: str) -> tuple[list[str], list[str]]:
    """The words of the lines of ``a`` that ``b`` lacks, and of ``b``'s that ``a`` lacks
    (lines as multisets, compared stripped): what differs between two outputs, without the
    lines they share. A framework's output template (DSPy's ``[[ ## next_thought ## ]]``
    field markers, a fixed tool-name line) is shared line for line, so it is never what makes
    two outputs alike; one-line outputs are compared whole, as before."""
    if "\n" not in a and "\n" not in b and "\\n" not in a and "\\n" not in b:
        return _words(a)[:_MAX_COMPARE_WORDS], _words(b)[:_MAX_COMPARE_WORDS]
    la, lb = _lines(a), _lines(b)
    return (_words(" ".join((la - lb).elements()))[:_MAX_COMPARE_WORDS],
            _words(" ".join((lb - la).elements()))[:_MAX_COMPARE_WORDS])


def _similar(texts: list[str], words: list[list[str]], j: int, threshold: float,
             counts: dict[int, Counter[str]]) -> bool:
    """Whether LLM outputs ``j`` and ``j + 1`` are near-identical: equal, or what differs
    between them (``_differing``) has a word-level difflib ratio >= threshold. The cheap
    bounds on the whole outputs' words come first (``words``; word counts kept in ``counts``,
    each output being compared with both neighbours): they bound what differs too, as the
    lines both share add the same words to both sides of each ratio. Outputs that differ only
    in the order of their lines are alike."""
    if texts[j] == texts[j + 1]:
        return True
    a, b = words[j], words[j + 1]
    total = len(a) + len(b)
    if not total or 2 * min(len(a), len(b)) / total < threshold:
        return False
    for k in (j, j + 1):
        if k not in counts:
            counts[k] = Counter(words[k])
    if 2 * _common(counts[j], counts[j + 1]) / total < threshold:
        return False
    a, b = _differing(texts[j], texts[j + 1])
    if a == b:
        return True
    total = len(a) + len(b)
    if not total or 2 * min(len(a), len(b)) / total < threshold:
        return False
    if not _shares_a_run(_spaced(a), _spaced(b)[0], total, threshold):
        return False
    if 2 * _common(Counter(a), Counter(b)) / total < threshold:
        return False
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() >= threshold


def _output(step: Step) -> str:
    """What an LLM step said: its output text plus the calls it asked for (instrumentations
    that keep tool calls in attributes of their own leave them out of the text, and outputs
    made only of different calls are not alike). Empty when nothing was recorded, or when
    the output, its calls (``Step.calls_unknown``: unnamed, or past ``MAX_OUTPUT_CALLS``)
    or a call's arguments are known only in part (``values.cut_json``: JSON text
    cut at an attribute length limit; the replies may differ past the cut)."""
    text = (step.output_text or "").strip()
    if step.calls_unknown or cut_json(text) or any(
            c.arguments is None or cut_json(c.arguments) for c in step.tool_calls):
        return ""  # unknown (not recorded, or cut), not alike
    if not step.tool_calls and text[:1] in ("[", "{") and step.answer is None:
        # messages with no text (``Step.answer``) and no call: what they said is unknown,
        # never alike (Semantic Kernel's choice records read as text: '[{"role": ...}]')
        return ""
    if step.tool_calls and text:
        text += "\n" + "\n".join(f"{c.name} {canonical_arguments(c.arguments)}"
                                 for c in step.tool_calls)
    return text


def stagnation(llm_steps: Sequence[Step], cfg: LoopConfig,
               unknown_at: Sequence[int] = ()) -> list[Finding]:
    """(d) ``stagnation_min_run`` or more consecutive near-identical LLM outputs
    (``_similar``: compared on what differs between them, not on the lines they share)
    that asked for the same calls (name and canonical arguments, compared exactly: a call
    whose arguments changed, the next page of a long query, is progress, not a repeat).
    ``unknown_at``: the ascending indexes of steps of unknown kind; one between two outputs
    may have been an output of its own, so the two are not consecutive."""
    texts = [(s, _output(s)) for s in llm_steps]
    outputs = [t for _, t in texts]
    # the calls each output asked for, compared exactly: another call (the next page of one
    # long query) is another action, however alike the words around it (read only for
    # outputs found alike: keying every call is the cost of the rest)
    acts: dict[int, tuple[tuple[str, str], ...]] = {}

    def act(k: int) -> tuple[tuple[str, str], ...]:
        if k not in acts:
            acts[k] = tuple((c.name, arguments_key(c.arguments))
                            for c in llm_steps[k].tool_calls)
        return acts[k]

    words = [_words(t.replace("\\n", "\n"))[:_MAX_COMPARE_WORDS] for t in outputs]
    counts: dict[int, Counter[str]] = {}
    out, i = [], 0
    while i < len(texts):
        j = i
        floor, text = cfg.stagnation_min_chars, texts[i][1]
        if len(text) >= floor or wide_len(text) >= floor:
            while (j + 1 < len(texts)
                   and bisect_right(unknown_at, texts[j][0].index)
                   == bisect_left(unknown_at, texts[j + 1][0].index)
                   and _similar(outputs, words, j, cfg.stagnation_similarity, counts)
                   and act(j) == act(j + 1)):
                j += 1
        if j - i + 1 >= cfg.stagnation_min_run:
            run = [s for s, _ in texts[i:j + 1]]
            out.append(Finding(
                "loop", "stagnation", cfg.stagnation_severity,
                f"{len(run)} consecutive near-identical LLM outputs",
                span_ids=[s.span_id for s in run], step_indexes=[s.index for s in run],
                attributes={"count": len(run), "similarity": cfg.stagnation_similarity,
                            "output": texts[i][1][:200]}))
        i = j + 1
    return out


def explained(finding: Finding, steps: int, llm_at: list[int], tools_at: list[int],
               unknown_at: list[int], covered: set[int], unrecorded: set[int]) -> bool:
    """Whether every LLM output of a stagnation run led only to calls already flagged as a
    loop (then the stagnation is the same loop seen from the model's side: one reason).
    ``llm_at`` / ``tools_at`` / ``unknown_at``: the ascending step indexes of the LLM, tool
    and unknown-kind steps; the steps between two LLM steps are found by bisection (a run of
    n outputs costs n log n). An output followed only by steps of unknown kind, or by calls
    whose arguments were not recorded or cut at a length limit (``unrecorded``), may have led
    to the loop's calls: it does not stand against the loop the others led to."""
    looped = False
    for idx in finding.step_indexes:
        k = bisect_right(llm_at, idx)
        nxt = llm_at[k] if k < len(llm_at) else steps
        following = tools_at[bisect_right(tools_at, idx):bisect_left(tools_at, nxt)]
        known = [t for t in following if t not in unrecorded]
        if not covered.issuperset(known):
            return False
        if known:
            looped = True
        elif not following and bisect_right(unknown_at, idx) == bisect_left(unknown_at, nxt):
            return False  # no call followed it
    return looped
