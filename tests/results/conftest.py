"""A real OTLP server (``support.otlp_capture``) on 127.0.0.1, port 0, for the sinks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.otlp_capture import Capture


@pytest.fixture
def downstream() -> Iterator[Capture]:
    with Capture() as ds:
        yield ds
