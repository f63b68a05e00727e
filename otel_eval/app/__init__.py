"""Entry points and commands: the ``otel-eval`` command line, ``serve``'s wiring (service,
admin endpoint, lifecycle, worker processes), ``eval``/``show``/``replay``/``issues``/``config``,
and the top-level ``Config`` with its loader. Imports every stage; nothing imports it
(but ``python -m otel_eval``)."""
