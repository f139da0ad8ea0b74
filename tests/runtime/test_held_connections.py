"""Held connections: more callers than connections all get one; a failed turn goes back."""

from __future__ import annotations

import asyncio

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
