-- The watcher: one process at a time follows a live task (submitted, working, or handed
-- over after a send with returnImmediately) until the agent reports it terminal or
-- interrupted. The lease (token + expiry) is renewed while watching; an expired lease is
-- free for any process to take over.

ALTER TABLE a2a_tasks
    ADD COLUMN watch_token      uuid,
    ADD COLUMN watch_expires_at timestamptz,
    -- When following began; kept across hand-overs, so A2AC_WATCH_MAX_S bounds the whole watch.
    ADD COLUMN watch_started_at timestamptz,
    -- After a send with returnImmediately: the status the agent answered with (state,
    -- timestamp, message); the watch goes on until the agent reports a different one.
    ADD COLUMN watch_past       jsonb,
    -- The watcher gave up (watch-expired, agent-lost-task); the next send re-arms it.
    ADD COLUMN watch_failed_at  timestamptz,
    ADD CONSTRAINT a2a_tasks_watch_lease_check
        CHECK ((watch_token IS NULL) = (watch_expires_at IS NULL));

-- The pick-up scans only tasks that may need a watcher.
CREATE INDEX a2a_tasks_live ON a2a_tasks (updated_at)
    WHERE state IN ('submitted', 'working') OR watch_past IS NOT NULL;
