"""Push in's configs (core/watch/push_in): what the agent is given, hashed tokens, retention."""

from __future__ import annotations

import hashlib
import uuid

import asyncpg
import msgspec

from a2a_continue.a2a import protocol
from a2a_continue.core.tasks import retention
from a2a_continue.core.watch import push_in
from a2a_continue.settings import Settings
from tests.support.database import insert_agent

PUSH = protocol.PushTarget("c1", "http://gw.example/v1/a2a/push-in/c1", "tok")


def test_a_1_0_config_carries_the_token_as_token_and_as_bearer_credentials() -> None:
    request = protocol.build_set_push_request("1.0", "r1", "T1", PUSH)
    assert request["method"] == "CreateTaskPushNotificationConfig"
    assert request["params"] == {
        "taskId": "T1",
        "id": "c1",
        "url": PUSH.url,
        "token": "tok",
        "authentication": {"scheme": "Bearer", "credentials": "tok"},
    }


def test_a_0_3_config_carries_the_token_only() -> None:
    request = protocol.build_set_push_request("0.3", "r1", "T1", PUSH)
    assert request["method"] == "tasks/pushNotificationConfig/set"
    assert request["params"] == {
        "taskId": "T1",
        "pushNotificationConfig": {"id": "c1", "url": PUSH.url, "token": "tok"},
    }


def test_the_configs_are_deleted_at_the_agent_in_each_versions_shape() -> None:
    v10 = protocol.build_delete_push_request("1.0", "r1", "T1", "c1")
    v03 = protocol.build_delete_push_request("0.3", "r1", "T1", "c1")
    assert (v10["method"], v10["params"]) == (
        "DeleteTaskPushNotificationConfig",
        {"taskId": "T1", "id": "c1"},
    )
    assert (v03["method"], v03["params"]) == (
        "tasks/pushNotificationConfig/delete",
        {"id": "T1", "pushNotificationConfigId": "c1"},
    )


def test_an_inline_config_rides_on_the_send_in_the_versions_member() -> None:
    send = protocol.Outgoing("m1", None, None, [{"text": "hi"}], push=PUSH)
    v10 = protocol.send_request("1.0", send)["params"]["configuration"]
    v03 = protocol.send_request("0.3", send)["params"]["configuration"]
    assert v10["taskPushNotificationConfig"]["authentication"]["credentials"] == "tok"
    assert v03["pushNotificationConfig"] == {"id": "c1", "url": PUSH.url, "token": "tok"}


def test_a_new_config_points_at_the_public_url_with_a_fresh_random_token(
    settings: Settings,
) -> None:
    public = msgspec.structs.replace(settings, public_url="https://gw.example.com/")
    one, two = push_in.new_push(public), push_in.new_push(public)
    assert one.url == f"https://gw.example.com/v1/a2a/push-in/{one.id}"
    assert uuid.UUID(one.id) and one.id != two.id and one.token != two.token
    assert len(one.token) >= 40
    assert push_in.digest(one.token) == hashlib.sha256(one.token.encode()).digest()


async def test_a_config_goes_with_its_task_when_retention_prunes_it(db: asyncpg.Connection) -> None:
    agent = await insert_agent(db)
    row = await db.fetchval(
        "INSERT INTO a2a_tasks (agent_id, task_id, state, owner, completed_at)"
        " VALUES ($1, 'T1', 'completed', 'alice@example.com', now() - interval '40 days')"
        " RETURNING id",
        agent,
    )
    await db.execute(
        "INSERT INTO a2a_push_in (id, agent_id, version, token_sha256, task_id, task)"
        " VALUES ($1, $2, '1.0', $3, 'T1', $4)",
        uuid.uuid4(),
        agent,
        push_in.digest("tok"),
        row,
    )
    pruned = await retention.prune(db, 30)
    assert pruned.tasks == 1
    assert await db.fetchval("SELECT count(*) FROM a2a_push_in") == 0
