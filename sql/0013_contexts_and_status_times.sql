-- Contexts a caller names on a start. An agent keeps its memory per context and sees one
-- credential, the gateway's: a context one caller started must not be joined by another. A
-- start may name a context of a task the caller can see, or a context new to the agent; a
-- new one is recorded here for the caller (and the start's team) before the agent is called,
-- and the primary key makes the first of two starts naming it at once its only holder. A
-- context lives here as long as the agent (retention removes a row older than its cutoff that
-- no task of the agent carries any more).
CREATE TABLE a2a_contexts (
    agent_id   uuid NOT NULL REFERENCES a2a_agents (id) ON DELETE CASCADE,
    context_id text NOT NULL CHECK (length(context_id) <= 500),
    owner      text NOT NULL,
    team_id    text,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (agent_id, context_id)
);

CREATE INDEX a2a_contexts_age ON a2a_contexts (created_at);

-- The time of a task's current status: when the gateway recorded it (the createdAt of the
-- event that recorded it), kept until the state or the status message changes. It is the one
-- status timestamp the façade shows for the task, whichever method shows it (the agent's own
-- timestamps vary with the method it answers). Rows recorded before this column read their
-- last update's time until their status next changes. Not indexed: a write that sets it stays
-- a heap-only update.
ALTER TABLE a2a_tasks ADD COLUMN status_at timestamptz;
