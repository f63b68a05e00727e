"""Output (part): HTML built from escaped parts, and the headers every page carries.

Every value from span content is hostile. Text goes into a page only through ``h`` /
``text``, which escape it (``<``, ``>``, ``&``, both quotes, and the bidirectional overrides
and isolates as ``printable`` writes them, ``\\u202e``: one would show a tool or agent name
reversed); ``Html`` marks what is already markup. Attribute values are escaped the same way
but for those controls (a form's value goes back as it was: a filter's agent; the runs
page writes such a value out escaped beside its box, ``runs._form``), and the only
URLs written are this service's own paths (built by ``href`` from a path and escaped query
parameters) or the configured trace backend's, never a value from a span: a ``javascript:``
link in a span is text. No inline script or style anywhere, so the Content-Security-Policy
forbids both; the one script is this package's static file (the run page's outcome form),
and what it may fetch is this origin (``connect-src 'self'``: ``POST /v1/feedback``).
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from urllib.parse import quote, urlencode

from otel_eval.base.printable import bidi_escaped

CSP = ("default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
# (every answer of the admin listener also says nosniff and no-store: receive.httpconn)
HEADERS = {
    "Content-Security-Policy": CSP,
    "Referrer-Policy": "no-referrer",
}
_VOID = frozenset(("br", "input", "meta", "link", "hr", "img"))


class Html(str):
    """Markup (escaped already); a plain ``str`` is text and is escaped where it is used."""

    __slots__ = ()


Part = str | Html | None | Iterable["Part"]


def text(value: object) -> Html:
    if isinstance(value, Html):
        return value
    return Html(html.escape(bidi_escaped(str(value)), quote=True))


def _attribute(value: object) -> str:
    return value if isinstance(value, Html) else html.escape(str(value), quote=True)


def join(parts: Part) -> Html:
    if parts is None:
        return Html("")
    if isinstance(parts, str):
        return text(parts)
    return Html("".join(join(p) for p in parts))


def h(tag: str, *children: Part, **attrs: str | int | bool | None) -> Html:
    """``<tag attrs>children</tag>``; ``class_`` is ``class``, ``data_x`` is ``data-x``;
    None and False attributes are left out, True ones written bare."""
    out = [f"<{tag}"]
    for name, value in attrs.items():
        if value is None or value is False:
            continue
        key = name.rstrip("_").replace("_", "-")
        out.append(f" {key}" if value is True else f' {key}="{_attribute(value)}"')
    out.append(">")
    if tag in _VOID:
        return Html("".join(out))
    return Html("".join(out) + join(children) + f"</{tag}>")


def href(path: str, params: Mapping[str, str | None] | None = None) -> str:
    """A link to this service's ``path`` (each segment percent-encoded by the caller with
    ``segment``) with the non-empty ``params``."""
    given = {k: v for k, v in (params or {}).items() if v not in (None, "")}
    return path + ("?" + urlencode(given) if given else "")


def segment(value: str) -> str:
    """``value`` as one path segment, percent-encoded ("/" as %2F). A value
    ``is_dot_segment`` cannot be one: the caller links it otherwise."""
    return quote(value, safe="")


def is_dot_segment(value: str) -> bool:
    """"." or "..": a browser resolves such a segment against the path before it, its
    percent-encoded forms (%2E) included (WHATWG URL, RFC 3986 5.2.4), so no path carries
    it to the server; a link to a page of such a value carries it in the query."""
    return value in (".", "..")


def page(title: str, body: Part, nav: str = "") -> bytes:
    """A whole page; the stylesheet is this package's static file (no script is needed:
    folding is ``<details>``)."""
    links = [("runs", "/ui/"), ("sessions", "/ui/sessions"), ("issues", "/ui/issues"),
             ("calibration", "/ui/calibration")]
    head = h("head", h("meta", charset="utf-8"),
             h("meta", name="viewport", content="width=device-width, initial-scale=1"),
             h("title", title + " · otel-eval"),
             h("link", rel="stylesheet", href="/ui/static/style.css"))
    menu = h("nav", h("span", "otel-eval", class_="brand"),
             [h("a", label, href=url, class_="on" if label == nav else None)
              for label, url in links])
    doc = h("html", head, h("body", menu, h("main", body)), lang="en")
    return ("<!doctype html>\n" + doc + "\n").encode("utf-8", "replace")
