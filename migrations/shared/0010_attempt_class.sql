-- Issue 15. The error class of a failed attempt, stored with it: a guest's
-- own failure code carries its own class (in its details), which the code
-- alone cannot give back. NULL for a completion, a business error, and the
-- rows written before this migration (readers fall back to the class of a
-- Sutra code).
ALTER TABLE attempts ADD COLUMN class TEXT;

-- Every failure an external-task worker reports (a pull channel call),
-- written in the transaction of the outbox change it causes (a retry later,
-- or an incident): the attempts timeline lists each one. Goes with its
-- instance.
CREATE TABLE worker_failures (
    id            {{id}},
    instance_id   TEXT    NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    -- The outbox request (the external task) the worker failed.
    request_id    TEXT    NOT NULL,
    -- The call's token, task node and attempt.
    token         BIGINT  NOT NULL,
    node          TEXT    NOT NULL,
    call_attempt  BIGINT  NOT NULL,
    -- When the worker reported it.
    at            BIGINT  NOT NULL,
    worker        TEXT    NOT NULL,
    message       TEXT    NOT NULL,
    -- Worker retries left after it (0: an incident was opened).
    retries_left  BIGINT  NOT NULL
);
CREATE INDEX worker_failures_instance ON worker_failures (instance_id, id);
