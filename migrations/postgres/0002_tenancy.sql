-- Tenants, API keys, quotas, and schedule bookkeeping (the API issue).
-- Keep in step with migrations/sqlite/0002_tenancy.sql.

-- A tenant and its quotas (NULL = unlimited / the server's default).
CREATE TABLE tenants (
    name              TEXT    NOT NULL PRIMARY KEY,
    created_at        BIGINT NOT NULL,
    -- Non-terminal (RUNNING/WAITING) instances at once.
    max_instances     BIGINT,
    -- Bytes of one task module.
    max_module_bytes  BIGINT,
    -- Ceilings of one attempt.
    fuel              BIGINT,
    deadline_ms       BIGINT,
    memory_bytes      BIGINT
);

-- Bearer keys: `sutra_<key_id>_<secret>`; only sha256(key) is kept.
CREATE TABLE api_keys (
    key_id      TEXT    NOT NULL PRIMARY KEY,
    tenant      TEXT    NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    key_hash    TEXT    NOT NULL,
    created_at  BIGINT NOT NULL
);
CREATE INDEX api_keys_tenant ON api_keys (tenant);

-- The quota check counts a tenant's live instances.
CREATE INDEX instances_tenant_state ON instances (tenant, state);

-- Schedule counters: fires, slots coalesced into a fire, fires refused.
ALTER TABLE schedules ADD COLUMN fires BIGINT NOT NULL DEFAULT 0;
ALTER TABLE schedules ADD COLUMN skipped BIGINT NOT NULL DEFAULT 0;
ALTER TABLE schedules ADD COLUMN refused BIGINT NOT NULL DEFAULT 0;

-- Every schedule fire and every refused fire, never dropped silently.
CREATE TABLE schedule_events (
    id             BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    deployment_id  TEXT    NOT NULL,
    start_node     TEXT    NOT NULL,
    tenant         TEXT    NOT NULL,
    at             BIGINT NOT NULL,
    slot           BIGINT,
    skipped        BIGINT NOT NULL,
    outcome        TEXT    NOT NULL,
    instance_id    TEXT,
    code           TEXT,
    message        TEXT
);
CREATE INDEX schedule_events_deployment ON schedule_events (deployment_id, id);
