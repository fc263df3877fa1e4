-- Tenants, API keys, quotas, and schedule bookkeeping (the API issue).
-- Keep in step with migrations/postgres/0002_tenancy.sql.

-- A tenant and its quotas (NULL = unlimited / the server's default).
CREATE TABLE tenants (
    name              TEXT    NOT NULL PRIMARY KEY,
    created_at        INTEGER NOT NULL,
    -- Non-terminal (RUNNING/WAITING) instances at once.
    max_instances     INTEGER,
    -- Bytes of one task module.
    max_module_bytes  INTEGER,
    -- Ceilings of one attempt.
    fuel              INTEGER,
    deadline_ms       INTEGER,
    memory_bytes      INTEGER
);

-- Bearer keys: `sutra_<key_id>_<secret>`; only sha256(key) is kept.
CREATE TABLE api_keys (
    key_id      TEXT    NOT NULL PRIMARY KEY,
    tenant      TEXT    NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    key_hash    TEXT    NOT NULL,
    created_at  INTEGER NOT NULL
);
CREATE INDEX api_keys_tenant ON api_keys (tenant);

-- The quota check counts a tenant's live instances.
CREATE INDEX instances_tenant_state ON instances (tenant, state);

-- Schedule counters: fires, slots coalesced into a fire, fires refused.
ALTER TABLE schedules ADD COLUMN fires INTEGER NOT NULL DEFAULT 0;
ALTER TABLE schedules ADD COLUMN skipped INTEGER NOT NULL DEFAULT 0;
ALTER TABLE schedules ADD COLUMN refused INTEGER NOT NULL DEFAULT 0;

-- Every schedule fire and every refused fire, never dropped silently.
CREATE TABLE schedule_events (
    id             INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    deployment_id  TEXT    NOT NULL,
    start_node     TEXT    NOT NULL,
    tenant         TEXT    NOT NULL,
    at             INTEGER NOT NULL,
    slot           INTEGER,
    skipped        INTEGER NOT NULL,
    outcome        TEXT    NOT NULL,
    instance_id    TEXT,
    code           TEXT,
    message        TEXT
);
CREATE INDEX schedule_events_deployment ON schedule_events (deployment_id, id);
