"""Entry points and commands: the ``otel-eval`` command line, ``serve``'s wiring (service,
admin endpoint, lifecycle, worker processes), ``eval``/``show``/``replay``/``issues``/``config``,
and the top-level ``Config`` with its loader. Imports every stage; nothing imports it
(but ``python -m otel_eval``).

As a container's PID 1 (the image's exec-form entrypoint, a pod's ``command``) the kernel
drops every signal the process has no handler for: a SIGTERM (``docker stop``, a deleted pod)
that came while the command was still importing (seconds) was lost, and ``serve`` then
started, took and acknowledged OTLP, and ran until the SIGKILL. Here, first thing, SIGTERM
ends such a process as it ends any other; ``serve`` puts its draining handler in its place
before it listens (``Service.run_until_signal``), so nothing acknowledged is lost by it."""

import os as _os
import signal as _signal

if _os.getpid() == 1:
    _signal.signal(_signal.SIGTERM, lambda signum, _frame: _os._exit(128 + signum))
