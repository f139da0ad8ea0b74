"""A PostgreSQL server of a test's own, to stop, start, freeze and thaw.

Never the run's server (other tests use it): a cluster made with ``initdb`` in a temporary
directory, listening on a free loopback port, run with the embedded package's binaries (or
the machine's, when that package is not installed). As root, PostgreSQL runs as the
embedded package's own user, as the embedded server does.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

from tests.support.ports import free_port

SERVER_USER = "embedded_postgres"
# Small and quick to stop and start: no fsync (the data is thrown away after the test).
CONFIG = """
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 40
shared_buffers = 16MB
log_min_messages = warning
"""


def binaries() -> Path:
    """The folder of ``initdb``, ``pg_ctl`` and ``postgres``."""
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        return Path(POSTGRES_BIN_PATH)
    except ImportError:
        found = shutil.which("pg_ctl")
        assert found, "no PostgreSQL binaries: install a2a-continue[embedded] or PostgreSQL"
        return Path(found).resolve().parent


def _as_server_user() -> dict[str, Any]:
    """The subprocess arguments that run a command as the server's user (PostgreSQL refuses
    to run as root)."""
    if os.geteuid() != 0:
        return {}
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        subprocess.run(["useradd", "-s", "/bin/false", SERVER_USER], check=True)
    return {"user": SERVER_USER, "group": SERVER_USER}


class OwnPostgres:
    """One cluster in ``root``; ``url`` reaches its ``postgres`` database."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.log = root / "server.log"
        self.port = free_port()
        self.bin = binaries()
        self.user = _as_server_user()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def init(self) -> None:
        """Make the cluster (trust authentication: loopback only)."""
        if self.user:
            shutil.chown(self.root, self.user["user"], self.user["group"])
        initdb = [str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres"]
        subprocess.run(
            [*initdb, "-A", "trust", "-E", "utf8", "--no-sync"],
            check=True,
            capture_output=True,
            **self.user,
        )
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(CONFIG + f"port = {self.port}\n")

    async def _pg_ctl(self, *args: str) -> None:
        process = await asyncio.create_subprocess_exec(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            *args,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            **self.user,
        )
        _, err = await process.communicate()
        assert process.returncode == 0, (args, err.decode(), self.log.read_text())

    async def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        await self._pg_ctl("-w", "-t", "30", "-l", str(self.log), "start")

    async def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: every session is ended with 57P01, as a restart or a
        failover does) and wait until it is down."""
        await self._pg_ctl("-w", "-t", "30", "-m", mode, "stop")

    def _signal(self, sig: signal.Signals) -> int | None:
        """Send ``sig`` to the server and every backend; return the postmaster's pid, None
        when none runs."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
            os.kill(pid, sig)
        except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
            return None
        for child in children(pid):
            with suppress(ProcessLookupError):
                os.kill(child, sig)
        return pid

    def freeze(self) -> None:
        """SIGSTOP the server and every backend: connections stay open, nothing answers."""
        assert self._signal(signal.SIGSTOP) is not None

    def thaw(self) -> None:
        """SIGCONT what ``freeze`` stopped (nothing when no server runs)."""
        self._signal(signal.SIGCONT)

    def running(self) -> bool:
        """Whether a server runs on the cluster (started, not yet stopped)."""
        return (self.data / "postmaster.pid").exists()

    def kill(self) -> None:
        """Stop the server at once, whatever its state (the end of a test that failed)."""
        self._signal(signal.SIGCONT)
        pid = self._signal(signal.SIGQUIT)
        deadline = time.monotonic() + 10
        while pid is not None and time.monotonic() < deadline:
            if not (self.data / "postmaster.pid").exists():
                return
            time.sleep(0.05)


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (each backend is a session of its own, so a
    process group would not hold them)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError):
            # pid (comm) state ppid …: comm may hold spaces, so split after its ")".
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found


S = TypeVar("S", bound=OwnPostgres)


@contextmanager
def own_postgres(kind: type[S], *, init: bool = True) -> Iterator[S]:
    """A new cluster of ``kind`` for the block (not started; not made when ``init`` is false,
    for one copied from another); killed and removed after it."""
    root = Path(tempfile.mkdtemp(prefix="a2ac-own-pg-"))
    server = kind(root)
    try:
        if init:
            server.init()
        yield server
    finally:
        server.kill()
        shutil.rmtree(root, ignore_errors=True)
