"""Redaction before the judge, measured: recall and false positives per class on the labelled
set ``tests/data/redaction/labelled.jsonl`` (built by its ``build.py``), and the cost on a
crafted worst case against a same-size baseline.

    python bench/redaction.py [--json FILE]

Recall: the share of a class's positives whose secret no longer appears after
``Redactor.redact`` (with every built-in class on). False positives: negatives (dates,
versions, hashes, prose, ...) that came out changed, counted by the placeholder inserted.
Cost: seconds for 60 kB texts built to make a backtracking engine work hard (e.g. a long run
of e-mail local-part characters without an ``@``), divided by the seconds for 60 kB of prose;
the e-mail pattern of e5c8860 on Python's ``re`` is timed on the same input as "before".
Prints a table and one ``BENCH {json}`` line.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

from otel_eval.evaluate.judge.config import RedactionConfig
from otel_eval.evaluate.judge.redact import Redactor

SET = Path(__file__).resolve().parents[1] / "tests" / "data" / "redaction" / "labelled.jsonl"
PLACEHOLDER = re.compile(r"\[(?:EMAIL|PHONE|CREDIT_CARD|API_KEY|TOKEN|PRIVATE_KEY|JWT|IBAN|SSN|"
                         r"REDACTED)\]")
OLD_EMAIL = re.compile(r"\b[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}\b")  # e5c8860
SIZE = 60_000
CRAFTED = {
    "email_run": "a." * (SIZE // 2),  # local-part characters, no @
    "email_domain": "a@" + "b-" * (SIZE // 2 - 1),  # a domain that never gets its dot
    "digits": "1 " * (SIZE // 2),  # card / phone candidates everywhere
    "pem_open": "-----BEGIN PRIVATE KEY-----" + "A" * (SIZE - 27),  # never closed
    "pem_headers": "-----BEGIN PRIVATE KEY-----" * (SIZE // 27),  # none closed
    "key_values": "token=" * (SIZE // 6),
}


def measure(lines: list[dict[str, str]]) -> dict[str, dict[str, float]]:
    redactor = Redactor(RedactionConfig())
    recall: dict[str, list[bool]] = {}
    false_pos: Counter[str] = Counter()
    negatives = 0
    for line in lines:
        out = redactor.redact(line["text"])
        if line["class"] == "negative":
            negatives += 1
            for token in PLACEHOLDER.findall(out):
                false_pos[token.strip("[]").lower()] += 1
        else:
            recall.setdefault(line["class"], []).append(line["secret"] not in out)
    table = {cls: {"positives": len(v), "recall": sum(v) / len(v)} for cls, v in recall.items()}
    table["negatives"] = {"lines": negatives, "changed": sum(false_pos.values()),
                          **{f"fp_{k}": v for k, v in sorted(false_pos.items())}}
    return table


def _best(fn: object, text: str, reps: int = 3) -> float:
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn(text)  # type: ignore[operator]
        best = min(best, time.perf_counter() - start)
    return best


def cost() -> dict[str, float]:
    redactor = Redactor(RedactionConfig())
    prose = ("The agent searched the flight list and booked seat 12A for Jane. " * 1000)[:SIZE]
    base = _best(redactor.redact, prose)
    out = {"baseline_s": round(base, 4)}
    for name, text in CRAFTED.items():
        once = _best(redactor.redact, text)
        out[f"{name}_ratio"] = round(once / base, 2)
        # linear: twice the text, twice the time (a quadratic pattern: 4x)
        out[f"{name}_doubling"] = round(_best(redactor.redact, text + text) / once, 2)
    out["old_email_on_email_run_s"] = round(
        _best(lambda t: OLD_EMAIL.sub("[EMAIL]", t), "a." * (SIZE // 2), 1), 3)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the figures to this file too")
    args = ap.parse_args(argv)
    lines = [json.loads(x) for x in SET.read_text().splitlines() if x.strip()]
    table = measure(lines)
    print(f"{'class':20s} {'positives':>9s} {'recall':>7s}")
    for cls, row in table.items():
        if cls != "negatives":
            print(f"{cls:20s} {row['positives']:9.0f} {row['recall']:7.2f}")
    neg = table["negatives"]
    fps = ", ".join(f"{k[3:]} {v:.0f}" for k, v in neg.items() if k.startswith("fp_")) or "none"
    print(f"negatives: {neg['lines']:.0f} lines, {neg['changed']:.0f} placeholders ({fps})")
    figures = cost()
    print("cost on 60 kB, ratio to prose of the same size (and t(120 kB)/t(60 kB)): " + ", ".join(
        f"{k[:-6]} {v} ({figures[k[:-6] + '_doubling']})" for k, v in figures.items()
        if k.endswith("_ratio")))
    print(f"prose 60 kB: {figures['baseline_s']} s; e5c8860's e-mail pattern on the e-mail "
          f"run: {figures['old_email_on_email_run_s']} s")
    result = {"classes": table, "cost": figures}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print("BENCH " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
