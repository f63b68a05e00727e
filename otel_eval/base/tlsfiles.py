"""TLS files, for the listeners (``receive.security.TlsFiles``) and the exporters' client
side (``TlsClientConfig`` -> gRPC channel credentials, ``outputs.sender``).

Promises:
- a file that cannot be read or is no PEM of the right kind is fatal at startup, one line
  naming the setting and the file (``StartupError``), never a handshake failure later;
- ``stamp`` identifies the files as they are on disk (inode, mtime, size: Kubernetes swaps
  a Secret by symlink), so an owner can tell a rotation and read them again.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from otel_eval.base.configcheck import StartupError


@dataclass(frozen=True)
class TlsClientConfig:
    # PEM CA bundle that signed the endpoint's certificate; empty = the system trust store.
    ca_file: str = ""
    # PEM client certificate (chain) presented to the endpoint (mTLS); empty = none.
    cert_file: str = ""
    # PEM private key of cert_file.
    key_file: str = ""
    # Host name expected in the endpoint's certificate when it is not the endpoint's host
    # (e.g. an IP address in front of a named certificate). Empty = the endpoint's host.
    server_name_override: str = ""

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("tls: cert_file and key_file go together")

    @property
    def configured(self) -> bool:
        return bool(self.ca_file or self.cert_file or self.server_name_override)

    def files(self) -> list[tuple[str, str]]:
        """(setting, path) of each file set."""
        return [(k, v) for k, v in (("ca_file", self.ca_file), ("cert_file", self.cert_file),
                                    ("key_file", self.key_file)) if v]


def stamp(paths: Sequence[str]) -> tuple[tuple[int, int, int], ...]:
    """Identity of the files as they are now. Raises OSError."""
    out = []
    for p in paths:
        st = os.stat(p)
        out.append((st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def startup_error(name: str, files: Sequence[tuple[str, str]], e: Exception) -> StartupError:
    """The one line a bad TLS file stops serve with."""
    listed = ", ".join(f"{k} {v}" for k, v in files)
    why = getattr(e, "strerror", None) or getattr(e, "reason", None) or str(e)
    return StartupError(f"{name}: TLS ({listed}): {why}")


def grpc_channel_credentials(config: TlsClientConfig, name: str) -> Any:
    """gRPC channel credentials for ``config``, the files checked now (a bad one raises
    ``StartupError``: ``ssl`` parses them, as gRPC would only at the first handshake)."""
    import grpc

    files = config.files()
    try:
        ctx = ssl.create_default_context(cafile=config.ca_file or None)
        if config.cert_file:
            ctx.load_cert_chain(config.cert_file, config.key_file)
        ca = read(config.ca_file) if config.ca_file else None
        key = read(config.key_file) if config.key_file else None
        cert = read(config.cert_file) if config.cert_file else None
    except (OSError, ssl.SSLError, ValueError) as e:
        raise startup_error(name, files, e) from None
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                        certificate_chain=cert)
