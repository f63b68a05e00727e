"""Routing for the shared HTTP server (``httpserver``): one ordered table of
``(method, pattern) -> handler``.

    Router(routes, miss)(request) -> the first route whose method is the request's and whose
                                     pattern matches its whole path; none: miss(request)

A GET route serves HEAD too (RFC 9110 9.3.2: GET's status and headers, no body; the server
sends no body after HEAD, ``httpconn``): load balancers and uptime checkers probe with it.

A pattern is a regular expression over the raw path (no query string; a route that takes a
trailing slash says so: ``/healthz/*``); its groups are the path's parameters, handed to the
handler with the match. ``miss`` words the answer to a path or method no route serves (404,
405 with ``Allow``: ``allowed`` names the methods a path is served for), as the server it
belongs to does. The admin endpoint serves the admin API
and the web view from one table (``app.admin_routes``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from otel_eval.receive.httpmessage import Handler, Request, Response

RouteHandler = Callable[[Request, re.Match[str]], Response]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: RouteHandler


def route(method: str, pattern: str, handler: RouteHandler) -> Route:
    return Route(method, re.compile(pattern), handler)


class Router:
    """A ``Handler``: the table's first matching route answers, else ``miss``."""

    def __init__(self, routes: Iterable[Route], miss: Handler) -> None:
        self.routes = tuple(routes)
        self._miss = miss

    def allowed(self, path: str) -> frozenset[str]:
        """The methods some route serves at ``path`` (HEAD wherever GET is; empty: none)."""
        found = {r.method for r in self.routes if r.pattern.fullmatch(path)}
        return frozenset(found | ({"HEAD"} if "GET" in found else set()))

    def __call__(self, req: Request) -> Response:
        method = "GET" if req.method == "HEAD" else req.method
        for r in self.routes:
            if r.method == method and (found := r.pattern.fullmatch(req.path)):
                return r.handler(req, found)
        return self._miss(req)
