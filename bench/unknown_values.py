"""An unrecognised or unrecorded value is unknown, never a reason for a finding: the audit.

    python bench/unknown_values.py [--all] [--top 40]

Every run of the conformance corpus (``tests/conformance/recordings``) is evaluated as
recorded, then again once per span and attribute with that one value changed: removed;
recorded empty and set to a value no convention defines (a short string without spaces); a
negative number or a number written as text (a number). Printed, most frequent first: each
(attribute, change, new finding) and how many evaluations gave it, with one trace as an
example. By default only the runs with no finding as recorded are mutated (any new finding
there is a claim made from the change); ``--all`` mutates every run and prints only verdicts
that flip from pass to fail and non-ended kinds that appear (the paging metric).

Not every line is a fault: a recorded tool name that was not offered is a real selection
error, and the ``non_terminating`` recordings' runs did not end (this audit releases every
trace complete). bench/README.md keeps what each audit found and what was fixed;
``tests/evaluation/test_unknown_values.py`` holds the fixed cases.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from cost import work  # noqa: E402  (the corpus as traces: tests/cost/work.py)

from otel_eval.app.config import Config  # noqa: E402
from otel_eval.base.model import Trace  # noqa: E402
from otel_eval.base.results import NOT_ENDED_KINDS  # noqa: E402
from otel_eval.evaluate.evaluator import Evaluator  # noqa: E402


def changes(value: Any) -> list[tuple[str, Any]]:
    """(label, new value) for one recorded value; None as the value: removed."""
    out: list[tuple[str, Any]] = [("removed", None)]
    if isinstance(value, bool):
        return out
    if isinstance(value, int | float):
        return [*out, ("negative", -7), ("as text", "n/a")]
    if isinstance(value, str) and 0 < len(value) <= 48 and " " not in value:
        return [*out, ("unrecognised", "zz_unrecognised"), ("empty", "")]
    return out


def audit(every_run: bool) -> tuple[int, Counter[tuple[str, ...]], dict[tuple[str, ...], str]]:
    evaluator = Evaluator(Config())

    def said(trace: Trace) -> tuple[bool | None, set[tuple[str, str]]] | None:
        ev = evaluator.evaluate(trace)
        if ev is None:
            return None
        return (ev.verdict.passed if ev.verdict else None,
                {(f.detector, f.kind) for f in ev.findings})

    hits: Counter[tuple[str, ...]] = Counter()
    example: dict[tuple[str, ...], str] = {}
    n = 0
    for trace in work.decode_recordings(work.conformance_requests()):
        base = said(trace)
        if base is None or (base[1] and not every_run):
            continue
        for i, sp in enumerate(trace.spans):
            for key, value in sp.attributes.items():
                for label, new in changes(value):
                    got = said(work.with_attribute(trace, i, key, new))
                    n += 1
                    if got is None:
                        continue
                    if every_run:
                        flipped = base[0] and got[0] is False
                        new_kinds = {k for k in got[1] - base[1]
                                     if flipped or k[1] in NOT_ENDED_KINDS}
                    else:
                        new_kinds = got[1] - base[1]
                    for detector, kind in new_kinds:
                        line = (key, label, f"{detector}/{kind}")
                        hits[line] += 1
                        example.setdefault(line, f"{trace.trace_id[:8]} {sp.name!r}")
    return n, hits, example


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true",
                    help="every run; print verdict flips and non-ended kinds only")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    logging.disable(logging.CRITICAL)
    n, hits, example = audit(args.all)
    print(f"evaluations {n}; with a new finding {sum(hits.values())}")
    for line, count in hits.most_common(args.top):
        print(f"{count:6d}  {' | '.join(line)}  (e.g. {example[line]})")


if __name__ == "__main__":
    main()
