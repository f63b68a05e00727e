"""Span content printed to a terminal or a log cannot carry control characters: C0, DEL and
C1 come out as visible escapes; a log record stays one line."""

from __future__ import annotations

import io
import logging

import pytest

from otel_eval.base.printable import (
    EscapingFormatter,
    as_json,
    printable,
    printable_cut,
    quoted,
)


@pytest.mark.parametrize(("raw", "shown"), [
    ("plain agent", "plain agent"),
    ("\x1b]52;c;ZWNobyBwd25lZA==\x07", "\\x1b]52;c;ZWNobyBwd25lZA==\\x07"),  # OSC 52 clipboard
    ("FAIL\rPASS", "FAIL\\rPASS"),  # a carriage return overwriting the header
    ("a\nb\tc", "a\\nb\\tc"),
    ("\x00\x7f\x85\x9b\x9f", "\\x00\\x7f\\x85\\x9b\\x9f"),  # NUL, DEL, NEL, CSI, APC
    ("\xa0é漢\u05d0\u200f", "\xa0é漢\u05d0\u200f"),  # printable Unicode is left alone
    # the bidirectional embeddings, overrides and isolates: "exe.txt" displayed reversed
    ("\u202etxt.exe \u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069",
     "\\u202etxt.exe \\u202a\\u202b\\u202c\\u202d\\u2066\\u2067\\u2068\\u2069"),
])
def test_controls_are_escaped_the_rest_is_kept(raw: str, shown: str) -> None:
    assert printable(raw) == shown


@pytest.mark.parametrize(("raw", "chars", "shown"), [
    ("abcdef", 4, "abcd"),
    ("ab\x1bcd", 4, "ab"),  # "\\x1b" does not fit after "ab": left out, not cut to "\\x"
    ("ab\x1bcd", 6, "ab\\x1b"),
    ("\u202exyz", 5, ""),
])
def test_a_cut_falls_between_escapes(raw: str, chars: int, shown: str) -> None:
    assert printable_cut(raw, chars) == shown


def test_keep_leaves_the_named_controls() -> None:
    assert printable("line 1\nline\r2\x1b[2J", keep="\n") == "line 1\nline\\r2\\x1b[2J"


def test_every_control_is_escaped() -> None:
    controls = "".join(map(chr, [*range(0x20), 0x7F, *range(0x80, 0xA0)]))
    out = printable(controls)
    assert all(c.isprintable() for c in out)
    assert out.count("\\") == len(controls)


def _record(msg: str, *args: object, exc: bool = False) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(EscapingFormatter("%(levelname)s %(message)s"))
    logger = logging.Logger("printable-test")
    logger.addHandler(handler)
    if exc:
        try:
            raise ValueError("bad\x1b[31m value")
        except ValueError:
            logger.exception(msg, *args)
    else:
        logger.warning(msg, *args)
    return stream.getvalue()


def test_a_log_record_is_one_line_whatever_its_arguments() -> None:
    out = _record("sink failed on trace %s", "x\nWARNING forged line\x1b[2K")
    assert out == "WARNING sink failed on trace x\\nWARNING forged line\\x1b[2K\n"


def test_a_traceback_keeps_its_lines_and_loses_its_escapes() -> None:
    out = _record("failed: %s", "\x07", exc=True)
    assert out.startswith("ERROR failed: \\x07\nTraceback (most recent call last):\n")
    assert "ValueError: bad\\x1b[31m value" in out
    assert "\x1b" not in out and "\x07" not in out


def test_unescaped_turns_back_what_printable_escaped() -> None:
    from otel_eval.base.printable import unescaped

    controls = "".join(map(chr, [*range(0x20), 0x7F, *range(0x80, 0xA0), *range(0x202A, 0x202F),
                                 *range(0x2066, 0x206A)]))
    assert unescaped(printable("a" + controls + "b")) == "a" + controls + "b"
    assert unescaped("C:\\x41\\users\\u2060") == "C:\\x41\\users\\u2060"  # no control: kept


@pytest.mark.parametrize(("value", "shown"), [
    ("/v1/x", '"/v1/x"'),  # a JSON string, as the client wrote it; not Python's '/v1/x'
    ("it's \"q\" \\", '"it\'s \\"q\\" \\\\"'),
    ("\x1b\x7f\x85\u202e\ud800", '"\\u001b\\u007f\\u0085\\u202e\\ud800"'),  # escaped
    ("café 漢", '"café 漢"'),  # printable Unicode is left alone
    ("a" * 150, '"' + "a" * 100 + '"...'),
])
def test_quoted_is_a_json_string_with_its_controls_escaped(value: str, shown: str) -> None:
    assert quoted(value) == as_json(value) == shown


@pytest.mark.parametrize(("value", "shown"), [
    (None, "null"), (0.5, "0.5"), (True, "true"), ({"a": [1]}, '{"a": [1]}'),
    (list(range(100)), ("[" + ", ".join(map(str, range(100))))[:100] + "..."),
])
def test_as_json_names_a_body_value_as_the_sender_wrote_it(value: object, shown: str) -> None:
    """A feedback outcome of ``null`` read ``None``, of ``true`` ``True`` (Python's repr)."""
    assert as_json(value) == shown


@pytest.mark.parametrize(("value", "shown"), [
    (["\x1b" * 40], '["' + "\\u001b" * 16 + "..."),  # not ...\u001b\u...
    (["a" * 97 + '"'], '["' + "a" * 97 + "..."),  # not ...a\... (an escaped ".")
    ({"k": "\\" * 60}, '{"k": "' + "\\\\" * 46 + "..."),  # an even run of backslashes
    (["x" * 95 + "\x85" * 3], '["' + "x" * 95 + "..."),
    (["é" * 200], '["' + "é" * 98 + "..."),  # a character is never cut
])
def test_as_json_cuts_a_body_value_between_escapes(value: object, shown: str) -> None:
    """A value's JSON text is cut at ``QUOTED_CHARS``: the cut fell inside an escape (``\\u``
    of ``\\u001b``, the backslash of ``\\"``), read as another escape or none."""
    assert as_json(value) == shown
