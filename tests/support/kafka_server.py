"""A real Apache Kafka broker for tests and bench/: KRaft, one node that is both broker and
controller, from the Maven Central jars (tests/kafka/broker/pom.xml, fetched by
``scripts/kafka-broker``), on free loopback ports, its data in a temp dir.

    with KafkaServer() as kafka:            # or .start() / .stop()
        kafka.bootstrap                     # 127.0.0.1:PORT
        kafka.create_topic("otlp_spans", 6)

``start()`` formats the storage (``kafka.tools.StorageTool format``, as ``kafka-storage.sh``
does), starts ``kafka.Kafka server.properties`` and returns once the broker answers a
metadata request naming itself and a topic can be created on it (the controller has a
leader). Missing java or mvn, or a broker that exits or does not come up within
``start_timeout_s``, raise with the broker's log: never a skip. The JVM gets SIGKILL when the
Python process that started it dies (a test runner killed mid-test leaves no broker behind),
and ``stop()`` runs at interpreter exit too.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import ctypes
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from support.poll import poll_async
from support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
BROKER_DIR = ROOT / "tests" / "kafka" / "broker"

# Single-node settings: internal topics with one replica, no initial rebalance delay (a
# group's first join would otherwise wait 3 s), small JVM.
_SETTINGS = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "num.partitions": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "6",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "log.flush.interval.messages": "9223372036854775807",
}
# C1 only: a quarter off each JVM start (format, broker) on a loaded 2-core machine; a test's
# traffic never needs C2.
_JVM = ["-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        "-Djava.awt.headless=true"]


def fetch_jars() -> Path:
    """The broker's jar directory (``scripts/kafka-broker``: fetched once, then cached)."""
    try:
        out = subprocess.run([str(ROOT / "scripts" / "kafka-broker")], check=True,
                             capture_output=True, text=True, timeout=600)
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"scripts/kafka-broker failed:\n{e.stderr}") from e
    return Path(out.stdout.strip().splitlines()[-1])


def version(lib: Path) -> str:
    """The Kafka version of the jars in ``lib`` (from ``kafka_2.13-VERSION.jar``)."""
    (jar,) = lib.glob("kafka_2.13-*.jar")
    return jar.name.removeprefix("kafka_2.13-").removesuffix(".jar")



def _die_with_parent() -> None:  # runs in the child, before exec
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class KafkaServer:
    def __init__(self, lib: Path | None = None, base: str | None = None,
                 start_timeout_s: float = 120.0) -> None:
        """``lib``: the jar directory (default: ``fetch_jars()``)."""
        self.lib = lib if lib is not None else fetch_jars()
        self.version = version(self.lib)
        self.dir = Path(tempfile.mkdtemp(prefix="otel-eval-kafka-", dir=base))
        self.port = 0
        self.start_timeout_s = start_timeout_s
        self.started_in_s = 0.0  # format + start until ready
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _java(self, main: str, *args: str) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise RuntimeError("java not found (scripts/test installs a JRE when missing)")
        return [java, *_JVM, f"-Dkafka.logs.dir={self.dir}",
                f"-Dlog4j2.configurationFile={BROKER_DIR / 'log4j2.properties'}",
                "-cp", f"{self.lib}/*", main, *args]

    def _write_properties(self) -> Path:
        self.port, controller = free_port(), free_port()
        settings = dict(_SETTINGS)
        settings.update({
            "controller.quorum.voters": f"1@127.0.0.1:{controller}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{controller}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.dir / "data"),
        })
        path = self.dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        return path

    def start(self) -> KafkaServer:
        t0 = time.monotonic()
        props = self._write_properties()
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        # one id in 64 starts with "-", which the tool's argparse reads as an option unless
        # it is joined to its flag (Kafka's own Uuid.randomUuid draws again for that reason)
        fmt = subprocess.run(self._java("kafka.tools.StorageTool", "format",
                                        f"--cluster-id={cluster_id}", "-c", str(props)),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        if fmt.returncode:
            raise RuntimeError(f"kafka storage format failed:\n{fmt.stdout.decode()}")
        out = (self.dir / "stdout.log").open("wb")
        self._proc = subprocess.Popen(self._java("kafka.Kafka", str(props)), stdout=out,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      preexec_fn=_die_with_parent)
        atexit.register(self.stop)
        try:
            asyncio.run(poll_async(self._ready, "the Kafka broker to be ready",
                                   timeout_s=self.start_timeout_s, interval_s=0.2))
        except AssertionError as e:  # the deadline: with what the broker logged
            tail = self.log()[-4000:]
            self.stop()
            raise RuntimeError(f"{e}:\n{tail}") from None
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - t0
        return self

    async def _ready(self) -> bool:
        """Ready = the broker lists itself in a metadata answer and can create a topic (so
        the controller quorum has a leader). Polled: the JVM gives no other signal."""
        self._check_alive()
        if not self._listening():
            return False
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=5000)
        try:
            await admin.start()
            resp = await admin.create_topics([NewTopic("_otel_eval_ready", 1, 1)])
            return all(err in (0, 36) for _t, err, *_ in resp.topic_errors)  # 36: exists
        except Exception:  # metadata not served yet
            return False
        finally:
            with contextlib.suppress(Exception):
                await admin.close()

    def _listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def _check_alive(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            raise RuntimeError(f"kafka broker exited with {self._proc.returncode}:\n"
                               + self.log()[-4000:])

    def create_topic(self, name: str, partitions: int) -> None:
        self._admin(lambda a: a.create_topics([NewTopic(name, partitions, 1)]))

    def delete_topic(self, name: str) -> None:
        self._admin(lambda a: a.delete_topics([name]))

    def _admin(self, action: Callable[[AIOKafkaAdminClient], Awaitable[object]]) -> None:
        async def run() -> None:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
            await admin.start()
            try:
                await action(admin)
            finally:
                await admin.close()

        asyncio.run(run())

    def log(self) -> str:
        parts = [p.read_text(errors="replace") for p in
                 (self.dir / "stdout.log", self.dir / "server.log") if p.exists()]
        return "\n".join(parts)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()  # controlled shutdown
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> KafkaServer:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

