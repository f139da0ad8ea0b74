-- Follow-up claims in a table of their own. A claim written on the task row made every claim
-- and every outcome a new, non-HOT version of that row (the claims index and the pick-up index
-- both changed); now a claim is a row here, taken before the call and deleted with the outcome,
-- and the outcome's update of `a2a_tasks` changes no indexed column, so it stays on its page
-- (HOT) when the page has room: the fillfactor leaves that room on every new page.
--
-- UNLOGGED: no WAL for a claim. A crash of PostgreSQL empties the table, which only frees the
-- tasks early (as an expired claim would: the follow-up in flight then records its outcome as
-- usual); standbys have no rows of it, and a promoted standby starts with no claims.
CREATE UNLOGGED TABLE a2a_claims (
    task       uuid PRIMARY KEY REFERENCES a2a_tasks (id) ON DELETE CASCADE,
    token      uuid NOT NULL,
    expires_at timestamptz NOT NULL
);

-- The sweep of expired claims.
CREATE INDEX a2a_claims_expiry ON a2a_claims (expires_at);

ALTER TABLE a2a_tasks SET (fillfactor = 80);

-- The pick-up index keyed on a column no write changes (it was keyed on `updated_at`, which
-- every outcome changes); the pick-up sorts the live tasks it finds. Building it scans
-- a2a_tasks under a lock that holds writes back; on a large table build it first with
-- `CREATE INDEX CONCURRENTLY` (the same definition), and this statement does nothing.
CREATE INDEX IF NOT EXISTS a2a_tasks_live_rows ON a2a_tasks (id)
    WHERE state IN ('submitted', 'working') OR watch_past IS NOT NULL;
DROP INDEX IF EXISTS a2a_tasks_live;

-- CHECK constraints are read back from the catalog and planned on every statement that
-- writes the table, and a list of nine states is most of that work: the lists move into
-- functions (planned once per connection). The rows already passed the constraints replaced,
-- so the new ones are added NOT VALID (no scan, no lock held on the rows);
-- `VALIDATE CONSTRAINT` may be run at any time without holding writes back.
CREATE FUNCTION a2a_is_task_state(state text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN state IN ('submitted', 'working', 'input-required', 'auth-required', 'completed',
                     'canceled', 'failed', 'rejected', 'unknown');
END
$$;

CREATE FUNCTION a2a_is_event_type(type text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN type IN ('task_created', 'task_continued', 'task_continue_failed', 'task_canceled',
                    'task_redirected', 'task_updated', 'task_watch_failed');
END
$$;

ALTER TABLE a2a_tasks
    DROP CONSTRAINT a2a_tasks_state_check,
    ADD CONSTRAINT a2a_tasks_state_known CHECK (a2a_is_task_state(state)) NOT VALID;

ALTER TABLE a2a_task_events
    DROP CONSTRAINT a2a_task_events_type_check,
    DROP CONSTRAINT a2a_task_events_previous_state_check,
    DROP CONSTRAINT a2a_task_events_new_state_check,
    ADD CONSTRAINT a2a_task_events_known CHECK (a2a_is_event_type(type)
        AND (previous_state IS NULL OR a2a_is_task_state(previous_state))
        AND (new_state IS NULL OR a2a_is_task_state(new_state))) NOT VALID;

-- Whether a live claim holds the task, read with a snapshot of its own: a statement that has
-- waited on the task row's lock sees the claim its holder committed meanwhile (a subquery
-- would see only what its statement's snapshot saw).
CREATE FUNCTION a2a_claim_held(task uuid) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM a2a_claims c
                   WHERE c.task = a2a_claim_held.task AND c.expires_at >= now());
END
$$;

-- While processes of the previous release still run, they claim on the task row
-- (`claim_token`, `claim_expires_at`) and take watch leases without looking here: this trigger
-- refuses them a task a claim here holds (their claim statement updates nothing and answers
-- busy; a new task's refresh keeps the row's claim; a watch lease is not taken). The new
-- release respects their live claims in turn until they expire, and its sweep logs and clears
-- their expired ones. A later migration drops this trigger and the two columns.
CREATE FUNCTION a2a_tasks_respect_claims() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.claim_token IS NOT NULL AND NEW.claim_token IS DISTINCT FROM OLD.claim_token
       AND a2a_claim_held(NEW.id) THEN
        IF NEW.updated_at IS NOT DISTINCT FROM OLD.updated_at THEN
            RETURN NULL;
        END IF;
        NEW.claim_token := OLD.claim_token;
        NEW.claim_expires_at := OLD.claim_expires_at;
    END IF;
    IF NEW.watch_token IS NOT NULL AND NEW.watch_token IS DISTINCT FROM OLD.watch_token
       AND a2a_claim_held(NEW.id) THEN
        NEW.watch_token := OLD.watch_token;
        NEW.watch_expires_at := OLD.watch_expires_at;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER a2a_tasks_respect_claims BEFORE UPDATE OF claim_token, watch_token ON a2a_tasks
    FOR EACH ROW EXECUTE FUNCTION a2a_tasks_respect_claims();
