-- Live tasks: updates an agent reports outside a call of ours (or inside a stream), the
-- watcher giving up, and what each agent can do (from its registration or its card).

ALTER TABLE a2a_task_events DROP CONSTRAINT a2a_task_events_type_check;
ALTER TABLE a2a_task_events ADD CONSTRAINT a2a_task_events_type_check CHECK (type IN (
    'task_created', 'task_continued', 'task_continue_failed', 'task_canceled',
    'task_redirected', 'task_updated', 'task_watch_failed'));

ALTER TABLE a2a_agents
    ADD COLUMN capabilities jsonb NOT NULL
        DEFAULT '{"streaming": false, "pushNotifications": false}',
    ADD COLUMN card jsonb;
