"""Issue stage, step 2: normalize critique text so that the same failure reads the same.

Identifiers, numbers, paths, URLs, e-mail addresses and quoted values vary between
occurrences of one failure ("tool 'search' failed after 3 retries on /tmp/a1.json") and would
split a cluster, so each is replaced by a placeholder token (``<url>``, ``<path>``, ``<id>``,
``<num>``, ``<quoted>``, ``<email>``). The result is lowercased with whitespace collapsed.
Pure functions, no state.
"""

from __future__ import annotations

import re

# Order matters: URLs contain paths and numbers, paths contain ids, quotes contain anything.
_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.I), " <url> "),
    (re.compile(r"\bwww\.\S+", re.I), " <url> "),
    (re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.-]+\b"), " <email> "),
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
    (re.compile(r"\b(?=[a-z_-]*\d)(?=\d*[a-z_])[a-z0-9_-]{6,}\b", re.I), " <id> "),
    # Numbers: integers, decimals, thousands separators, percentages, signs.
    (re.compile(r"(?<![\w<])[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?%?(?![\w>])", re.I), " <num> "),
)
_SPACES = re.compile(r"\s+")


def normalize(text: str) -> str:
    """Return ``text`` lowercased with variable parts replaced by placeholder tokens."""
    out = text
    for pattern, token in _RULES:
        out = pattern.sub(token, out)
    return _SPACES.sub(" ", out).strip().lower()
