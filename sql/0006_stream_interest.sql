-- Stream interest: which tasks a live event stream waits on, per gateway process. An event
-- write notifies (pg_notify) only when its task has a row here that has not expired: a
-- NOTIFY takes a database-wide lock until its commit is flushed, so notifying commits queue
-- behind each other, and most tasks have no stream waiting. Each process's hub keeps its own
-- rows (one per task its streams wait on), refreshes them while it runs and deletes them when
-- the last stream of the task ends; rows of a process that died expire and are swept.

CREATE TABLE a2a_stream_interest (
    task       uuid NOT NULL REFERENCES a2a_tasks (id) ON DELETE CASCADE,
    process    uuid NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (task, process)
);
