-- The caller's tasks across agents (GET /v1/a2a/tasks), newest first, with each filter
-- walking an index in the listing order; and the console's one-time sign-in codes.

CREATE INDEX a2a_tasks_recent ON a2a_tasks (created_at DESC, id DESC);
CREATE INDEX a2a_tasks_by_owner ON a2a_tasks (owner, created_at DESC, id DESC);
CREATE INDEX a2a_tasks_by_team ON a2a_tasks (team_id, created_at DESC, id DESC)
    WHERE team_id IS NOT NULL;
CREATE INDEX a2a_tasks_by_state ON a2a_tasks (state, created_at DESC, id DESC);
CREATE INDEX a2a_tasks_by_context ON a2a_tasks (context_id, created_at DESC, id DESC)
    WHERE context_id IS NOT NULL;

-- A code printed by `a2a-continue console`, exchanged once by the console page for a
-- short-lived token. Only its SHA-256 is kept: the table never holds a usable code.
CREATE TABLE a2a_console_codes (
    code_sha256 bytea PRIMARY KEY CHECK (length(code_sha256) = 32),
    sub         text NOT NULL,
    is_admin    boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);

CREATE INDEX a2a_console_codes_expiry ON a2a_console_codes (expires_at);
