"""The container image's HEALTHCHECK (``python -m otel_eval.app.healthcheck``): GET /healthz
on the admin endpoint of the serve the container runs, as its own command line configures it
(the image's defaults file, then each ``--config`` file's ``admin.endpoint`` and
``admin.tls``, then an ``--admin-endpoint`` flag), read from ``/proc/1/cmdline``: PID 1 is
serve, or an init in front of it (``docker run --init``). A listener on every interface
(0.0.0.0, ::) is asked on loopback, through no proxy. HTTPS when admin.tls is set, the
certificate not verified (it only asks the local process whether it is alive). Exit 0
healthy, 1 not (Docker's contract: 2 is reserved), one line on stderr saying why."""

from __future__ import annotations

import ssl
import sys
import urllib.request
from pathlib import Path

from otel_eval.app.cli_args import build_parser, config_from_args
from otel_eval.base.configcheck import parse_endpoint

PID1_CMDLINE = Path("/proc/1/cmdline")
TIMEOUT_S = 3.0


def serve_argv(cmdline: bytes) -> list[str]:
    """The ``serve ...`` part of a process's NUL-separated command line."""
    argv = [a.decode("utf-8", "surrogateescape") for a in cmdline.split(b"\0") if a]
    for i in range(1, len(argv)):
        if argv[i] == "serve" and Path(argv[i - 1]).name.startswith("otel-eval"):
            return argv[i:]
    raise ValueError(f"not an otel-eval serve: {' '.join(argv)[:200]}")


def healthz_url(argv: list[str]) -> str:
    """The /healthz URL of the admin endpoint that ``otel-eval ARGV`` listens on."""
    admin = config_from_args(build_parser().parse_args(argv)).admin
    host, port = parse_endpoint(admin.endpoint)
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "localhost": "127.0.0.1"}.get(host, host)
    scheme = "https" if admin.tls.enabled else "http"
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}/healthz"


def main(cmdline_file: Path = PID1_CMDLINE) -> int:
    try:
        url = healthz_url(serve_argv(cmdline_file.read_bytes()))
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}),
            urllib.request.HTTPSHandler(context=ssl._create_unverified_context()))
        with opener.open(url, timeout=TIMEOUT_S):
            return 0
    except (OSError, ValueError, SystemExit) as e:  # SystemExit: argparse refused the args
        print(f"otel-eval healthcheck: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # an argument: another process's cmdline file (tests)
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else PID1_CMDLINE))
