-- Channels, the transactional outbox (push deliveries and pull external
-- tasks) and incidents (issue 14). Shared: runs as is on SQLite and PostgreSQL.

-- A tenant's channel: where its channel-call requests go. Configured per
-- tenant (addresses differ per environment), never in the definition.
CREATE TABLE channels (
    tenant      TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    -- 'push': the outbox POSTs each request to url; 'pull': workers fetch them.
    transport   TEXT    NOT NULL CHECK (transport IN ('push', 'pull')),
    url         TEXT,
    -- HMAC-SHA256 key of the request signature (push).
    secret      TEXT    NOT NULL,
    created_at  BIGINT  NOT NULL,
    updated_at  BIGINT  NOT NULL,
    PRIMARY KEY (tenant, name)
);

-- One row per channel-call request, inserted in the transaction of the step
-- that issued it. It is live while its call's park (instance_id, park_seq)
-- exists; a row whose park is gone is CANCELLED when next met.
CREATE TABLE outbox (
    -- The request id: also the Idempotency-Key on the wire.
    id             TEXT    NOT NULL PRIMARY KEY,
    tenant         TEXT    NOT NULL,
    instance_id    TEXT    NOT NULL,
    park_seq       BIGINT  NOT NULL,
    deployment_id  TEXT    NOT NULL,
    channel        TEXT    NOT NULL,
    node           TEXT    NOT NULL,
    call_attempt   BIGINT  NOT NULL,
    correlation    TEXT    NOT NULL,
    -- The request's variables, JSON.
    payload        TEXT    NOT NULL,
    -- PENDING, DELIVERED, DONE, POISONED, INCIDENT, CANCELLED.
    state          TEXT    NOT NULL,
    -- When it may next be sent (push) or fetched (pull).
    due_at         BIGINT  NOT NULL,
    -- Push: the sender's claim. Pull: the worker's lock.
    claimed_by     TEXT,
    claimed_until  BIGINT,
    -- When it first went out (handed to a sender, or fetched by a worker).
    sent_at        BIGINT,
    -- Push: POSTs tried. Pull: fetches.
    deliveries     BIGINT  NOT NULL DEFAULT 0,
    -- Pull: retries left (NULL = sutra.external-task.retries).
    retries        BIGINT,
    last_error     TEXT,
    created_at     BIGINT  NOT NULL,
    updated_at     BIGINT  NOT NULL
);
CREATE INDEX outbox_state_due ON outbox (state, due_at);
CREATE INDEX outbox_tenant_channel ON outbox (tenant, channel, state, due_at);
CREATE INDEX outbox_instance ON outbox (instance_id);

-- Something an operator must look at: a poisoned delivery, an external task
-- whose worker retries are spent.
CREATE TABLE incidents (
    id           TEXT    NOT NULL PRIMARY KEY,
    tenant       TEXT    NOT NULL,
    instance_id  TEXT    NOT NULL,
    -- 'delivery_poisoned' or 'external_task_failed'.
    kind         TEXT    NOT NULL,
    request_id   TEXT    NOT NULL,
    channel      TEXT    NOT NULL,
    node         TEXT    NOT NULL,
    message      TEXT    NOT NULL,
    -- OPEN or RESOLVED.
    state        TEXT    NOT NULL,
    created_at   BIGINT  NOT NULL,
    resolved_at  BIGINT 
);
CREATE INDEX incidents_tenant ON incidents (tenant, state, id);
CREATE INDEX incidents_instance ON incidents (instance_id);
