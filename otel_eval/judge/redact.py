"""PII redaction: every text the judge sends leaves the process through ``Redactor.redact``.

Built-in classes (emails, phone numbers, credit cards, API keys, bearer tokens) plus configured
regular expressions. Matches become placeholders (``[EMAIL]``) so the judge still sees that a
value was there. Patterns are deliberately greedy on the safe side: a false positive costs a
little context, a false negative leaks data.
"""

from __future__ import annotations

import re

from otel_eval.judge.config import RedactionConfig

# Order matters: tokens and keys before phone numbers (long digit runs inside keys).
_RULES: list[tuple[str, str, re.Pattern[str]]] = [  # (class, replacement, pattern)
    ("bearer_token", "Bearer [TOKEN]",
     re.compile(r"\bBearer\s+[A-Za-z0-9\-._~+/]{8,}=*", re.I)),
    ("api_key", "[API_KEY]", re.compile(
        r"\b(?:sk-(?:proj-|ant-)?[A-Za-z0-9_\-]{16,}"  # OpenAI / Anthropic
        r"|AKIA[0-9A-Z]{16}"  # AWS access key id
        r"|AIza[0-9A-Za-z_\-]{35}"  # Google
        r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub
        r"|xox[abpr]-[A-Za-z0-9\-]{10,})")),  # Slack
    ("api_key", r"\1[API_KEY]", re.compile(  # key = value: keep the name, drop the value
        r"\b((?:api[_-]?key|secret|password|passwd|token)[\"']?\s*[:=]\s*[\"']?)"
        r"(?!\[)[^\s\"',}]{6,}", re.I)),
    ("email", "[EMAIL]", re.compile(r"\b[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}\b")),
    ("credit_card", "[CREDIT_CARD]", re.compile(r"\b(?:\d[ \-]?){12,18}\d\b")),
    # not part of a longer number (digit groups around it) nor of a decimal / version
    ("phone", "[PHONE]", re.compile(
        r"(?<!\w)(?<!\d[.\- ])(?:\+\d{1,3}[\s.\-]?)?(?:\(\d{2,4}\)[\s.\-]?|\d{2,4}[\s.\-])"
        r"\d{3,4}[\s.\-]\d{3,4}(?!\w)(?![.\- ]\d)")),
]
BUILTIN_CLASSES = ("email", "phone", "credit_card", "api_key", "bearer_token")


def _luhn_ok(digits: str) -> bool:
    total, alt = 0, False
    for ch in reversed(digits):
        d = int(ch)
        if alt:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
        alt = not alt
    return total % 10 == 0


class Redactor:
    """Replaces PII in text. Unknown built-in class names raise ValueError at construction."""

    def __init__(self, config: RedactionConfig) -> None:
        unknown = [c for c in config.builtin if c not in BUILTIN_CLASSES]
        if unknown:
            raise ValueError(f"unknown redaction classes {unknown}; known: {BUILTIN_CLASSES}")
        self._rules = [(r, p) for c, r, p in _RULES if c in config.builtin]
        self._extra = [re.compile(p) for p in config.extra_patterns]
        self.count = 0  # replacements made since construction (for metrics / tests)

    def redact(self, text: str) -> str:
        for replacement, pattern in self._rules:
            if replacement == "[CREDIT_CARD]":
                text = pattern.sub(self._card, text)
            else:
                text, n = pattern.subn(replacement, text)
                self.count += n
        for pattern in self._extra:
            text, n = pattern.subn("[REDACTED]", text)
            self.count += n
        return text

    def _card(self, m: re.Match[str]) -> str:
        digits = re.sub(r"\D", "", m.group(0))
        if 13 <= len(digits) <= 19 and _luhn_ok(digits):
            self.count += 1
            return "[CREDIT_CARD]"
        return m.group(0)
