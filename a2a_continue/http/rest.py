"""The REST edge's routes: method, path, handler, permission, and what the API description
says of each (summary, body and its example, answer, query parameters, problems).

Each example is a body the route accepts as it stands (a test sends every one to a running
gateway): Swagger UI's "Try it out" starts from it.
"""

from __future__ import annotations

from a2a_continue.core.agents.models import AgentCreate, AgentList, AgentOut, AgentPatch
from a2a_continue.core.push.configs import PushConfigCreate, PushConfigList, PushConfigOut
from a2a_continue.core.push.deliveries import DeliveryList, DeliveryOut
from a2a_continue.core.shapes.messages import CancelBody, ContinueBody, StartBody
from a2a_continue.core.tasks.models import EventList, TaskList, TaskOut
from a2a_continue.http import handlers as h
from a2a_continue.http import push_handlers as ph
from a2a_continue.http.push_in import push_in
from a2a_continue.http.routes import PUBLIC, ApiRoute, Operation, Param

_LIMIT = Param("limit", "page size", {"type": "integer", "minimum": 1, "maximum": 200})
_CURSOR = Param("cursor", "the `nextCursor` of the previous page")
_AGENT_ANSWER = "the agent's JSON-RPC answer, byte for byte"
_RELAY = (
    "each frame of the agent's stream as one event (`task`, `message`, `status-update`,"
    " `artifact-update`, `error`) whose data is the agent's JSON-RPC object unchanged"
)
_ANSWER = Param(
    "answer",
    "`agent` (default): the agent's answer as it came; `task`: the stored task in the gateway's"
    " shape, the same for agents of either version (`502 agent-error` for an agent's JSON-RPC"
    " error, `502 agent-started-no-task` for a start answered with a message); streams are"
    " unchanged",
    {"type": "string", "enum": ["agent", "task"], "default": "agent"},
)
_DB = 503
_AGENT = (502, 504)

AGENT = "/v1/a2a/agents/{agent_id:uuid}"
TASK = "/v1/a2a/{agent_id:uuid}/tasks/{task_id:task_id}"
PUSH_CONFIG = TASK + "/push-configs/{config_id:task_id}"

# The sample agent (`a2a-continue sample-agent`) asks "Which city?", then gives a forecast.
QUESTION = "What will the weather be tomorrow?"

