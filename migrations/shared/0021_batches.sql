-- Batch operations (issue 35 item 4): retry, cancel, resolve or migrate many
-- instances as one durable operation on the server, never a loop of
-- requests in a browser. The selection (a filter or a list of ids) is
-- resolved into `batch_items` when the batch is created; a runner claims a
-- RUNNING batch whose `due_at` has come (a lease: `claimed_by` until
-- `claimed_until`), carries out a bounded number of its PENDING items, each
-- outcome written on its item, and makes it due again a second later.
CREATE TABLE batches (
    id            TEXT   NOT NULL PRIMARY KEY,
    tenant        TEXT   NOT NULL,
    action        TEXT   NOT NULL,
    params        TEXT   NOT NULL,
    state         TEXT   NOT NULL,
    total         BIGINT NOT NULL,
    created_at    BIGINT NOT NULL,
    ended_at      BIGINT,
    due_at        BIGINT,
    claimed_by    TEXT,
    claimed_until BIGINT
);
CREATE INDEX batches_tenant ON batches (tenant, id);
CREATE INDEX batches_running ON batches (due_at) WHERE state = 'RUNNING';

CREATE TABLE batch_items (
    batch_id    TEXT   NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    seq         BIGINT NOT NULL,
    instance_id TEXT   NOT NULL,
    state       TEXT   NOT NULL,
    code        TEXT,
    message     TEXT,
    result      TEXT,
    ended_at    BIGINT,
    PRIMARY KEY (batch_id, seq)
);
CREATE INDEX batch_items_pending ON batch_items (batch_id, seq) WHERE state = 'PENDING';
