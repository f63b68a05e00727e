"""Words of a text in every script: the detectors' comparisons, the judge's sizes, the
recurring issues' terms (stage: base, so every stage may read it).

The detectors compare texts word by word (stagnation's word-level ratio, a request's
identifiers, the words with a digit in a conversation's requests). Chinese, Japanese and
Thai are written without spaces: split on whitespace, a whole sentence of them is one
"word", so two replies that differ in one character share no word and a request of twenty
characters reads as a one-word identifier. ``words`` splits on whitespace and makes each
character of those scripts (their punctuation too: 。) a word of its own; ASCII text, and any
text without such characters, is split on whitespace alone (``str.split``), so the
words of every other script are what they were.

``QUESTION_MARKS`` and ``CJK_CLOSERS``: how a reply ending on a question ends, in any
of those scripts and in Arabic.

``wide_len`` is a text's length for the "too short to compare" floors (``OK`` twice is no
stagnation, "yes" twice no repeated request): a character of Chinese, Japanese or Korean
says about what two or three Latin letters do, so it counts two (its East Asian width, the
columns a terminal gives it): a sentence of twelve such characters is not "short".
``columns`` is the width a terminal gives a text (``wide_len``, the combining marks of Thai
and other scripts, drawn on the letter before them, counting none); ``padded`` and
``wrapped`` lay text out in those columns (the tables of ``eval`` and
``issues``, ``show``'s folded values): by ``len()``, a column after a Chinese agent name or
a line of Chinese text ran as many columns further as the text has wide characters.
"""

from __future__ import annotations

import re
import textwrap
import unicodedata

__all__ = ["CJK_CLOSERS", "QUESTION_MARKS", "columns", "join_words", "padded", "wide_count",
           "wide_len", "word_count", "words", "wrapped"]

# A question's mark: Latin, fullwidth (Chinese, Japanese), Arabic (also Persian and Urdu).
QUESTION_MARKS = ("?", "\uff1f", "\u061f")
# What may follow a question's mark at the end of a reply in Chinese or Japanese, as quotes
# and brackets do in English: the corner quotes, the fullwidth parenthesis, the lenticular
# bracket, and the ideographic space.
CJK_CLOSERS = "\u300d\u300f\uff09\u3011\u3000"

# Thai, Lao, Myanmar, Khmer; CJK punctuation, kana, ideographs (with extensions and the
# compatibility block); fullwidth punctuation and halfwidth katakana (fullwidth letters and
# digits are left in their words: a fullwidth number is one identifier)
_UNSPACED = re.compile(
    "[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3000-\u30ff\u31f0-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\uf900-\ufaff\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff9f"
    "\U00020000-\U0003ffff]")


def words(text: str) -> list[str]:
    """``text.split()``, with each character of a script written without spaces a word."""
    if text.isascii() or _UNSPACED.search(text) is None:
        return text.split()
    return _UNSPACED.sub(r" \g<0> ", text).split()  # in C: no Python call per character


def join_words(text: str) -> str:
    """``text`` made of ``words`` joined by spaces (a TF-IDF term, "答 案"), as a reader writes
    it: no space beside a character of a script written without spaces ("答案", "API 密钥"
    stays spaced where a word of another script meets it: "api 密钥")."""
    if text.isascii() or _UNSPACED.search(text) is None:
        return text
    out = ""
    for word in text.split():
        if out and not (_UNSPACED.fullmatch(out[-1]) and _UNSPACED.fullmatch(word[0])):
            out += " "
        out += word
    return out


def word_count(text: str) -> int:
    """How many words ``text`` holds, as a reader counts them: ``words``, two characters of
    a script written without spaces counting as one word (about a Chinese word's length:
    北京市 is one or two words, not three)."""
    if text.isascii():
        return len(text.split())
    found = words(text)
    unspaced = sum(1 for w in found if len(w) == 1 and _UNSPACED.match(w))
    return len(found) - unspaced + (unspaced + 1) // 2

# The characters a tokenizer spends about a token on each (where English takes three or four
# characters a token): Hangul, CJK (radicals, punctuation, kana, ideographs and their
# extensions), Yi, fullwidth forms, and the pictographs of emoji.
_WIDE = re.compile(
    "[\u1100-\u115f\u2e80-\u303e\u3041-\u33ff\u3400-\u4dbf\u4e00-\u9fff\ua000-\ua4cf"
    "\ua960-\ua97f\uac00-\ud7a3\uf900-\ufaff\ufe10-\ufe19\ufe30-\ufe6f\uff00-\uff60"
    "\uffe0-\uffe6\U0001f300-\U0001faff\U00020000-\U0003fffd]")


def wide_count(text: str) -> int:
    """How many characters of ``text`` are wide ones of the main blocks (``_WIDE``), counted
    by the regular expression engine: for long texts (a judge's whole view)."""
    if text.isascii():
        return 0
    return len(text) - len(_WIDE.sub("", text))  # in C: no Python step per character


def wide_len(text: str) -> int:
    """``len(text)``, each wide or fullwidth character (East Asian Width W or F) counting
    two. Linear: callers that compare with a floor call it only on a text shorter than the
    floor (``len(text) >= floor or wide_len(text) >= floor``)."""
    if text.isascii():
        return len(text)
    return len(text) + sum(unicodedata.east_asian_width(c) in "WF" for c in text)


def columns(text: str) -> int:
    """The columns a terminal gives ``text``: ``wide_len``, less the characters drawn on the
    one before them or not at all (combining marks: a Thai vowel or tone mark, an accent
    written apart; format characters: a zero-width joiner)."""
    if text.isascii():
        return len(text)
    return wide_len(text) - sum(unicodedata.category(c) in ("Mn", "Me", "Cf") for c in text)


def padded(text: str, width: int) -> str:
    """``text.ljust(width)`` in a terminal's columns (``columns``): a wide character is two."""
    return text + " " * (width - columns(text))


_CHUNKS = re.compile(r"\s+|\S+")


def wrapped(text: str, width: int) -> list[str]:
    """``textwrap.wrap(text, width)`` (breaking on whitespace, long words broken, the text's
    own indent kept on its first line, no line of whitespace alone, ``[]`` for none) in a
    terminal's columns (``columns``): a line of Chinese holds ``width`` columns, not
    ``width`` characters. ASCII text: textwrap itself."""
    if text.isascii():
        return textwrap.wrap(text, width, replace_whitespace=False, drop_whitespace=True,
                             break_long_words=True, break_on_hyphens=False)
    lines: list[str] = []
    line, used = "", 0
    for chunk in _CHUNKS.findall(text.expandtabs()):
        size = columns(chunk)
        if used + size <= width:
            if line or not lines or not chunk.isspace():  # a line's indent: the first's only
                line, used = line + chunk, used + size
            continue
        if line.strip():  # the line is full: the next one starts with this chunk
            lines.append(line.rstrip())
        line, used = "", 0
        if chunk.isspace():  # whitespace at a line's end is dropped
            continue
        for c in chunk:  # a word wider than a line: broken where the columns end
            w = columns(c)
            if used + w > width and line:
                lines.append(line)
                line, used = "", 0
            line, used = line + c, used + w
    if line.strip():
        lines.append(line.rstrip())
    return lines
