-- Growth: every read route stays as fast at a million tasks as at a thousand, and terminal
-- tasks can be pruned. The list of an agent's tasks has one statement per filter shape (see
-- core/task_reads.py), each served by an index in its own order: newest first within the
-- agent (a2a_tasks_listing, 0001), within one of its contexts, or within one state. Without
-- them a filter reads every task of the agent to find a page.

CREATE INDEX a2a_tasks_agent_context ON a2a_tasks (agent_id, context_id, created_at DESC, id DESC)
    WHERE context_id IS NOT NULL;

CREATE INDEX a2a_tasks_agent_state ON a2a_tasks (agent_id, state, created_at DESC, id DESC);

-- Retention (core/retention.py) finds the terminal tasks completed before a cutoff, oldest
-- first; only terminal tasks have a completedAt.
CREATE INDEX a2a_tasks_completed ON a2a_tasks (completed_at) WHERE completed_at IS NOT NULL;

-- One process at a time prunes: it holds this lease (renewed each batch) while it runs; a
-- lease whose holder died expires. A row, not an advisory lock, so that it holds through a
-- transaction-pooling connection pooler too.
CREATE TABLE a2a_chore_leases (
    chore      text PRIMARY KEY,
    holder     uuid NOT NULL,
    expires_at timestamptz NOT NULL
);
