-- The event log is the outbox (SPEC §22). Until now the statement that appended an event of a
-- task with a push config also wrote one delivery row per config and part (heap, four indexes,
-- WAL), and each row was written twice more by the dispatchers: a follow-up of a pushed task
-- cost PostgreSQL 1.4 times one without. Now:
-- - the event carries what its deliveries are built from (`pushed`: the task as the event's
--   statement left it), written by the writers themselves, only for the events a push config
--   is owed (core/tasks/store.py); no trigger runs for it;
-- - each config keeps its position in its task's log (`pos_seq`, `pos_part`: every delivery
--   before it is settled), and the dispatchers lease configs, not rows, read the events past
--   the position in seq order, and advance it;
-- - a delivery row is written by the dispatchers, in batches, after its first attempt: the
--   history the deliveries route shows. A pending row is one to send again (a failed attempt,
--   a redelivery); it holds its body and comes before its config's unsent events.
-- A2A-Delivery-Id of a delivery made from the log is derived from (config, seq, part).

-- First, so that no event is written while the positions are set below.
ALTER TABLE a2a_task_events ADD COLUMN pushed jsonb;

ALTER TABLE a2a_push_configs
    -- Every delivery before (pos_seq, pos_part) is settled; -1: none of pos_seq's yet.
    ADD COLUMN pos_seq integer,
    ADD COLUMN pos_part integer NOT NULL DEFAULT -1,
    -- A config given on a start owes the task as it stood first (at opening_seq).
    ADD COLUMN opening jsonb,
    ADD COLUMN opening_seq integer,
    -- The dispatcher sending the config's next delivery, and how many times it was tried.
    ADD COLUMN lease_token uuid,
    ADD COLUMN lease_expires_at timestamptz,
    ADD COLUMN attempts integer NOT NULL DEFAULT 0,
    -- Its task ended long ago and everything was sent: the dispatchers stop looking at it.
    ADD COLUMN parked boolean NOT NULL DEFAULT false;

-- The previous outbox's rows stay: the pending ones are sent first, in their order, under the
-- same ids (by either release's dispatchers, each leasing the row as before). Every event up to
-- now has its rows, so each config starts after its task's last event.
UPDATE a2a_push_configs c SET pos_seq = t.last_seq + 1 FROM a2a_tasks t WHERE t.id = c.task;

-- A delivered row keeps no body (it is made again from its event to redeliver it).
ALTER TABLE a2a_push_deliveries ALTER COLUMN snapshot DROP NOT NULL;

-- The configs the dispatchers look at.
CREATE INDEX a2a_push_active ON a2a_push_configs (task) WHERE enabled AND NOT parked;

-- The config trigger (sql/0011) also starts a config the previous release created (it does not
-- set the position) after its task's last event.
CREATE OR REPLACE FUNCTION a2a_push_flag() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    of_task uuid := CASE WHEN TG_OP = 'DELETE' THEN OLD.task ELSE NEW.task END;
BEGIN
    UPDATE a2a_tasks t SET push_enabled = EXISTS (
        SELECT 1 FROM a2a_push_configs c WHERE c.task = of_task AND c.enabled)
    WHERE t.id = of_task;
    IF TG_OP <> 'DELETE' AND NEW.pos_seq IS NULL THEN
        UPDATE a2a_push_configs c SET pos_seq = t.last_seq + 1
        FROM a2a_tasks t WHERE c.row_id = NEW.row_id AND t.id = c.task;
    END IF;
    RETURN NULL;
END
$$;

-- A dispatcher that waits says until when (it looks again by then anyway): the events notify
-- only while that holds, so a cluster whose dispatchers all stopped, or run with dispatch off,
-- pays no notification per event.
ALTER TABLE a2a_push_wake ADD COLUMN until timestamptz;

-- Nothing fires for an event any more: the writers wake the dispatchers themselves (reading
-- `a2a_push_wake` only for a task with an enabled config), and the dispatchers read what the
-- previous release's writers append (no `pushed`) with the task as it stands.
DROP TRIGGER a2a_push_enqueue ON a2a_tasks;
DROP FUNCTION a2a_push_enqueue();
