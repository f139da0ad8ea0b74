-- Hardening: URL schemes in any case pass the same check as the code applies, and the
-- context ids the gateway stores are as bounded as its task ids.

ALTER TABLE a2a_agents DROP CONSTRAINT a2a_agents_endpoint_url_check;
ALTER TABLE a2a_agents ADD CONSTRAINT a2a_agents_endpoint_url_check
    CHECK (endpoint_url ~* '^https?://');

ALTER TABLE a2a_tasks ADD CONSTRAINT a2a_tasks_context_id_length
    CHECK (context_id IS NULL OR length(context_id) <= 500) NOT VALID;

-- The periodic sweep looks for expired follow-up claims.
CREATE INDEX a2a_tasks_claims ON a2a_tasks (claim_expires_at) WHERE claim_expires_at IS NOT NULL;
