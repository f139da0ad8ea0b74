-- Less PostgreSQL work per write of the two hot tables (`a2a_tasks`, `a2a_task_events`): a
-- follow-up's claim and outcome paid, on every statement, for a push trigger most tasks never
-- need, for foreign-key checks of a task row the statement had just locked, and for CHECK
-- constraints re-read from the catalog and planned each time. Measured on a follow-up's two
-- statements: each of the three is 7-11 % of PostgreSQL's CPU, together about 30 %.
-- Nothing here rewrites a table or holds writes back longer than a catalog change does.

-- ---- 1. Push: the trigger moves to the task rows that have an enabled push config --------
-- `push_enabled` says whether a task has one. A trigger on the configs keeps it (configs are
-- few and rarely written), so that no writer, this release's or the previous one's, can
-- forget it. The outbox trigger fires only for a row update that appended events (last_seq
-- grew) on such a task: for every other task its WHEN clause, evaluated without calling any
-- function, is its whole cost.
ALTER TABLE a2a_tasks ADD COLUMN push_enabled boolean NOT NULL DEFAULT false;

CREATE FUNCTION a2a_push_flag() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    of_task uuid := CASE WHEN TG_OP = 'DELETE' THEN OLD.task ELSE NEW.task END;
BEGIN
    UPDATE a2a_tasks t SET push_enabled = EXISTS (
        SELECT 1 FROM a2a_push_configs c WHERE c.task = of_task AND c.enabled)
    WHERE t.id = of_task;
    RETURN NULL;
END
$$;

CREATE TRIGGER a2a_push_flag AFTER INSERT OR DELETE OR UPDATE OF enabled ON a2a_push_configs
    FOR EACH ROW EXECUTE FUNCTION a2a_push_flag();

UPDATE a2a_tasks t SET push_enabled = true
WHERE t.id IN (SELECT c.task FROM a2a_push_configs c WHERE c.enabled);

DROP TRIGGER a2a_push_enqueue ON a2a_task_events;
DROP FUNCTION a2a_push_enqueue();

-- The outbox, as before (sql/0008_push.sql): the statement that appends events enqueues
-- their deliveries in its own transaction. The events are those of this row update, seqs
-- OLD.last_seq + 1 to NEW.last_seq; the task as the statement left it is NEW. 0.3 configs
-- get the whole task each time; 1.0 ones the task first, then a status update and one
-- artifact update per changed artifact.
CREATE FUNCTION a2a_push_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
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
    -- Wake the dispatchers, unless another delivery is due and first in its config's queue:
    -- then one is sending or about to take it, and takes this one in the round after (a
    -- NOTIFY holds a database-wide lock until its commit is flushed: one per event would
    -- queue every commit behind the others under load). A missed wake-up costs a poll.
    IF NOT EXISTS (
        SELECT 1 FROM a2a_push_deliveries d
        WHERE d.state = 'pending' AND d.next_attempt_at <= now()
          AND d.created_at < now()  -- not one this transaction enqueued
          AND NOT EXISTS (
              SELECT 1 FROM a2a_push_deliveries e
              WHERE e.config = d.config AND e.state = 'pending'
                AND (e.seq, e.part) < (d.seq, d.part))
    ) THEN
        PERFORM pg_notify('a2ac_push', '');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER a2a_push_enqueue AFTER UPDATE OF last_seq ON a2a_tasks
    FOR EACH ROW WHEN (NEW.push_enabled AND NEW.last_seq > OLD.last_seq)
    EXECUTE FUNCTION a2a_push_enqueue();

-- ---- 2. Events, claims and deliveries without a foreign key to their task ---------------
-- Every statement that writes an event, a claim or a delivery takes its task from its own
-- update (or locked read) of the task row: the task exists, and cannot be deleted before that
-- statement commits. The foreign keys' checks were a second lookup of that row on every
-- write; what they still did, deleting a task's rows with it, a statement trigger on the rare
-- deletes of tasks does (retention, a deleted agent), by key. (TRUNCATE fires no trigger:
-- truncate these tables together.)
ALTER TABLE a2a_task_events DROP CONSTRAINT IF EXISTS a2a_task_events_task_fkey;
ALTER TABLE a2a_claims DROP CONSTRAINT IF EXISTS a2a_claims_task_fkey;
ALTER TABLE a2a_push_deliveries DROP CONSTRAINT IF EXISTS a2a_push_deliveries_task_fkey;

CREATE FUNCTION a2a_tasks_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM a2a_task_events e WHERE e.task = ANY (ARRAY(SELECT g.id FROM gone g));
    DELETE FROM a2a_claims c WHERE c.task = ANY (ARRAY(SELECT g.id FROM gone g));
    DELETE FROM a2a_push_deliveries d WHERE d.task = ANY (ARRAY(SELECT g.id FROM gone g));
    RETURN NULL;
END
$$;

CREATE TRIGGER a2a_tasks_deleted AFTER DELETE ON a2a_tasks REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION a2a_tasks_deleted();

-- ---- 3. No CHECK constraints on the two hot tables ---------------------------------------
-- Their values come only from the gateway's own statements, with what they write checked
-- before it is sent (core/tasks: a canonical state, a known event type; a2a/protocol: an
-- agent's task and context ids fit). The other tables keep theirs.
ALTER TABLE a2a_tasks
    DROP CONSTRAINT IF EXISTS a2a_tasks_task_id_check,
    DROP CONSTRAINT IF EXISTS a2a_tasks_last_seq_check,
    DROP CONSTRAINT IF EXISTS a2a_tasks_check,
    DROP CONSTRAINT IF EXISTS a2a_tasks_watch_lease_check,
    DROP CONSTRAINT IF EXISTS a2a_tasks_context_id_length,
    DROP CONSTRAINT IF EXISTS a2a_tasks_state_known;

ALTER TABLE a2a_task_events
    DROP CONSTRAINT IF EXISTS a2a_task_events_seq_check,
    DROP CONSTRAINT IF EXISTS a2a_task_events_known;

DROP FUNCTION a2a_is_task_state(text);
DROP FUNCTION a2a_is_event_type(text);
