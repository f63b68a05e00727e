"""A limited log line names the line that logged it, not the limiter's module: an operator
whose format has ``%(module)s:%(lineno)d`` finds the code that failed."""

import logging

from otel_eval.base.loglimit import LogLimiter, bug_line, failed_line, limited_line

log = logging.getLogger("otel_eval.test_loglimit")


def _limited() -> int:
    limited_line(LogLimiter(10.0, clock=lambda: 0.0), log, "limited", counted="things")
    return _limited.__code__.co_firstlineno + 1


def _bug() -> int:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        bug_line(LogLimiter(10.0, clock=lambda: 0.0), log, "bug", counted="bugs")
    return _bug.__code__.co_firstlineno + 4


def _failed() -> int:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        failed_line(LogLimiter(10.0, clock=lambda: 0.0), log, "failed")
    return _failed.__code__.co_firstlineno + 4


def test_each_limited_line_names_its_caller(caplog) -> None:
    for call in (_limited, _bug, _failed):
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger=log.name):
            line = call()
        [record] = caplog.records
        assert (record.module, record.funcName, record.lineno) == (
            "test_loglimit", call.__name__, line)
