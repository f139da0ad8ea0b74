-- Follow-up claims are logged from now on. `a2a_claims` was unlogged (no WAL for a claim), so a
-- crash of PostgreSQL emptied it and a promoted standby started with no claims at all: a
-- follow-up still in flight at a failover no longer held its task, and a second follow-up under
-- another key could reach the agent beside it. A claim now survives a crash and reaches the
-- standbys like every other row, so a claim held across a failover is honoured or expires,
-- never doubled (SPEC §17). The table is small (one row per follow-up in flight); this
-- rewrites it once.
ALTER TABLE a2a_claims SET LOGGED;
