"""Receiver transport security: bearer tokens and TLS for every listener (gRPC, HTTP, admin).

    Authorization: Bearer <token>  ->  BearerAuth.identify  ->  the token's name, or refused
    cert/key/CA files              ->  TlsFiles  ->  ssl.SSLContext (HTTP) / grpc credentials

Promises, as the OTel Collector's ``bearertokenauth`` extension and ``configtls`` give them:
- tokens are compared in constant time, against every configured token (no early exit);
  the identity a request carries is the token's *name* from config, never the token itself,
  so it can be logged, stored and compared (re-opening a trace needs the same sender);
- nothing secret is logged: neither tokens nor headers; config dataclasses hide them in repr;
- TLS files are re-read when they change on disk (checked at each new connection, a stat of
  each file), so a rotated certificate is served without a restart; a broken new file is
  logged and the previous certificate stays in use;
- with a client CA configured, clients must present a certificate it signed (mTLS).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import re
import ssl
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from otel_eval.base.configcheck import is_ascii_digits, parse_endpoint
from otel_eval.base.tlsfiles import read, stamp, startup_error

log = logging.getLogger(__name__)

# A bearer token a client can send: printable ASCII, no space (RFC 6750's b64token is a subset)
_TOKEN = re.compile(r"[\x21-\x7e]+")


@dataclass(frozen=True)
class TlsServerConfig:
    # PEM certificate (chain) this listener serves; empty string serves plain text (no TLS).
    cert_file: str = ""
    # PEM private key of cert_file.
    key_file: str = ""
    # PEM CA bundle; when set, clients must present a certificate signed by it (mTLS).
    client_ca_file: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file)

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("tls: cert_file and key_file go together")
        if self.client_ca_file and not self.cert_file:
            raise ValueError("tls: client_ca_file needs cert_file and key_file")


class AuthError(Exception):
    """Refused: ``status`` is 401 (no or unknown token) or 403 (known token, not allowed)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class BearerAuth:
    """Constant-time bearer token check; empty ``tokens`` means authentication is off.
    ``tokens``: name -> token, or (name, token) pairs (one name may hold several tokens: the
    admin's readers are its read and its write tokens, a team's two under one name)."""

    def __init__(self, tokens: Mapping[str, str] | Iterable[tuple[str, str]]) -> None:
        pairs = list(tokens.items() if isinstance(tokens, Mapping) else tokens)
        self._tokens = [(name, token.encode()) for name, token in pairs if token]
        if len(self._tokens) != len(pairs):
            raise ValueError("an empty bearer token was configured (unset variable?)")

    @property
    def enabled(self) -> bool:
        return bool(self._tokens)

    def identify(self, authorization: str | None) -> str | None:
        """The name of the token in an ``Authorization`` value, or None. Off: ``""``."""
        if not self._tokens:
            return ""
        scheme, _, presented = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer":
            return None
        given = presented.strip().encode("utf-8", "surrogateescape")
        found = None
        for name, token in self._tokens:  # every token is compared: timing says nothing
            if hmac.compare_digest(given, token) and found is None:
                found = name
        return found


def token_problems(field_name: str, tokens: Mapping[str, str]) -> dict[str, str]:
    """``field_name.NAME``: a token no client can present (a header value reaches us as
    Latin-1 and is stripped, so one with a space, a control character or a non-ASCII letter
    never matches): empty or not printable ASCII. The token itself is never quoted."""
    return {f"{field_name}.{name}": "empty (an unset variable?)" if not token else
            "not printable ASCII (a space, control character or non-ASCII letter): no "
            "client can present it" for name, token in tokens.items()
            if not isinstance(token, str) or not _TOKEN.fullmatch(token)}


def metadata_authorization(metadata: Any) -> str | None:
    """The ``authorization`` value from gRPC invocation metadata (keys are lowercase)."""
    for key, value in metadata or ():
        if key == "authorization":
            return value if isinstance(value, str) else None
    return None


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address; ``0.0.0.0``, ``::`` and names are not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(host: str) -> str:
    """The name of a ``Host`` header value, without its port or IPv6 brackets."""
    host = host.strip().lower()
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        return name if rest == "" or (rest[:1] == ":" and is_ascii_digits(rest[1:])) else host
    name, colon, port = host.rpartition(":")
    return name if colon and (is_ascii_digits(port) or not port) else host


