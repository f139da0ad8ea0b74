-- Idempotency keys: one row per caller and key. While `status` is NULL the request is in
-- flight (held by `token` until `locked_until`); once answered, the row keeps the answer so
-- that a retry with the same key gets the same bytes. A row past `expires_at` counts as
-- absent and is removed in the background.

CREATE TABLE a2a_idempotency_keys (
    caller        text NOT NULL,
    key           text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    route         text NOT NULL,
    agent_id      uuid NOT NULL,
    request_hash  bytea NOT NULL,
    token         uuid NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    locked_until  timestamptz,
    status        smallint CHECK (status BETWEEN 100 AND 599),
    task_state    text,
    content_type  text,
    body          bytea,
    -- A streamed answer is not kept: its retries are pointed at the task's event stream.
    streamed      boolean NOT NULL DEFAULT false,
    stream_task   text,
    PRIMARY KEY (caller, key),
    CHECK ((status IS NULL) = (body IS NULL)),
    CHECK (NOT (streamed AND status IS NOT NULL))
);

CREATE INDEX a2a_idempotency_keys_expiry ON a2a_idempotency_keys (expires_at);
