"""Push configs as use cases: scoping, replacement by id, the first delivery of a start's."""

from __future__ import annotations

import uuid

import asyncpg
import pytest
from cryptography.exceptions import InvalidTag

from a2a_continue.core.access.callers import Caller
from a2a_continue.core.push.configs import (
    PushConfigCreate,
    create_config,
    decode_config,
    get_config,
    sealed_context,
)
from a2a_continue.errors import Invalid, NotFound
from a2a_continue.runtime.secrets import Sealer, decode_key, new_key
from tests.support.push import owed

ALICE = Caller(sub="alice", permissions=frozenset({"*"}))
BOB = Caller(sub="bob", permissions=frozenset({"*"}))


@pytest.fixture
def sealer() -> Sealer:
    return Sealer(decode_key(new_key()))


async def a_task(db: asyncpg.Connection) -> tuple[uuid.UUID, uuid.UUID]:
    agent = uuid.uuid4()
    await db.execute(
        "INSERT INTO a2a_agents (id, name, endpoint_url, protocol_version, owner)"
        " VALUES ($1, 'a', 'http://127.0.0.1:9/', '1.0', 'alice')",
        agent,
    )
    row = await db.fetchval(
        "INSERT INTO a2a_tasks (agent_id, task_id, state, owner, last_seq)"
        " VALUES ($1, 'T1', 'input-required', 'alice', 4) RETURNING id",
        agent,
    )
    return agent, row


async def test_a_start_s_config_gets_the_task_as_it_stands_first(
    db: asyncpg.Connection, sealer: Sealer
) -> None:
    agent, _ = await a_task(db)
    body = PushConfigCreate(url="http://127.0.0.1:9/h")
    await create_config(db, ALICE, agent, "T1", body, sealer, deliver_task=True)
    assert await owed(db) == [(4, 0, "task")]
    opening = await db.fetchval("SELECT opening FROM a2a_push_configs")
    assert opening["state"] == "input-required"


async def test_a_config_created_again_under_its_id_replaces_it(
    db: asyncpg.Connection, sealer: Sealer
) -> None:
    agent, _ = await a_task(db)
    first = PushConfigCreate(url="http://127.0.0.1:9/a", token="t1")
    await create_config(db, ALICE, agent, "T1", first, sealer, config_id="c")
    await db.execute("UPDATE a2a_push_configs SET enabled = false")
    second = PushConfigCreate(url="http://127.0.0.1:9/b", version="0.3")
    shown = await create_config(db, ALICE, agent, "T1", second, sealer, config_id="c")
    assert (shown.url, shown.version, shown.has_token) == ("http://127.0.0.1:9/b", "0.3", False)
    row = await db.fetchrow("SELECT count(*) OVER () AS n, enabled FROM a2a_push_configs")
    assert (row["n"], row["enabled"]) == (1, True)


async def test_a_sealed_token_opens_only_for_its_own_config(
    db: asyncpg.Connection, sealer: Sealer
) -> None:
    agent, _ = await a_task(db)
    body = PushConfigCreate(url="http://127.0.0.1:9/a", token="t1")
    await create_config(db, ALICE, agent, "T1", body, sealer)
    row = await db.fetchrow("SELECT row_id, token_sealed FROM a2a_push_configs")
    assert sealer.open(row["token_sealed"], sealed_context(row["row_id"])) == "t1"
    with pytest.raises(InvalidTag):
        sealer.open(row["token_sealed"], sealed_context(uuid.uuid4()))


async def test_another_caller_s_task_has_no_configs_to_show(
    db: asyncpg.Connection, sealer: Sealer
) -> None:
    agent, _ = await a_task(db)
    body = PushConfigCreate(url="http://127.0.0.1:9/a")
    config = await create_config(db, ALICE, agent, "T1", body, sealer)
    with pytest.raises(NotFound):
        await get_config(db, BOB, agent, "T1", config.id)
    with pytest.raises(NotFound):
        await create_config(db, BOB, agent, "T1", body, sealer)


def test_a_config_with_an_unknown_member_is_invalid_naming_it() -> None:
    with pytest.raises(Invalid) as raised:
        decode_config({"url": "http://a/", "colour": "red"}, "$.params")
    assert raised.value.extra["errors"][0]["loc"].startswith("$.params")
