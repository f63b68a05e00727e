"""``otel-eval eval --fail-on``: the exit code a CI gate reads from the verdicts, so a gate
need not parse the jsonl. ``--fail-on failed`` trips on a trace whose verdict did not pass
(or that could not be evaluated); ``--fail-on loop`` (any detector's name) on a trace with a
finding of that detector at ``warning`` or ``error`` (its notes, at ``info``, never trip it).
The conversations' session records ``eval`` makes (docs/sessions.md) are read alike, whatever
``--format``: a session whose verdict did not pass trips ``failed``, a session finding of a
named detector (a loop across turns) trips that name.
Tripped, eval exits ``EXIT_GATE`` (3), distinct from 1 (a file could not be read, or spans
in one were refused; no trace) and 2 (a wrong flag or configuration); the traces and
conversations that tripped it are counted on stderr."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, TextIO

from otel_eval.base.results import NOTE_KINDS, Evaluation
from otel_eval.evaluate.detectors.config import DETECTOR_NAMES
from otel_eval.evaluate.sessions.detectors import DETECTORS as SESSION_DETECTORS

# What ``--fail-on`` may name: ``failed``, or a detector (a trace's, or a session's only:
# ``repeated_request``).
FAIL_ON: tuple[str, ...] = ("failed", *DETECTOR_NAMES,
                            *(n for n in SESSION_DETECTORS if n not in DETECTOR_NAMES))
# eval's exit codes, for ``--help`` and docs/guide.md (generated from this table).
EXIT_GATE = 3
EVAL_EXIT_CODES: dict[int, str] = {
    0: "every file read, nothing in it refused; nothing tripped `--fail-on` (without it: "
       "whatever the verdicts)",
    1: "a file could not be read, or spans or log records in one were refused or dropped "
       "(a copy of ones already read: `duplicate_span`, `late`; invalid ids or times; each "
       "file named on stderr with the reasons), or the input holds no trace",
    2: "a wrong flag, or a configuration that cannot be used (named on stderr)",
    EXIT_GATE: "a trace or a conversation (session) tripped `--fail-on` (counted on stderr "
               "by what tripped it); wins over 1",
}


class Gate:
    """Counts the traces and the conversations (session records) that trip what
    ``--fail-on`` names (nothing named: none trips)."""

    def __init__(self, names: Iterable[str]) -> None:
        self._names = frozenset(names)
        self.tripped: Counter[str] = Counter()  # what tripped -> traces
        self.traces = 0
        self.session_tripped: Counter[str] = Counter()  # what tripped -> conversations
        self.sessions = 0

    def add(self, evaluation: Evaluation) -> None:
        hits = set()
        verdict = evaluation.verdict
        if "failed" in self._names and (verdict is None or not verdict.passed):
            hits.add("failed")
        for f in evaluation.findings:
            if (f.detector in self._names and f.severity != "info"
                    and (f.detector, f.kind) not in NOTE_KINDS):
                hits.add(f.detector)
        self.tripped.update(hits)
        self.traces += bool(hits)

    def add_session(self, record: dict[str, Any]) -> None:
        """A session record (``evaluate.sessions.evaluate``): its verdict and findings."""
        hits = set()
        verdict = record.get("verdict")
        if "failed" in self._names and not (isinstance(verdict, dict)
                                            and verdict.get("passed") is True):
            hits.add("failed")
        for f in record.get("findings") or ():
            if f.get("detector") in self._names and f.get("severity") in ("warning", "error"):
                hits.add(f["detector"])
        self.session_tripped.update(hits)
        self.sessions += bool(hits)

    def code(self) -> int:
        return EXIT_GATE if self.traces or self.sessions else 0

    def report(self, err: TextIO) -> None:
        for count, tripped, what in ((self.traces, self.tripped, "trace(s)"),
                                     (self.sessions, self.session_tripped, "conversation(s)")):
            if count:
                names = ", ".join(f"{name}: {n}" for name, n in sorted(tripped.items()))
                print(f"otel-eval eval: --fail-on: {count} {what} tripped it ({names})",
                      file=err)
