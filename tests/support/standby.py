"""A primary and its streaming standby of a test's own, to fail over from one to the other."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.own_postgres import OwnPostgres, own_postgres


class Standby(OwnPostgres):
    """A cluster copied from a running primary with ``pg_basebackup -R`` (it streams from it)."""

    def clone(self, primary: OwnPostgres) -> None:
        if self.user:
            shutil.chown(self.root, self.user["user"], self.user["group"])
        backup = [str(self.bin / "pg_basebackup"), "-D", str(self.data), "-R", "-X", "stream"]
        subprocess.run(
            [*backup, "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres"],
            check=True,
            capture_output=True,
            **self.user,
        )
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(f"port = {self.port}\n")

    async def promote(self) -> None:
        """Make the standby a primary and wait until it accepts writes."""
        await self._pg_ctl("-w", "-t", "30", "promote")


@contextmanager
def primary_and_standby() -> Iterator[tuple[OwnPostgres, Standby]]:
    """A new primary (not started) and a standby (not yet cloned); both removed after."""
    with own_postgres(OwnPostgres) as primary, own_postgres(Standby, init=False) as standby:
        yield primary, standby


def multi_host_url(*servers: OwnPostgres) -> str:
    """One URL naming every server, which asyncpg tries in turn for a writable session."""
    hosts = ",".join(f"127.0.0.1:{s.port}" for s in servers)
    return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"
