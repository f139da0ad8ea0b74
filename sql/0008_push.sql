-- Push notifications (SPEC §12): the configs a client gives for a task, the outbox of the
-- deliveries they are owed, and the gateway's signing keys. Configs and deliveries go with
-- their task (ON DELETE CASCADE).

CREATE TABLE a2a_push_configs (
    row_id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    task               uuid NOT NULL REFERENCES a2a_tasks (id) ON DELETE CASCADE,
    -- The config's id (the client's through the façade, else a generated UUID).
    id                 text NOT NULL CHECK (length(id) BETWEEN 1 AND 200),
    url                text NOT NULL,
    version            text NOT NULL CHECK (version IN ('1.0', '0.3')),
    token_sealed       bytea,
    auth_scheme        text,
    credentials_sealed bytea,
    -- A receiver that answered 410 Gone disables its config: nothing more is enqueued.
    enabled            boolean NOT NULL DEFAULT true,
    -- Whether its first delivery (the whole task) is enqueued: later ones are updates.
    started            boolean NOT NULL DEFAULT false,
    created_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (task, id)
);

CREATE TABLE a2a_push_deliveries (
    -- Sent as A2A-Delivery-Id, the same on every attempt.
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    -- Deleted with its task, and by core/push_configs with its config (no foreign key to
    -- the config: its check would lock the config row at every enqueue, where the one to the
    -- task finds the row already locked by the statement that appends the event).
    task             uuid NOT NULL REFERENCES a2a_tasks (id) ON DELETE CASCADE,
    config           uuid NOT NULL,
    seq              integer NOT NULL,
    -- The order of the deliveries one event makes (1.0: the status update, then one
    -- artifact update per changed artifact).
    part             integer NOT NULL DEFAULT 0,
    kind             text NOT NULL CHECK (kind IN ('task', 'status', 'artifact')),
    -- What the task looked like when the event was recorded (what the body is built from).
    snapshot         jsonb NOT NULL,
    state            text NOT NULL DEFAULT 'pending'
                         CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_token      uuid,
    lease_expires_at timestamptz,
    last_status      integer,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    UNIQUE (task, config, seq, part)
);

-- The dispatchers' pick: due pending rows; and, per config, the earlier pending rows that
-- hold a later one back (order per config).
CREATE INDEX a2a_push_due ON a2a_push_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX a2a_push_queue ON a2a_push_deliveries (config, seq, part) WHERE state = 'pending';

-- The keys the gateway signs its delivery JWTs with (private key sealed with the
-- encryption key); a retired key stays in the JWKS for a day.
CREATE TABLE a2a_push_keys (
    kid         text PRIMARY KEY,
    private_key bytea NOT NULL,
    public_jwk  jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    retired_at  timestamptz
);

-- The outbox: the statement that appends events enqueues their deliveries, in the same
-- transaction, through this statement-level trigger. A task without an enabled config costs
-- one index probe per statement; with one, the task as the statement left it is kept in each
-- delivery. Pushed: a new task, a follow-up's answer (not a JSON-RPC error), an update, a
-- cancel. 0.3 configs get the whole task each time; 1.0 ones the task first, then a status
-- update and one artifact update per changed artifact.
CREATE FUNCTION a2a_push_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM new_events e JOIN a2a_push_configs c ON c.task = e.task AND c.enabled
    ) THEN
        RETURN NULL;
    END IF;
    WITH pushed AS (
        SELECT e.task, e.seq, e.type, e.previous_state, e.new_state, e.data,
               c.row_id AS config, c.version, NOT c.started AS first,
               t.state, t.status_message, t.artifacts
        FROM new_events e
        JOIN a2a_push_configs c ON c.task = e.task AND c.enabled
        JOIN a2a_tasks t ON t.id = e.task
        WHERE e.type IN ('task_created', 'task_continued', 'task_updated', 'task_canceled')
          AND NOT (e.type = 'task_continued' AND e.data ? 'error')
    ), started AS (
        UPDATE a2a_push_configs c SET started = true FROM pushed p
        WHERE c.row_id = p.config AND p.first
    ), parts AS (
        SELECT p.*, 'task' AS kind, 0 AS part,
               jsonb_build_object('state', p.state, 'statusMessage', p.status_message,
                                  'artifacts', p.artifacts) AS snapshot
        FROM pushed p WHERE p.version = '0.3' OR p.first
        UNION ALL
        SELECT p.*, 'status', 0,
               jsonb_build_object('state', p.state, 'statusMessage', p.status_message)
        FROM pushed p
        WHERE p.version = '1.0' AND NOT p.first
          AND (p.type <> 'task_updated' OR p.previous_state IS DISTINCT FROM p.new_state
               OR NOT p.data ? 'artifactIds')
        UNION ALL
        SELECT p.*, 'artifact', a.n::integer,
               jsonb_build_object('state', p.state, 'artifact', a.artifact)
        FROM pushed p
        CROSS JOIN LATERAL jsonb_array_elements(p.artifacts) WITH ORDINALITY AS a (artifact, n)
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

CREATE TRIGGER a2a_push_enqueue AFTER INSERT ON a2a_task_events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION a2a_push_enqueue();
