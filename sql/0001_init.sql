-- Agents, the tasks they run for callers, and each task's ordered event log.

CREATE TABLE a2a_agents (
    id               uuid PRIMARY KEY,
    name             text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    endpoint_url     text NOT NULL CHECK (endpoint_url ~ '^https?://'),
    protocol_version text NOT NULL CHECK (protocol_version IN ('0.3', '1.0')),
    visibility       text NOT NULL DEFAULT 'private'
                     CHECK (visibility IN ('private', 'team', 'public')),
    team_id          text,
    owner            text NOT NULL,
    auth_type        text NOT NULL DEFAULT 'none'
                     CHECK (auth_type IN ('none', 'bearer', 'basic', 'headers')),
    auth_sealed      bytea,
    timeout_seconds  double precision CHECK (timeout_seconds > 0 AND timeout_seconds <= 3600),
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CHECK (visibility <> 'team' OR team_id IS NOT NULL),
    CHECK ((auth_type = 'none') = (auth_sealed IS NULL))
);

CREATE INDEX a2a_agents_listing ON a2a_agents (created_at DESC, id DESC);

CREATE TABLE a2a_tasks (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    agent_id         uuid NOT NULL REFERENCES a2a_agents (id) ON DELETE CASCADE,
    task_id          text NOT NULL CHECK (length(task_id) BETWEEN 1 AND 500),
    context_id       text,
    state            text NOT NULL CHECK (state IN (
                         'submitted', 'working', 'input-required', 'auth-required',
                         'completed', 'canceled', 'failed', 'rejected', 'unknown')),
    status_message   jsonb,
    artifacts        jsonb NOT NULL DEFAULT '[]',
    owner            text NOT NULL,
    team_id          text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    completed_at     timestamptz,
    last_seq         integer NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    -- A follow-up in flight holds the task: one holder at a time across replicas.
    claim_token      uuid,
    claim_expires_at timestamptz,
    UNIQUE (agent_id, task_id),
    CHECK ((claim_token IS NULL) = (claim_expires_at IS NULL))
);

CREATE INDEX a2a_tasks_listing ON a2a_tasks (agent_id, created_at DESC, id DESC);

CREATE TABLE a2a_task_events (
    task           uuid NOT NULL REFERENCES a2a_tasks (id) ON DELETE CASCADE,
    seq            integer NOT NULL CHECK (seq > 0),
    type           text NOT NULL CHECK (type IN (
                       'task_created', 'task_continued', 'task_continue_failed',
                       'task_canceled', 'task_redirected')),
    previous_state text CHECK (previous_state IN (
                       'submitted', 'working', 'input-required', 'auth-required',
                       'completed', 'canceled', 'failed', 'rejected', 'unknown')),
    new_state      text CHECK (new_state IN (
                       'submitted', 'working', 'input-required', 'auth-required',
                       'completed', 'canceled', 'failed', 'rejected', 'unknown')),
    actor          text NOT NULL,
    data           jsonb NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task, seq)
);
