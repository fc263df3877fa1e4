-- Issue 33 item 5: the Idempotency-Key of an instance deleted at its end
-- (retention PT0S) outlives it: the step that deletes the instance writes
-- its key here, with what the key's start answered (the instance's id,
-- process, deployment, final state and instants), kept until `expires_at`
-- (its end plus `sutra.instance.idempotency-window`). A start with the same
-- key and request replays that answer and creates nothing; the retention
-- sweeper removes expired rows.
CREATE TABLE idempotency_keys (
    tenant TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    fingerprint TEXT,
    instance_id TEXT NOT NULL,
    process_id TEXT NOT NULL,
    deployment_id TEXT NOT NULL,
    state TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    ended_at BIGINT,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (tenant, idempotency_key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
