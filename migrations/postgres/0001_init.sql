-- Sutra store, PostgreSQL. Every instant is BIGINT milliseconds since the Unix
-- epoch (UTC). Keep in step with migrations/sqlite/0001_init.sql: both
-- backends must behave identically.

CREATE TABLE deployments (
    id          TEXT    NOT NULL PRIMARY KEY,
    tenant      TEXT    NOT NULL,
    process_id  TEXT    NOT NULL,
    version     BIGINT  NOT NULL,
    dialect     TEXT    NOT NULL,
    source      TEXT    NOT NULL,
    -- JSON object: registered task name -> module digest.
    modules     TEXT    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('ACTIVE', 'DRAINING', 'RETIRED')),
    created_at  BIGINT  NOT NULL,
    UNIQUE (tenant, process_id, version)
);
-- At most one ACTIVE deployment per process.
CREATE UNIQUE INDEX deployments_one_active ON deployments (tenant, process_id) WHERE state = 'ACTIVE';

-- Content addressed: a digest names its bytes for ever.
CREATE TABLE modules (
    tenant  TEXT NOT NULL,
    digest  TEXT NOT NULL,
    bytes   BYTEA NOT NULL,
    PRIMARY KEY (tenant, digest)
);

CREATE TABLE instances (
    id               TEXT    NOT NULL PRIMARY KEY,
    tenant           TEXT    NOT NULL,
    deployment_id    TEXT    NOT NULL REFERENCES deployments (id),
    process_id       TEXT    NOT NULL,
    state            TEXT    NOT NULL,
    version          BIGINT  NOT NULL,
    snapshot         TEXT    NOT NULL,
    idempotency_key  TEXT,
    retry_of         TEXT,
    started_at       BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL,
    ended_at         BIGINT
);
CREATE UNIQUE INDEX instances_idempotency ON instances (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX instances_deployment_state ON instances (deployment_id, state);
CREATE INDEX instances_state_ended ON instances (state, ended_at);
CREATE INDEX instances_tenant ON instances (tenant, id);

-- A park exists exactly as long as its wait. due_at is NULL for a message wait.
CREATE TABLE parks (
    instance_id      TEXT    NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    seq              BIGINT  NOT NULL,
    kind             TEXT    NOT NULL,
    tenant           TEXT    NOT NULL,
    deployment_id    TEXT    NOT NULL,
    due_at           BIGINT,
    message_name     TEXT,
    correlation_key  TEXT,
    claimed_by       TEXT,
    claimed_until    BIGINT,
    PRIMARY KEY (instance_id, seq)
);
CREATE INDEX parks_due ON parks (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX parks_claimed ON parks (claimed_until) WHERE claimed_until IS NOT NULL;
CREATE INDEX parks_message ON parks (tenant, message_name, correlation_key) WHERE message_name IS NOT NULL;

-- One row per finished task attempt; a replayed step never records twice.
CREATE TABLE attempts (
    id           BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance_id  TEXT    NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    token        BIGINT  NOT NULL,
    node         TEXT    NOT NULL,
    attempt      BIGINT  NOT NULL,
    started_at   BIGINT  NOT NULL,
    ended_at     BIGINT  NOT NULL,
    outcome      TEXT    NOT NULL,
    code         TEXT,
    message      TEXT,
    UNIQUE (instance_id, token, node, attempt)
);

CREATE TABLE journal (
    instance_id  TEXT    NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    seq          BIGINT  NOT NULL,
    at           BIGINT  NOT NULL,
    kind         TEXT    NOT NULL,
    node         TEXT,
    data         TEXT    NOT NULL,
    PRIMARY KEY (instance_id, seq)
);

-- Singleton leases (the sweeper, schedule arming).
CREATE TABLE leases (
    name        TEXT    NOT NULL PRIMARY KEY,
    holder      TEXT    NOT NULL,
    expires_at  BIGINT  NOT NULL
);

-- Timer start events of active deployments (used from the schedules issue on).
CREATE TABLE schedules (
    deployment_id  TEXT    NOT NULL REFERENCES deployments (id),
    start_node     TEXT    NOT NULL,
    tenant         TEXT    NOT NULL,
    armed_at       BIGINT  NOT NULL,
    last_slot      BIGINT,
    next_due       BIGINT,
    state          TEXT    NOT NULL,
    PRIMARY KEY (deployment_id, start_node)
);
CREATE INDEX schedules_next_due ON schedules (next_due) WHERE next_due IS NOT NULL;
