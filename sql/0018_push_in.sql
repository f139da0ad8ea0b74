-- Push in (SPEC §19): the push configs the gateway gives agents, so that an agent that pushes
-- tells the gateway of its task's changes at /v1/a2a/push-in/{id} instead of being polled.
-- Written by core/watch/push_in.py only. The token is kept as its SHA-256, never itself.
-- A config goes with its agent and, once bound, with its task (ON DELETE CASCADE: retention
-- deletes it with the task).

CREATE TABLE a2a_push_in (
    id            uuid PRIMARY KEY,
    agent_id      uuid NOT NULL REFERENCES a2a_agents (id) ON DELETE CASCADE,
    version       text NOT NULL CHECK (version IN ('1.0', '0.3')),
    token_sha256  bytea NOT NULL,
    -- The agent's task it is bound to: at creation (create-config), or for a config given
    -- inline on a send by the first of the send's answer and the first push.
    task_id       text,
    task          uuid REFERENCES a2a_tasks (id) ON DELETE CASCADE,
    created_at    timestamptz NOT NULL DEFAULT now(),
    -- The agent took it (its create-config answer, the send's answer, or a push).
    accepted_at   timestamptz,
    -- The agent refused it (create-config answered an error): its task is polled.
    refused_at    timestamptz,
    -- A push failed verification (token, shape, task): its task is polled again.
    failed_at     timestamptz,
    -- Its task ended: deleted at the agent (best effort); pushes to it are refused (404).
    ended_at      timestamptz,
    -- Pushes verified and read, and the last one's time: the watcher's check compares them.
    pushes        bigint NOT NULL DEFAULT 0,
    last_push_at  timestamptz
);

CREATE INDEX a2a_push_in_task ON a2a_push_in (task);
CREATE INDEX a2a_push_in_agent_task ON a2a_push_in (agent_id, task_id);
