"""A stand-in for aiokafka's producer where a test decides whether records are delivered
(a broker that never acknowledges is a process killed before delivery)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any


class RecordingProducer:
    """Records what it is sent; ``deliver``: each delivery known at once, else never."""

    def __init__(self, deliver: bool) -> None:
        self.deliver = deliver
        self.records: list[tuple[bytes, bytes]] = []
        self.sent = threading.Event()

    async def send(self, topic: str, value: bytes, key: bytes,
                   headers: list[tuple[str, bytes]] | None = None) -> asyncio.Future[Any]:
        fut = asyncio.get_running_loop().create_future()
        self.records.append((key, value))
        if self.deliver:
            fut.set_result(None)
        self.sent.set()
        return fut

    async def stop(self) -> None:
        pass
