"""Issue stage, step 2: normalize critique text so that the same failure reads the same.

Identifiers, numbers, paths, URLs, e-mail addresses and quoted values vary between
occurrences of one failure ("tool 'search' failed after 3 retries on /tmp/a1.json") and would
split a cluster, so each is replaced by a placeholder token (``<url>``, ``<path>``, ``<id>``,
``<num>``, ``<quoted>``, ``<email>``). The result is lowercased with whitespace collapsed.
Pure functions, no state.

Linear in the text: critiques carry span content (a tool name of 40,000 characters), and a
backtracking rule that rescans the rest of a run from every word boundary in it took minutes
on one such message. So no rule reads an unbounded stretch from every start: the URL and
e-mail rules are matched from their separator (``_Anchored``), with the result the plain
expression gives; the letters-and-digits rule reads at most ``_ID_LOOKAHEAD`` characters
ahead for its digit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol


class _Rule(Protocol):
    def sub(self, repl: str, string: str, /) -> str: ...


@dataclass(frozen=True, slots=True)
class _Anchored:
    """A rule ``START RUN* TAIL`` whose ``RUN`` characters cannot hold its separator (the
    first characters of ``TAIL``), replaced as ``re.sub`` would replace the plain expression.

    From every place ``START`` fits inside a run, the plain expression reads to the run's end
    before it can fail, and ``re`` tries each such place. Here each run that ends at the
    separator is found once (``runs``: the run is maximal, so it starts where the character
    before is not a run character), the match starts at the first place ``START`` fits in it
    (every place of the run reaches the same separator, so the first one is the leftmost
    match), and ``tail`` is matched once, at the separator.
    """

    runs: re.Pattern[str]  # each maximal run directly followed by the separator
    start: re.Pattern[str]  # where a match may begin: one run character, with its context
    tail: re.Pattern[str]  # the separator and the rest, matched where the run ends

    def sub(self, repl: str, string: str, /) -> str:
        parts: list[str] = []
        last = 0  # end of the previous replacement: re.sub never matches inside one
        for run in self.runs.finditer(string):
            lo, end = max(run.start(), last), run.end()
            head = self.start.search(string, lo, end) if lo < end else None
            tail = self.tail.match(string, end) if head is not None else None
            if head is None or tail is None:
                continue
            parts += (string[last:head.start()], repl)
            last = tail.end()
        if not parts:
            return string
        parts.append(string[last:])
        return "".join(parts)


# Placeholders for ids mixing letters and digits: the digit is looked for this far ahead of
# where the id starts. A word of more letters, '_' and '-' before its first digit is no id
# worth merging (and looking further would read the rest of a run from every '-' in it).
_ID_LOOKAHEAD = 64

# Order matters: URLs contain paths and numbers, paths contain ids, quotes contain anything.
_RULES: tuple[tuple[_Rule, str], ...] = (
    # \b[a-z][a-z0-9+.-]*://\S+ (case-insensitive)
    (_Anchored(re.compile(r"(?<![a-z0-9+.-])[a-z0-9+.-]+(?=://)", re.I),
               re.compile(r"\b[a-z]", re.I), re.compile(r"://\S+")), " <url> "),
    (re.compile(r"\bwww\.\S+", re.I), " <url> "),
    # \b[\w.+-]+@[\w-]+\.[\w.-]+\b
    (_Anchored(re.compile(r"(?<![\w.+-])[\w.+-]+(?=@)"), re.compile(r"\b[\w.+-]"),
               re.compile(r"@[\w-]+\.[\w.-]+\b")), " <email> "),
    # Code spans and quoted values (straight, curly, backticks), short enough to be a value.
    (re.compile(r"`[^`\n]{1,200}`"), " <quoted> "),
    (re.compile(r"\"[^\"\n]{1,200}\""), " <quoted> "),
    (re.compile(r"“[^”\n]{1,200}”"), " <quoted> "),
    (re.compile(r"(?<![\w])'[^'\n]{1,200}'(?![\w])"), " <quoted> "),
    # Unix and Windows paths: at least two segments, or one with an extension after a slash.
    (re.compile(r"(?<![\w<])(?:~|\.{1,2})?(?:/[\w.@%+-]+){2,}/?"), " <path> "),
    (re.compile(r"(?<![\w<])/[\w@%+-]+\.\w{1,5}\b"), " <path> "),
    (re.compile(r"\b[a-z]:\\[^\s]+", re.I), " <path> "),
    # UUIDs and long hex runs (trace/span ids, hashes), then tokens mixing letters and digits.
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
     " <id> "),
    (re.compile(r"\b(?:0x)?[0-9a-f]{8,}\b", re.I), " <id> "),
    (re.compile(rf"\b(?=[a-z_-]{{0,{_ID_LOOKAHEAD}}}\d)(?=\d*[a-z_])[a-z0-9_-]{{6,}}\b", re.I),
     " <id> "),
    # Numbers: integers, decimals, thousands separators, percentages, signs.
    (re.compile(r"(?<![\w<])[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?%?(?![\w>])", re.I), " <num> "),
)
_SPACES = re.compile(r"\s+")


def normalize(text: str) -> str:
    """Return ``text`` lowercased with variable parts replaced by placeholder tokens."""
    out = text
    for rule, token in _RULES:
        out = rule.sub(token, out)
    return _SPACES.sub(" ", out).strip().lower()
