-- Issue 16: an Idempotency-Key reused with a different request is refused,
-- not replayed. The fingerprint of the request that first used the key
-- (sha256 of the process, the start event and the variables, hex) is kept
-- beside it; instances started before this migration have none, and a
-- reuse of their key replays as before.
ALTER TABLE instances ADD COLUMN idempotency_fingerprint TEXT;
