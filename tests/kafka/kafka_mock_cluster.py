"""Test and bench support (not shipped): librdkafka's in-process mock Kafka cluster, via ctypes.

librdkafka (shipped inside the ``confluent-kafka`` wheel, a dev dependency) contains a Kafka
protocol implementation that listens on loopback. The Python binding only exposes it through
the ``test.mock.num.brokers`` client property, which auto-creates topics with a fixed four
partitions; the C API (``rd_kafka_mock_*``) also creates topics with any partition count and
can pin protocol versions. We call that C API directly so that tests and ``bench/kafka.py``
get a 6-partition topic that aiokafka clients reach on ``bootstraps``.

The cluster lives in the creating process (its own thread); keep the object alive while
clients use it and call ``close()`` at the end.
"""

from __future__ import annotations

import ctypes
import glob
import os
from types import TracebackType

_RD_KAFKA_PRODUCER = 0


def _load_librdkafka() -> ctypes.CDLL:
    import confluent_kafka

    base = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
    found = sorted(glob.glob(os.path.join(base, "confluent_kafka.libs", "librdkafka*.so*")))
    lib = ctypes.CDLL(found[0] if found else "librdkafka.so.1")
    c_void, c_char = ctypes.c_void_p, ctypes.c_char_p
    lib.rd_kafka_conf_new.restype = c_void
    lib.rd_kafka_conf_set.argtypes = [c_void, c_char, c_char, c_char, ctypes.c_size_t]
    lib.rd_kafka_new.restype = c_void
    lib.rd_kafka_new.argtypes = [ctypes.c_int, c_void, c_char, ctypes.c_size_t]
    lib.rd_kafka_destroy.argtypes = [c_void]
    lib.rd_kafka_mock_cluster_new.restype = c_void
    lib.rd_kafka_mock_cluster_new.argtypes = [c_void, ctypes.c_int]
    lib.rd_kafka_mock_cluster_bootstraps.restype = c_char
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [c_void]
    lib.rd_kafka_mock_cluster_destroy.argtypes = [c_void]
    lib.rd_kafka_mock_topic_create.argtypes = [c_void, c_char, ctypes.c_int, ctypes.c_int]
    lib.rd_kafka_mock_set_apiversion.argtypes = [c_void, ctypes.c_int16, ctypes.c_int16,
                                                 ctypes.c_int16]
    return lib


class MockCluster:
    """``MockCluster(brokers=3)``; ``.bootstraps`` is ``host:port,...`` on 127.0.0.1."""

    def __init__(self, brokers: int = 3) -> None:
        self._lib = _load_librdkafka()
        errstr = ctypes.create_string_buffer(512)
        conf = self._lib.rd_kafka_conf_new()
        # The owning handle never connects anywhere itself; keep it quiet.
        self._lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, 512)
        if os.environ.get("MOCK_DEBUG"):
            self._lib.rd_kafka_conf_set(conf, b"log_level", b"7", errstr, 512)
            self._lib.rd_kafka_conf_set(conf, b"debug", b"mock", errstr, 512)
        self._rk = self._lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, errstr, 512)
        if not self._rk:
            raise RuntimeError(f"rd_kafka_new failed: {errstr.value.decode()}")
        self._mc = self._lib.rd_kafka_mock_cluster_new(self._rk, brokers)
        if not self._mc:
            self._lib.rd_kafka_destroy(self._rk)
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        self.bootstraps: str = self._lib.rd_kafka_mock_cluster_bootstraps(self._mc).decode()

    def create_topic(self, name: str, partitions: int, replication_factor: int = 1) -> None:
        err = self._lib.rd_kafka_mock_topic_create(self._mc, name.encode(), partitions,
                                                   replication_factor)
        if err:
            raise RuntimeError(f"rd_kafka_mock_topic_create({name!r}) failed: error {err}")

    def set_api_version(self, api_key: int, min_version: int, max_version: int) -> None:
        """Restrict what the brokers advertise for one API (-1, -1 removes it)."""
        self._lib.rd_kafka_mock_set_apiversion(self._mc, api_key, min_version, max_version)

    def close(self) -> None:
        if self._mc:
            self._lib.rd_kafka_mock_cluster_destroy(self._mc)
            self._mc = None
        if self._rk:
            self._lib.rd_kafka_destroy(self._rk)
            self._rk = None

    def __enter__(self) -> MockCluster:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
