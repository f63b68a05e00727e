"""A real OTLP/gRPC server (TraceService + LogsService) on 127.0.0.1, port 0, for the sinks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from results_downstream import Downstream, serving


@pytest.fixture
def downstream() -> Iterator[Downstream]:
    with serving() as ds:
        yield ds
