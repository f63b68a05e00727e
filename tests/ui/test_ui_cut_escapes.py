"""The web view cuts a one-line value (``values.short``: a title, a service, an agent) and a
value of a page whose budget is spent (``values.value``) after escaping its controls
(``\\x1b``, ``\\u202e``): the cut could fall inside an escape, leaving ``\\x1`` or ``\\u20``
at its end, a backslash that names no control (read as the value's own text), as ``show`` and
``inspect`` did. An escape that does not fit whole is now left out."""

from __future__ import annotations

import html
import re

from otel_eval.base.printable import printable
from otel_eval.outputs.ui.issues import issues_page
from otel_eval.outputs.ui.values import HEAD_CHARS, SMALL_CHARS, Budget, short, value

# a backslash followed by less than a whole escape, right before the ellipsis
_BROKEN = re.compile(r"\\(?:x[0-9a-f]?|u[0-9a-f]{0,3})?…")


def test_a_short_value_never_ends_inside_an_escape() -> None:
    for control in ("\x1b", "\u202e", "\x85"):
        for pad in range(50, 60):  # cut to 59 characters and "…": every offset it crosses
            value = "a" * pad + control + "b" * 20
            shown = short(value, 60)
            assert not _BROKEN.search(shown), (pad, repr(control), shown)
            assert len(shown) <= 60 and shown.endswith("…"), shown
            assert printable(value).startswith(shown[:-1]), shown  # whole escapes only


def test_an_issue_title_on_the_issues_page_is_cut_on_whole_escapes() -> None:
    for pad in range(113, 120):  # a title is cut to 119 characters and "…"
        title = "t" * pad + "\x1b[2J" + "x" * 20
        page = html.unescape(str(issues_page({"issues": [{"title": title}]})))
        shown = page[page.index("t" * pad):page.index("…") + 1]
        assert not _BROKEN.search(shown), (pad, shown)
        assert printable(title).startswith(shown[:-1]), shown


def test_a_value_cut_by_the_pages_budget_ends_on_a_whole_escape() -> None:
    for pad in range(SMALL_CHARS - 5, SMALL_CHARS):  # a spent page shows SMALL_CHARS of it
        raw = "a" * pad + "\u202e" + "b" * 300
        page = html.unescape(str(value("output", raw, Budget(left=0), None)))
        shown = page[page.index("a" * pad):page.index("</pre>")]
        assert printable(raw).startswith(shown), (pad, shown[-8:])
        assert not re.search(r"\\(?:x[0-9a-f]?|u[0-9a-f]{0,3})?$", shown), (pad, shown[-8:])


def test_a_long_value_folds_on_a_whole_escape() -> None:
    """The unfolded head of a long value ends at ``HEAD_CHARS`` characters: that fold could
    split an escape, the head ending in ``\\x1`` and the folded part starting with ``b``."""
    for control in ("\x1b", "\u202e", "\x85", "\r"):
        width = len(printable(control))
        for pad in range(HEAD_CHARS - width + 1, HEAD_CHARS + 1):  # every offset the fold crosses
            raw = "a" * pad + control + "b" * 1000
            page = html.unescape(str(value("output", raw, Budget(), None)))
            head, folded = re.findall(r"<pre>(.*?)</pre>", page, re.S)
            assert len(head) <= HEAD_CHARS, (pad, len(head))
            assert not re.search(r"\\(?:x[0-9a-f]?|u[0-9a-f]{0,3})?$", head), (pad, head[-8:])
            assert head + folded == printable(raw, keep="\n\t"), (pad, head[-8:], folded[:8])
