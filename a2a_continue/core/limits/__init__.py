"""Fair shares (SPEC §20): token buckets and in-flight caps per caller and per team, held
for the whole cluster through leases taken from PostgreSQL.

``policy`` says what a subject's limits are and how a refusal reads; ``overrides`` owns
``a2a_limit_overrides``; ``buckets`` owns ``a2a_limit_buckets`` (the token leases);
``slots`` owns ``a2a_limit_slots`` (in-flight slots); ``teams`` reads the team a task acts
for; ``limiter`` puts them together for one process.
"""
