"""The admin endpoint's access checks (``app.admin``): who may do what, and what a browser
may not make it do. Each check answers None (go on) or the refusal to send.

A browser's world (issue 33): with no tokens, whatever the listener's address, only a
``Host`` that is a loopback name (``localhost``), an IP address (any port) or one of
``admin.allowed_hosts`` is served; any other is 421, so a page whose name was rebound to this
listener's address (DNS rebinding) reads nothing. An address is safe to serve: a page cannot
rebind one, so a browser sends it only for a page the listener itself served. ``POST /v1/feedback``
takes only ``Content-Type: application/json`` (415: a form cannot send it without a CORS
preflight, which is never granted) and refuses (403) a request a browser marks as from
another site (``Sec-Fetch-Site`` other than ``same-origin`` / ``none``), or, from a browser
that sends no ``Sec-Fetch-Site``, whose ``Origin`` is not the ``Host`` it was sent to (CSRF;
as Go's ``http.CrossOriginProtection``: behind a TLS proxy that rewrites Host the Origin
names the proxy, and the browser's ``same-origin`` still lets the run page write). Both
checks are in ``browser_guard``.

With ``admin.read_tokens`` / ``write_tokens`` set, every path but ``admin.public_paths``
needs ``Authorization: Bearer <token>``: a read or write token for GET, a write token for
POST (401 without a known token, 403 for a read token on a write). A browser on ``/ui/`` may
send the token as the password of HTTP Basic authentication (any user name): a 401 there
asks for it with ``WWW-Authenticate: Basic``. The public paths, served without a token, keep
the Host check on a loopback listener (``app.admin.make_handler``): a rebound page has no
token, but needs none there.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from otel_eval.base.printable import quoted
from otel_eval.outputs.ui.outcome import Writes
from otel_eval.receive.httpmessage import Request, Response
from otel_eval.receive.security import BearerAuth, served_host


def _refusal(status: int, message: str) -> Response:
    """A refusal as the admin API's JSON error; the connection closes (a body may be unread)."""
    return Response(status, json.dumps({"error": message}).encode(), "application/json", {},
                    True)


def basic_as_bearer(authorization: str | None) -> str | None:
    """``Basic base64(user:token)`` as ``Bearer token`` (a browser's way to send a token)."""
    scheme, _, encoded = (authorization or "").strip().partition(" ")
    if scheme.lower() != "basic":
        return authorization
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return "Bearer " + decoded.partition(":")[2]


class AdminAuth:
    """Who may do what on the admin endpoint (``admin.read_tokens`` / ``write_tokens``)."""

    def __init__(self, read_tokens: Mapping[str, str], write_tokens: Mapping[str, str],
                 public_paths: Iterable[str]) -> None:
        # pairs, not one dict: a read and a write token of one name are both readers
        self.readers = BearerAuth([*read_tokens.items(), *write_tokens.items()])
        self.writers = BearerAuth(write_tokens)
        self.public = frozenset(p.rstrip("/") or "/" for p in public_paths)

    @property
    def enabled(self) -> bool:
        return self.readers.enabled

    @property
    def writes(self) -> Writes:
        """Who may write: anyone (no tokens), a write token's holder, or no one (read tokens
        only: every write is 403)."""
        if not self.enabled:
            return "open"
        return "token" if self.writers.enabled else "closed"

    def is_public(self, path: str, write: bool) -> bool:
        """Served without a token (``admin.public_paths``: Prometheus, probes)."""
        return path in self.public and not write

    def check(self, path: str, authorization: str | None, write: bool) -> tuple[int, str]:
        """(0, sender) when allowed, else (401 or 403, why)."""
        if not self.enabled or self.is_public(path, write):
            return 0, ""
        reader = self.readers.identify(authorization)
        if reader is None:
            return 401, "missing or unknown bearer token"
        if not write:
            return 0, reader
        writer = self.writers.identify(authorization) if self.writers.enabled else None
        return (0, writer) if writer is not None else (403, "this token may not write")


def foreign_host(req: Request, allowed: frozenset[str]) -> Response | None:
    """421 for a ``Host`` that is neither ``localhost``, an address nor in ``allowed``
    (``served_host``: DNS rebinding)."""
    host = req.header("Host")
    if served_host(host, allowed):
        return None
    return _refusal(421, f"Host {quoted(host or '')} is not served here: without tokens this "
                         "listener answers localhost, IP addresses and admin.allowed_hosts")


# Sec-Fetch-Site values of a request a browser did not make for another site's page
_OWN_FETCH = frozenset({"same-origin", "none"})


def cross_site(req: Request) -> Response | None:
    """415 / 403 for a write a browser could send from another site's page (CSRF)."""
    ctype = (req.header("Content-Type") or "").partition(";")[0].strip().lower()
    if ctype != "application/json":
        return _refusal(415, "expected Content-Type: application/json")
    site = (req.header("Sec-Fetch-Site") or "").strip().lower()
    if site:  # the browser's word (a page cannot set it) decides: behind a proxy that
        # rewrites Host (nginx's default), the page's own Origin is not the Host we get
        return None if site in _OWN_FETCH else _refusal(
            403, f"refused: Sec-Fetch-Site {quoted(site[:40])}")
    origin = req.header("Origin")  # a browser without Fetch Metadata (before 2023)
    if origin is not None and _origin_host(origin) != (req.header("Host") or "").strip().lower():
        return _refusal(403, f"refused: Origin {quoted(origin)} is not this host")
    return None


def _origin_host(origin: str) -> str | None:
    """The host[:port] an ``Origin`` names; None for ``null`` or one that is no URL (an
    unclosed IPv6 bracket: urlsplit raises, which was a 500)."""
    if origin.strip() == "null":
        return None
    try:
        return urlsplit(origin.strip()).netloc.lower()
    except ValueError:
        return None


def browser_guard(req: Request, path: str, allowed_hosts: frozenset[str] | None
                  ) -> Response | None:
    """The admin port in a browser's world: the Host check when the listener has no tokens
    (``allowed_hosts`` not None: the names it serves besides localhost and addresses), the
    cross-site check on writes; None when the request may go on."""
    if allowed_hosts is not None and (refused := foreign_host(req, allowed_hosts)) is not None:
        return refused
    if req.method == "POST" and path == "/v1/feedback":
        return cross_site(req)
    return None
