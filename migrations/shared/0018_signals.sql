-- Signals and thrown messages (issue 29 item 5, issue 32 item 1): a durable
-- fan-out. A broadcast (or a message thrown by a step) is one `signals` row;
-- the waits it reaches are fixed when it is written, as one
-- `signal_deliveries` row per wait (a park: instance and seq), in the same
-- transaction. The runtime fires each delivery and deletes it; a delivery
-- replayed after a crash finds its park gone and changes nothing, so each
-- wait is reached exactly once, and a wait armed after the throw is never
-- reached (BPMN: a signal reaches the instances waiting when it is thrown).
CREATE TABLE signals (
    id               TEXT   NOT NULL PRIMARY KEY,
    tenant           TEXT   NOT NULL,
    -- 'signal' or 'message'
    kind             TEXT   NOT NULL,
    name             TEXT   NOT NULL,
    correlation_key  TEXT,
    -- JSON object: what the receivers get as variables.
    variables        TEXT   NOT NULL,
    -- The instance whose step threw it (NULL: the API).
    origin           TEXT,
    -- 1 once the starts (signal and message start events) are done.
    starts_done      BIGINT NOT NULL DEFAULT 0,
    created_at       BIGINT NOT NULL
);
CREATE INDEX signals_pending ON signals (created_at, id);

CREATE TABLE signal_deliveries (
    signal_id    TEXT   NOT NULL REFERENCES signals (id) ON DELETE CASCADE,
    instance_id  TEXT   NOT NULL,
    seq          BIGINT NOT NULL,
    PRIMARY KEY (signal_id, instance_id, seq)
);

-- The signal waits by (tenant, name): what a broadcast selects.
CREATE INDEX parks_signal ON parks (tenant, message_name) WHERE kind = 'signal';
