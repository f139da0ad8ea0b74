"""Held connections: more callers than connections all get one; a failed or ended turn goes
back to the pool."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import pytest

from a2a_continue.runtime.db import HeldConnections, create_pool


async def test_more_callers_than_connections_are_all_served_in_turn(database_url: str) -> None:
    pool = await create_pool(database_url, 2)
    held = HeldConnections(pool, 2)

    async def turn(n: int) -> int:
        conn = await held.acquire()
        try:
            value: int = await conn.fetchval("SELECT $1::int FROM pg_sleep(0.01)", n)
            return value
        finally:
            await held.release(conn, clean=True)

    try:
        assert await asyncio.gather(*(turn(n) for n in range(12))) == list(range(12))
        assert held.out <= 2
        assert pool.get_size() <= 2
    finally:
        await held.close()
        await pool.close()


async def test_a_connection_whose_turn_failed_goes_back_to_the_pool(database_url: str) -> None:
    pool = await create_pool(database_url, 2)
    held = HeldConnections(pool, 2)
    try:
        conn = await held.acquire()
        with pytest.raises(asyncpg.PostgresSyntaxError):
            await conn.execute("SELEC 1")
        await held.release(conn, clean=False)
        assert (held.idle, held.out) == ([], 0)
        conn = await held.acquire()
        await held.release(conn, clean=True)
        assert (held.idle, held.out) == ([conn], 1)
    finally:
        await held.close()
        await pool.close()


async def test_a_waiter_that_gives_up_leaves_the_connection_to_the_next(database_url: str) -> None:
    pool = await create_pool(database_url, 1)
    held = HeldConnections(pool, 1)
    try:
        first = await held.acquire()
        with pytest.raises(TimeoutError):
            await held.acquire(wait_s=0.01)
        await held.release(first, clean=True)
        again = await held.acquire(wait_s=5)
        assert again is first
        await held.release(again, clean=True)
    finally:
        await held.close()
        await pool.close()


async def test_a_connection_the_server_ended_while_lent_goes_back_without_error(
    database_url: str, db: asyncpg.Connection
) -> None:
    pool = await create_pool(database_url, 1)
    held = HeldConnections(pool, 1)
    try:
        conn = await held.acquire()
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        await db.fetchval("SELECT pg_terminate_backend($1)", pid)
        await eventually_closed(conn)

        await held.release(conn, clean=True)

        assert (held.idle, held.out) == ([], 0)
        again = await held.acquire(wait_s=5)
        assert await again.fetchval("SELECT 1") == 1
        await held.release(again, clean=True)
    finally:
        await held.close()
        await pool.close()


async def eventually_closed(conn: Any, within_s: float = 10) -> None:
    """Wait until asyncpg has seen the server end ``conn`` (it detaches a lent one)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            if conn.is_closed():
                return
        except asyncpg.InterfaceError:
            return
        assert time.monotonic() < deadline, "the connection never closed"
        await asyncio.sleep(0.02)
