-- Signed agent cards (SPEC §18). An agent registered from its card keeps the card's URL (a
-- jku on its origin is trusted), the keys its owner registered for it (`cardKeys`), whether
-- it must present a verified card, and the outcome of the last check of its card's
-- signatures (NULL for an agent registered by hand, which has no card).
ALTER TABLE a2a_agents
    ADD COLUMN card_url            text,
    ADD COLUMN card_keys           jsonb,
    ADD COLUMN require_signed_card boolean NOT NULL DEFAULT false,
    ADD COLUMN card_signature      jsonb;

-- The keys the gateway signs the cards it serves with (private key sealed with the
-- encryption key); a retired key stays in the JWKS for a day.
CREATE TABLE a2a_card_keys (
    kid         text PRIMARY KEY,
    private_key bytea NOT NULL,
    public_jwk  jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    retired_at  timestamptz
);
