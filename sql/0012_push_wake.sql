-- The outbox's wake-up no longer reads the queue. Until now the statement that enqueued a
-- delivery looked, before notifying, for another due delivery first in its config's queue;
-- with a backlog (a dispatcher behind, a receiver retried or dead, dispatch off) that look
-- walked every pending row held back behind an earlier one, so each follow-up of a pushed
-- task cost more the longer the queue grew: four times the follow-up's own statements at
-- 8,000 pending rows. Now a dispatcher with nothing to do says so in a one-row table before
-- its last look, and the first enqueue after that clears the flag and notifies: one read of
-- one row per enqueue, whatever waits in the queue.

CREATE TABLE a2a_push_wake (
    one      boolean PRIMARY KEY DEFAULT true CHECK (one),
    -- A dispatcher found nothing to send and waits for a notification.
    sleeping boolean NOT NULL
);
INSERT INTO a2a_push_wake (sleeping) VALUES (true);

-- The outbox, as in sql/0011_lean_writes.sql, up to the wake-up.
CREATE OR REPLACE FUNCTION a2a_push_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    enqueued integer;
BEGIN
    WITH pushed AS (
        SELECT e.task, e.seq, e.type, e.previous_state, e.new_state, e.data,
               c.row_id AS config, c.version, NOT c.started AS first
        FROM a2a_task_events e
        JOIN a2a_push_configs c ON c.task = e.task AND c.enabled
        WHERE e.task = NEW.id AND e.seq > OLD.last_seq AND e.seq <= NEW.last_seq
          AND e.type IN ('task_created', 'task_continued', 'task_updated', 'task_canceled')
          AND NOT (e.type = 'task_continued' AND e.data ? 'error')
    ), started AS (
        UPDATE a2a_push_configs c SET started = true FROM pushed p
        WHERE c.row_id = p.config AND p.first
    ), parts AS (
        SELECT p.*, 'task' AS kind, 0 AS part,
               jsonb_build_object('state', NEW.state, 'statusMessage', NEW.status_message,
                                  'artifacts', NEW.artifacts) AS snapshot
        FROM pushed p WHERE p.version = '0.3' OR p.first
        UNION ALL
        SELECT p.*, 'status', 0,
               jsonb_build_object('state', NEW.state, 'statusMessage', NEW.status_message)
        FROM pushed p
        WHERE p.version = '1.0' AND NOT p.first
          AND (p.type <> 'task_updated' OR p.previous_state IS DISTINCT FROM p.new_state
               OR NOT p.data ? 'artifactIds')
        UNION ALL
        SELECT p.*, 'artifact', a.n::integer,
               jsonb_build_object('state', NEW.state, 'artifact', a.artifact)
        FROM pushed p
        CROSS JOIN LATERAL jsonb_array_elements(NEW.artifacts) WITH ORDINALITY AS a (artifact, n)
        WHERE p.version = '1.0' AND NOT p.first
          AND CASE WHEN p.type = 'task_updated'
                   THEN COALESCE(p.data -> 'artifactIds', '[]') ? (a.artifact ->> 'artifactId')
                   ELSE p.type = 'task_continued' END
    )
    INSERT INTO a2a_push_deliveries (config, task, seq, part, kind, snapshot)
    SELECT config, task, seq, part, kind, snapshot FROM parts;
    GET DIAGNOSTICS enqueued = ROW_COUNT;
    IF enqueued = 0 THEN
        RETURN NULL;
    END IF;
    -- Wake the dispatchers only when one waits: the first enqueue to see the flag clears it
    -- and notifies (a NOTIFY holds a database-wide lock until its commit is flushed, so one
    -- per event would queue every commit behind the others under load); the enqueues
    -- behind it find the flag cleared. A busy dispatcher looks again by itself.
    UPDATE a2a_push_wake SET sleeping = false WHERE sleeping;
    IF FOUND THEN
        PERFORM pg_notify('a2ac_push', '');
    END IF;
    RETURN NULL;
END
$$;
