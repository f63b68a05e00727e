"""The admin endpoint's configuration (``admin:``), apart from its server (``app.admin``):
loading a config, as every command does, needs none of the server's imports (the web view,
the store's queries, the HTTP server, the Prometheus exposition)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from otel_eval.base.configcheck import FieldErrors, validate
from otel_eval.receive.config import HttpLimits
from otel_eval.receive.security import (
    Listeners,
    TlsServerConfig,
    exposed_insecurely,
    exposure_problems,
    token_problems,
)

# A DNS name as admin.allowed_hosts takes it: labels of letters, digits, "-" and "_"
_HOST_NAME = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")


@dataclass(frozen=True)
class AdminConfig:
    # Serves /metrics, /healthz, /readyz and the results API (/v1/evaluations, /v1/feedback).
    endpoint: str = "localhost:8888"
    # TLS on the admin listener (same keys as receiver.tls; reloaded when the files change).
    tls: TlsServerConfig = field(default_factory=TlsServerConfig)
    # Tokens that may read (GET /v1/evaluations, /v1/issues), name -> token, sent as
    # `Authorization: Bearer <token>` (printable ASCII, no space). With any read or write token
    # set, reads need one of them.
    read_tokens: dict[str, str] = field(default_factory=dict, repr=False)
    # Tokens that may write (POST /v1/feedback) and read, name -> token. With tokens
    # configured, a read token on a write is 403 and no token is 401.
    write_tokens: dict[str, str] = field(default_factory=dict, repr=False)
    # Paths served without a token (Prometheus scrapes and kubelet probes).
    public_paths: list[str] = field(default_factory=lambda: ["/metrics", "/healthz",
                                                             "/readyz"])
    # Start even though the endpoint is not loopback and lacks TLS or tokens.
    allow_insecure_non_loopback: bool = False
    # Without read or write tokens, the Host names served besides localhost and IP addresses
    # (any port; e.g. [otel-eval.monitoring.svc] for clients that use a Service's name). Any
    # other Host is 421: a page whose name was rebound to this address (DNS rebinding) reads
    # nothing. With tokens, the tokens decide, whatever the Host, but for public_paths on a
    # loopback endpoint: those are served to these names too.
    allowed_hosts: list[str] = field(default_factory=list)
    # The page of one trace in your trace backend, `{trace_id}` replaced by the 32-hex id
    # (e.g. http://jaeger:16686/trace/{trace_id}); the web view's run page links to it.
    # Empty: no link. http(s) only.
    trace_url: str = ""
    # Admin connections, as receiver.http_limits; reserved_connections slots beyond
    # max_connections serve only /healthz, /readyz and /metrics (probes and scrapes get in
    # during a flood of partial requests).
    limits: HttpLimits = field(default_factory=lambda: HttpLimits(reserved_connections=16))
    # (service, agent) pairs with series of their own on /metrics, one budget shared by every
    # per-trace metric: the first this many distinct pairs; every other pair is counted as
    # service="_other", agent="_other" on all of them alike (so ratios hold). A pair costs
    # ~65 series lines (4 histograms): 250 keep /metrics under ~20k lines. The agents the
    # configuration names (detectors.agents, judge.sampling.rate_by_agent keys) have a
    # second budget as large, their own: no sender's junk names can put them under _other.
    metrics_max_pairs: int = 250
    # Seconds a (service, agent) pair may go without a trace (or session) before its series
    # are removed from every per-trace metric at once and its place in metrics_max_pairs is
    # given back (the OTel Collector spanmetrics connector's metrics_expiration); 0: never.
    # Without it the budget was the first 250 pairs for the process's life, so a burst of
    # junk names put every later agent under _other until a restart. A pair that comes back
    # is admitted again with its counters from 0 (a new _created: rate(), increase() and
    # the repeated-runs alerts take it as a reset). Default 172800 (48 h): longer than
    # every window the alerts and the dashboard read (the longest, the repeated-runs
    # alerts' look-back for a series' earlier life, [1d] offset 60m: 25 h), so an agent
    # that runs once a day keeps its series. Checked at most once a minute, when a trace or
    # session is counted (no traffic at all: the idle series stay until the next one).
    metrics_expiration_s: float = 172_800.0

    def __post_init__(self) -> None:
        bad_hosts = [h for h in self.allowed_hosts
                     if not isinstance(h, str) or not _HOST_NAME.match(h)]
        problems = {**token_problems("read_tokens", self.read_tokens),
                    **token_problems("write_tokens", self.write_tokens)}
        if bad_hosts:
            problems["allowed_hosts"] = ("expected host names without port or scheme, "
                                         f"got {bad_hosts!r}")
        validate(self, endpoints=("endpoint",),
                 minimum={"metrics_max_pairs": 1, "metrics_expiration_s": 0},
                 finite=["metrics_expiration_s"], problems=problems)
        if self.trace_url and (not self.trace_url.startswith(("http://", "https://"))
                               or "{trace_id}" not in self.trace_url):
            raise FieldErrors({"trace_url": "expected an http(s) URL with {trace_id} in it, "
                                             f"got {self.trace_url!r}"})

    def _listeners(self) -> Listeners:
        return [("admin.endpoint", self.endpoint)]

    def exposure_problems(self) -> list[str]:
        """As ``ReceiverConfig.exposure_problems``: read or write tokens count as
        authentication."""
        return exposure_problems(self._listeners(), self.tls,
                                 bool(self.read_tokens or self.write_tokens),
                                 self.allow_insecure_non_loopback)

    def exposed_insecurely(self) -> bool:
        return exposed_insecurely(self._listeners(), self.tls,
                                  bool(self.read_tokens or self.write_tokens),
                                  self.allow_insecure_non_loopback)

