"""A real PostgreSQL server for tests and bench/: Debian's ``postgresql`` binaries, ``initdb``
+ ``pg_ctl`` on a temp dir, TCP on a free loopback port, its unix socket in the temp dir.

    with PostgresServer() as pg:         # or .start() / .stop()
        url = pg.url                     # postgresql://otel@127.0.0.1:PORT/postgres
        fresh = pg.create_database()     # a new empty database, its URL

The binaries are found by globbing /usr/lib/postgresql/*/bin (Debian keeps them off PATH);
scripts/test installs the package when they are missing. initdb refuses to run as root, so
under euid 0 every server command runs as the ``postgres`` system user (``runuser``) on a temp
dir handed to it. Trust authentication on loopback only; the server stops with the context
(or at interpreter exit, should a test runner die mid-test), fast mode.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from support.ports import free_port

USER = "otel"


def binaries() -> Path | None:
    """The newest installed server's bin directory, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name))
    return Path(found[-1]).parent if found else None



class PostgresServer:
    def __init__(self, base: str | None = None, *, durable: bool = False) -> None:
        """``durable``: the server's default fsync and synchronous commit (bench/); tests
        turn them off, which is faster and loses nothing a test needs."""
        bindir = binaries()
        if bindir is None:
            raise RuntimeError("PostgreSQL server binaries not found under /usr/lib/postgresql "
                               "(apt-get install postgresql; scripts/test does)")
        self.bin = bindir
        self.dir = Path(tempfile.mkdtemp(prefix="otel-eval-pg-", dir=base))
        self.port = 0
        self._databases = 0
        self._started = False
        self._durable = durable
        self.paused = False

    @property
    def url(self) -> str:
        return self.url_of("postgres")

    def url_of(self, database: str) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> None:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       timeout=120)

    def start(self) -> PostgresServer:
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        data = self.dir / "data"
        self._run("initdb", "-D", str(data), "-U", USER, "--auth=trust", "--no-sync",
                  "--encoding=UTF8", "--locale=C")
        self.port = free_port()
        self._pg_start()
        self._started = True
        atexit.register(self.stop)
        return self

    def _pg_start(self) -> None:
        options = (f"-c listen_addresses=127.0.0.1 -c port={self.port} "
                   f"-c unix_socket_directories={self.dir} -c max_connections=200")
        if not self._durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-l", str(self.dir / "server.log"),
                  "-o", options, "-w", "-t", "60", "start")

    def pause(self) -> None:
        """Stop the server (fast mode: sessions end), keeping its data: the store goes away."""
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop")
        self.paused = True

    def resume(self) -> None:
        """Start it again after ``pause``, on the same port with the same data."""
        self._pg_start()
        self.paused = False

    def create_database(self) -> str:
        """A new empty database on this server; its URL."""
        import psycopg

        self._databases += 1
        name = f"db{self._databases}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url_of(name)

    def log(self) -> str:
        path = self.dir / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self._started and not self.paused:
            self._started = False
            self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
