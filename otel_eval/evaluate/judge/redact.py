"""PII and secret redaction: every text the judge sends leaves the process through
``Redactor.redact``.

Built-in classes (``RedactionConfig.builtin``): bearer tokens, private keys (PEM), JWTs, API
keys and secrets (OpenAI/Anthropic, AWS access key ids and secret keys, Google, GitHub incl.
``github_pat_``, Slack, Stripe, ``key = value`` assignments), emails, credit cards (Luhn),
IBANs (mod-97), US SSNs, phone numbers (international ``+CC ...`` and North American), plus
configured expressions. Matches become placeholders (``[EMAIL]``) so the judge still sees
that a value was there. Recall and false positives per class are measured on a labelled set
(``tests/data/redaction/``, ``bench/redaction.py``, figures in bench/README.md).

Promise: time linear in the text for the built-in classes. Every pattern, built-in or
configured, runs on RE2 (google-re2), which has no backtracking; the checks RE2 cannot express
(lookarounds, Luhn, mod-97) are done on each match in Python, a constant amount of work per
match. Configured patterns are RE2 syntax (no lookarounds or backreferences): one RE2 cannot
compile is a ValueError at construction. One search is linear, but a configured pattern whose
match can end while a longer alternative is still open (``BEGIN(?:.*?END)?``) searches to the
end of the text from each match: quadratic in a text of many (docs/evaluation-limits.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from otel_eval.base.text import valid_text
from otel_eval.evaluate.judge.config import BUILTIN_CLASSES, RedactionConfig
from otel_eval.evaluate.judge.config import compile_redaction as _re

__all__ = ["BUILTIN_CLASSES", "Redactor"]


def _luhn_ok(digits: str) -> bool:
    total, alt = 0, False
    for ch in reversed(digits):
        d = int(ch)
        if alt:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
        alt = not alt
    return total % 10 == 0


def _card(text: str) -> bool:
    digits = "".join(c for c in text if c.isdigit())
    return 13 <= len(digits) <= 19 and _luhn_ok(digits)


def _iban(text: str) -> bool:
    code = text.replace(" ", "")
    if not 15 <= len(code) <= 34:
        return False
    moved = code[4:] + code[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def _ssn(text: str) -> bool:
    area, group, serial = text.split("-")
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def _secret_like(text: str) -> bool:
    """A 40-character AWS secret key: mixed case and digits (a hex SHA-1 is not)."""
    return (any(c.isupper() for c in text) and any(c.islower() for c in text)
            and any(c.isdigit() for c in text))


def _phone(text: str) -> bool:
    return 8 <= sum(c.isdigit() for c in text) <= 15


# Where a value may start: after a non-word character or at the start, and also right after
# a JSON escape (``\n``, ``\t``, ``\r``): span content is often JSON text, where a key
# on its own line reads ``...\nAKIA...`` and ``\b`` sees no boundary between "n" and "A".
_START = r"(?:^|[^A-Za-z0-9_]|\\[nrt])"

# One rule: (class, placeholder, RE2 pattern, check on the match or None). The pattern's
# group "v" is what is replaced (the rest is kept: a separator before it, a key name).
# Order matters: tokens and keys before the classes made of digits (phone, card).
_Rule = tuple[str, str, str, Callable[[str], bool] | None]
_RULES: list[_Rule] = [
    ("bearer_token", "[TOKEN]", _START + r"(?i:Bearer)\s+(?P<v>[A-Za-z0-9\-._~+/]{8,}=*)",
     None),
    # the body up to its END line: base64, whitespace, JSON escapes and the headers of an
    # encrypted key (Proc-Type: 4,ENCRYPTED; DEK-Info: AES-128-CBC,...), never "--": the
    # search for an END stops at the next "-----" line. Any text between (``[\s\S]*?``
    # before) searched on to the end of the text from every BEGIN line that has no END:
    # quadratic, 22 s for 620 kB of BEGIN lines.
    ("private_key", "[PRIVATE_KEY]",
     r"(?P<v>-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:(?:[A-Za-z0-9+/=\s\\:,]|-[A-Za-z0-9])*"
     r"-----END [A-Z0-9 ]*PRIVATE KEY-----|[A-Za-z0-9+/=\s\\]*))", None),
    ("jwt", "[JWT]",
     _START + r"(?P<v>eyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{10,})",
     None),
    ("api_key", "[API_KEY]", (
        _START + r"(?P<v>sk-(?:proj-|ant-)?[A-Za-z0-9_\-]{16,}"  # OpenAI / Anthropic
        r"|AKIA[0-9A-Z]{16}"  # AWS access key id
        r"|AIza[0-9A-Za-z_\-]{35}"  # Google
        r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,}"  # GitHub
        r"|xox[abpr]-[A-Za-z0-9\-]{10,}"  # Slack
        r"|(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}|whsec_[A-Za-z0-9]{24,})"), None),
    ("api_key", "[API_KEY]",  # key = value: keep the name, drop the value
     _START + r"(?i:api[_-]?key|secret(?:[_-]?access)?(?:[_-]?key)?|password|passwd|token)"
     r"[\"']?\s*[:=]\s*[\"']?(?P<v>[^\s\"',}\[]{6,})", None),
    ("api_key", "[API_KEY]",  # an AWS secret access key on its own
     r"(?:^|[^A-Za-z0-9/+=]|\\[nrt])(?P<v>[A-Za-z0-9/+]{40})(?:$|[^A-Za-z0-9/+=])",
     _secret_like),
    ("email", "[EMAIL]",
     _START + r"(?P<v>[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,})"
     r"\b", None),
    ("iban", "[IBAN]",
     _START + r"(?P<v>[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?)\b", _iban),
    ("ssn", "[SSN]", r"(?:^|[^\w\-]|\\[nrt])(?P<v>\d{3}-\d{2}-\d{4})(?:$|[^\w\-])", _ssn),
    ("credit_card", "[CREDIT_CARD]", _START + r"(?P<v>(?:\d[ \-]?){12,18}\d)\b", _card),
    # not part of a longer number or of a decimal / version / date: the characters around
    # the match are checked by the pattern's own context groups
    ("phone", "[PHONE]",
     r"(?:^|[^\w.\-+/:]|\\[nrt])(?P<v>\+\d{1,3}[\s.\-]?(?:\(\d{1,4}\)[\s.\-]?)?\d{1,4}"
     r"(?:[\s.\-]?\d{2,4}){1,4}|(?:\(\d{3}\)\s?|\d{3}[\s.\-])\d{3}[\s.\-]\d{4})"
     r"(?:$|[^\w.\-/:]|[.\-](?:$|[^\d]))", _phone),
]


class Redactor:
    """Replaces PII in text. Unknown built-in class names and configured patterns RE2 cannot
    compile raise ValueError at construction."""

    def __init__(self, config: RedactionConfig) -> None:
        unknown = [c for c in config.builtin if c not in BUILTIN_CLASSES]
        if unknown:
            raise ValueError(f"unknown redaction classes {unknown}; known: {BUILTIN_CLASSES}")
        self._rules = [(placeholder, _re(pattern), check)
                       for cls, placeholder, pattern, check in _RULES if cls in config.builtin]
        self._extra = []
        for pattern in config.extra_patterns:
            try:
                self._extra.append(_re(pattern))
            except ValueError as e:
                raise ValueError(f"redaction pattern {pattern!r}: {e}") from None
        self.count = 0  # replacements made since construction (for metrics / tests)

    def redact(self, text: str) -> str:
        """``text`` with every match replaced; a lone surrogate (span content read from a
        file: a chat log's ``"\\ud800"``) is U+FFFD, as RE2 matches UTF-8 only and raised
        UnicodeEncodeError on it (``show`` died with a traceback, the judge on that run)."""
        text = valid_text(text)
        for placeholder, pattern, check in self._rules:
            text = pattern.sub(self._replacer(placeholder, check, pattern.groupindex["v"]),
                               text)
        for pattern in self._extra:
            text, n = pattern.subn("[REDACTED]", text)
            self.count += n
        return text

    def _replacer(self, placeholder: str, check: Callable[[str], bool] | None,
                  group: int) -> Callable[[Any], str]:
        def replace(m: Any) -> str:
            value = m.group(group)
            if check is not None and not check(value):
                return str(m.group(0))
            self.count += 1
            whole, start = m.group(0), m.start(group) - m.start()
            return f"{whole[:start]}{placeholder}{whole[start + len(value):]}"
        return replace

    @staticmethod
    def patterns() -> list[tuple[str, Any]]:
        """(class, compiled RE2 pattern) of every built-in rule (tests check the engine)."""
        return [(cls, _re(pattern)) for cls, _, pattern, _ in _RULES]