def served_host(host: str | None, allowed: frozenset[str] = frozenset()) -> bool:
    """Whether a listener without tokens answers this ``Host`` header: none (HTTP/1.0),
    ``localhost``, an IP address (any port) or a name in ``allowed``. Any other name may be an
    attacker's, rebound to this listener's address (DNS rebinding), sent by a browser running
    that attacker's page; an address cannot be rebound."""
    if host is None:
        return True
    name = host_name(host)
    if name == "localhost" or name in allowed:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class TlsFiles:
    """The current server TLS material of one listener, re-read when the files change."""

    def __init__(self, config: TlsServerConfig, name: str) -> None:
        self.config = config
        self.name = name
        self._paths = [p for p in (config.cert_file, config.key_file, config.client_ca_file)
                       if p]
        self._lock = threading.Lock()
        try:  # bad files are fatal at startup: one line naming them
            self._stamp = stamp(self._paths)
            self._context = self._load_context()
        except (OSError, ssl.SSLError, ValueError) as e:
            raise startup_error(name, [(k, v) for k, v in (
                ("cert_file", config.cert_file), ("key_file", config.key_file),
                ("client_ca_file", config.client_ca_file)) if v], e) from None
        self.reloads = 0
        self._unreadable: str | None = None  # why a file could not be read (logged once)

    @property
    def require_client_cert(self) -> bool:
        return bool(self.config.client_ca_file)

    def _load_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.config.cert_file, self.config.key_file)
        if self.config.client_ca_file:
            ctx.load_verify_locations(self.config.client_ca_file)
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def _changed(self) -> bool:
        """True once per change of the files on disk (then the caller reloads)."""
        try:
            now = stamp(self._paths)
        except OSError as e:
            if self._unreadable != e.strerror:  # once, not per connection (anyone's)
                log.error("%s: TLS file unreadable (%s); keeping the current certificate",
                          self.name, e.strerror)
                self._unreadable = e.strerror
            return False
        if self._unreadable is not None:
            log.info("%s: TLS files readable again", self.name)
            self._unreadable = None
        if now == self._stamp:
            return False
        self._stamp = now
        return True

    def context(self) -> ssl.SSLContext:
        """The SSLContext for a new HTTP connection (reloaded if the files changed)."""
        with self._lock:
            if self._changed():
                try:
                    self._context = self._load_context()
                    self.reloads += 1
                    log.info("%s: TLS certificate reloaded", self.name)
                except (OSError, ssl.SSLError, ValueError) as e:
                    log.error("%s: TLS reload failed (%s); keeping the current certificate",
                              self.name, type(e).__name__)
            return self._context

    # --- gRPC --------------------------------------------------------------------------------

    def _grpc_config(self) -> Any:
        import grpc

        ca = read(self.config.client_ca_file) if self.config.client_ca_file else None
        pair = (read(self.config.key_file), read(self.config.cert_file))
        return grpc.ssl_server_certificate_configuration([pair], root_certificates=ca)

    def grpc_credentials(self) -> Any:
        """Server credentials whose certificate follows the files (checked per handshake)."""
        import grpc

        def fetch() -> Any:
            with self._lock:
                if not self._changed():
                    return None
                try:
                    cfg = self._grpc_config()
                    self._context = self._load_context()  # validates the pair, keeps in step
                except (OSError, ssl.SSLError, ValueError) as e:
                    log.error("%s: TLS reload failed (%s); keeping the current certificate",
                              self.name, type(e).__name__)
                    return None
                self.reloads += 1
                log.info("%s: TLS certificate reloaded", self.name)
                return cfg

        return grpc.dynamic_ssl_server_credentials(
            self._grpc_config(), fetch, require_client_authentication=self.require_client_cert)


def exposure_problem(listener: str, host: str, tls: TlsServerConfig, authenticated: bool,
                     allowed: bool) -> str | None:
    """Why a listener must not start (non-loopback without TLS and auth), or None."""
    if is_loopback(host) or allowed or (tls.enabled and authenticated):
        return None
    missing = " and ".join(w for w, ok in (("TLS", tls.enabled), ("authentication",
                                                                  authenticated)) if not ok)
    return (f"{listener} listens on {host!r}, reachable beyond this host, without {missing}; "
            f"configure them, or set allow_insecure_non_loopback: true to accept the risk")


# A section's listeners: (path of the endpoint setting, its HOST:PORT or "" when off).
Listeners = Sequence[tuple[str, str]]


def exposure_problems(listeners: Listeners, tls: TlsServerConfig, authenticated: bool,
                      allowed: bool) -> list[str]:
    """Why each of one section's listeners must not start, each line with its path (serve
    refuses them all at once, as the loader's errors)."""
    errors = []
    for name, endpoint in listeners:
        if not endpoint:
            continue
        try:
            host = parse_endpoint(endpoint)[0]
        except ValueError as e:
            errors.append(f"{name}: {e}")
            continue
        if problem := exposure_problem(name, host, tls, authenticated, allowed):
            errors.append(problem)
    return errors


def exposed_insecurely(listeners: Listeners, tls: TlsServerConfig, authenticated: bool,
                       allowed: bool) -> bool:
    """A listener started beyond this host without both TLS and authentication because its
    section says ``allow_insecure_non_loopback`` (the endpoints parse: checked before)."""
    return allowed and not (tls.enabled and authenticated) and any(
        endpoint and not is_loopback(parse_endpoint(endpoint)[0]) for _, endpoint in listeners)
