-- Fair shares (SPEC §20): limits per caller and per team, held for the whole cluster.

-- An admin's override of the default limits of one caller (`sub`) or team. `limits` holds
-- only the members the admin gave (`rps`, `burst`, `inflight`; null = no limit of that
-- kind); a missing member keeps the default.
CREATE TABLE a2a_limit_overrides (
    kind       text NOT NULL CHECK (kind IN ('caller', 'team')),
    name       text NOT NULL CHECK (length(name) BETWEEN 1 AND 500),
    limits     jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, name)
);

-- The cluster's token bucket of one caller or team: what is left after the last lease, and
-- when it was last refilled. `granted` is how many tokens the last lease took.
CREATE TABLE a2a_limit_buckets (
    kind        text NOT NULL,
    name        text NOT NULL,
    tokens      double precision NOT NULL,
    granted     integer NOT NULL,
    refilled_at timestamptz NOT NULL,
    PRIMARY KEY (kind, name)
);

-- In-flight slots each process holds for a caller or team (a lease that expires unless
-- renewed, so the slots of a process that died come back).
CREATE TABLE a2a_limit_slots (
    kind       text NOT NULL,
    name       text NOT NULL,
    holder     uuid NOT NULL,
    slots      integer NOT NULL CHECK (slots > 0),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (kind, name, holder)
);
CREATE INDEX a2a_limit_slots_by_holder ON a2a_limit_slots (holder);