ROUTES = [
    ApiRoute(
        "GET",
        "/healthz",
        h.healthz,
        PUBLIC,
        Operation("The process is alive", answer='`{"status": "ok"}`'),
    ),
    ApiRoute(
        "GET",
        "/readyz",
        h.readyz,
        PUBLIC,
        Operation("The database answers", answer='`{"status": "ready"}`', problems=(_DB,)),
    ),
    ApiRoute(
        "GET",
        "/v1/a2a/agents",
        h.list_agents,
        "a2a.read",
        Operation(
            "List the agents the caller can see, newest first",
            answer=AgentList,
            query=(_LIMIT, _CURSOR),
            problems=(422, _DB),
        ),
    ),
    ApiRoute(
        "POST",
        "/v1/a2a/agents",
        h.create_agent,
        "a2a.create",
        Operation(
            "Register an agent (by endpoint, or from its agent card with `cardUrl`)",
            body=AgentCreate,
            status=201,
            answer=AgentOut,
            problems=(403, 413, 422, _DB),
            example={
                "name": "Sample weather agent",
                "endpointUrl": "http://127.0.0.1:9999/",
                "protocolVersion": "1.0",
                "visibility": "private",
                "timeoutSeconds": 30,
            },
            location="the new agent: `/v1/a2a/agents/{id}`",
        ),
    ),
    ApiRoute(
        "GET",
        AGENT,
        h.get_agent,
        "a2a.read",
        Operation("Show one agent", answer=AgentOut, problems=(404, _DB)),
    ),
    ApiRoute(
        "PATCH",
        AGENT,
        h.update_agent,
        "a2a.update",
        Operation(
            "Change an agent (owner or admin); `cardUrl` fetches its card again",
            body=AgentPatch,
            answer=AgentOut,
            problems=(403, 404, 413, 422, _DB),
            example={"name": "Weather (renamed)", "timeoutSeconds": 20},
        ),
    ),
    ApiRoute(
        "DELETE",
        AGENT,
        h.delete_agent,
        "a2a.delete",
        Operation(
            "Delete an agent with its tasks and events (owner or admin)",
            status=204,
            problems=(403, 404, _DB),
        ),
    ),
    ApiRoute(
        "POST",
        "/v1/a2a/{agent_id:uuid}/messages",
        h.start_task,
        "a2a.invoke",
        Operation(
            "Start a task: send the agent a first message",
            body=StartBody,
            answer=_AGENT_ANSWER,
            task_answer=TaskOut,
            query=(_ANSWER,),
            problems=(400, 403, 404, 413, 422, *_AGENT, _DB),
            task_state=True,
            sse=_RELAY,
            idempotent=True,
            example={"text": QUESTION},
        ),
    ),
    ApiRoute(
        "GET",
        "/v1/a2a/tasks",
        h.list_all_tasks,
        "a2a.read",
        Operation(
            "List the caller's tasks of every agent they can see, newest first",
            answer=TaskList,
            query=(
                Param("state", "only tasks in this canonical state"),
                Param("agentId", "only tasks of this agent", {"type": "string", "format": "uuid"}),
                Param("contextId", "only tasks of this context"),
                Param("owner", "only tasks this caller started (admins only, else 403)"),
                _LIMIT,
                _CURSOR,
            ),
            problems=(403, 422, _DB),
        ),
    ),
    ApiRoute(
        "GET",
        "/v1/a2a/{agent_id:uuid}/tasks",
        h.list_tasks,
        "a2a.read",
        Operation(
            "List the caller's tasks of one agent, newest first",
            answer=TaskList,
            query=(
                Param("state", "only tasks in this canonical state"),
                Param("contextId", "only tasks of this context"),
                _LIMIT,
                _CURSOR,
            ),
            problems=(404, 422, _DB),
        ),
    ),
    ApiRoute(
        "GET",
        TASK,
        h.get_task,
        "a2a.read",
        Operation(
            "Show one task (`refresh=true`: ask the agent with GetTask first, record any change)",
            answer=TaskOut,
            query=(Param("refresh", "`true` asks the agent now", {"type": "boolean"}),),
            problems=(404, 422, *_AGENT, _DB),
        ),
    ),
    ApiRoute(
        "GET",
        TASK + "/events",
        h.list_events,
        "a2a.read",
        Operation(
            "List a task's events after a sequence number, ascending",
            answer=EventList,
            query=(
                Param(
                    "after", "return events with a larger `seq`", {"type": "integer", "minimum": 0}
                ),
                Param("limit", "page size", {"type": "integer", "minimum": 1, "maximum": 1000}),
                Param("until", "with the event stream: `terminal` (default) or `interrupted`"),
            ),
            problems=(404, 422, _DB),
            sse="the task's events: `id: <seq>`, `event: <type>`, `data: <the event JSON>`;"
            " resumes after `Last-Event-ID`",
        ),
    ),
    ApiRoute(
        "POST",
        TASK + "/messages",
        h.continue_task,
        "a2a.invoke",
        Operation(
            "Continue a task: answer an agent waiting in input-required or auth-required",
            body=ContinueBody,
            answer=_AGENT_ANSWER,
            task_answer=TaskOut,
            query=(_ANSWER,),
            problems=(400, 404, 409, 413, 422, *_AGENT, _DB),
            task_state=True,
            sse=_RELAY,
            idempotent=True,
            example={"text": "Paris"},
        ),
    ),
    ApiRoute(
        "POST",
        TASK + "/cancel",
        h.cancel_task,
        "a2a.invoke",
        Operation(
            "Cancel a task",
            body=CancelBody,
            body_optional=True,
            answer=TaskOut,
            problems=(404, 409, 413, 422, *_AGENT, _DB),
            idempotent=True,
            example={},
        ),
    ),
    ApiRoute(
        "GET",
        "/metrics",
        h.metrics,
        "a2a.metrics",
        Operation(
            "Prometheus metrics (text exposition format; every worker's under --workers)",
            answer="text/plain",
        ),
    ),
    # -- push notifications (SPEC §12) --
    ApiRoute(
        "POST",
        TASK + "/push-configs",
        ph.create_config,
        "a2a.invoke",
        Operation(
            "Add a push-notification webhook to a task (its changes are POSTed to `url`)",
            body=PushConfigCreate,
            status=201,
            answer=PushConfigOut,
            problems=(404, 413, 422, _DB),
            example={
                "url": "https://hooks.example.com/a2a",
                "version": "1.0",
                "token": "opaque-token-the-receiver-checks",
                "authentication": {"scheme": "Bearer"},
            },
            location="the new config: `…/push-configs/{id}`",
        ),
    ),
    ApiRoute(
        "GET",
        TASK + "/push-configs",
        ph.list_configs,
        "a2a.read",
        Operation("List a task's push configs", answer=PushConfigList, problems=(404, _DB)),
    ),
    ApiRoute(
        "GET",
        PUSH_CONFIG,
        ph.get_config,
        "a2a.read",
        Operation("Show one push config", answer=PushConfigOut, problems=(404, _DB)),
    ),
    ApiRoute(
        "DELETE",
        PUSH_CONFIG,
        ph.delete_config,
        "a2a.invoke",
        Operation(
            "Delete a push config and its deliveries (204 again on a repeat)",
            status=204,
            problems=(404, _DB),
        ),
    ),
    ApiRoute(
        "GET",
        PUSH_CONFIG + "/deliveries",
        ph.list_deliveries,
        "a2a.read",
        Operation(
            "List a push config's deliveries in the order they are sent",
            answer=DeliveryList,
            query=(_LIMIT, _CURSOR),
            problems=(404, 422, _DB),
        ),
    ),
    ApiRoute(
        "POST",
        PUSH_CONFIG + "/deliveries/{delivery_id:uuid}/redeliver",
        ph.redeliver,
        "a2a.invoke",
        Operation(
            "Queue a dead or delivered delivery again, under the same `A2A-Delivery-Id`",
            status=202,
            answer=DeliveryOut,
            problems=(404, 409, _DB),
        ),
    ),
    ApiRoute(
        "POST",
        "/v1/a2a/push-in/{config_id:uuid}",
        push_in,
        PUBLIC,
        Operation(
            "An agent pushes a change of a task the gateway follows (its Task or StreamResponse;"
            " no JWT: `X-A2A-Notification-Token` or `Authorization: Bearer` with the config's"
            " token)",
            body={"type": "object", "description": "a 1.0 StreamResponse or a 0.3 Task"},
            status=204,
            example={
                "statusUpdate": {
                    "taskId": "T1",
                    "contextId": "C1",
                    "status": {"state": "TASK_STATE_WORKING"},
                }
            },
            problems=(401, 404, 413, 422, _DB),
        ),
    ),
    ApiRoute(
        "GET",
        "/.well-known/jwks.json",
        ph.jwks,
        PUBLIC,
        Operation(
            "The public keys push deliveries' JWTs are signed with (JWKS)",
            answer='`{"keys": [...]}`',
            problems=(_DB,),
        ),
    ),
]
