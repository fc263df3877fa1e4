-- The console's aggregates (issue 35: counts by state and per-node
-- statistics at 100,000 instances; filters on the error code and the
-- failed node).
--
-- Per deployment, how many of its instances are in each state (`node` '')
-- and have each node in each state (the snapshot's `node_states`): rows of
-- deltas, maintained by every step in its own transaction from what the
-- runtime knows changed (the last committed snapshot against the new one),
-- by the sweeper for what it deletes and by a migration for what it moves.
-- A count is the sum over `slot`: a step adds to the slot of its instance
-- (a hash of its id, 16 of them), so concurrent steps of one deployment
-- (PostgreSQL replicas) rarely wait on the same row. A row may go negative
-- or stay at zero; only sums mean anything.
CREATE TABLE deployment_stats (
    deployment_id TEXT   NOT NULL,
    node          TEXT   NOT NULL,
    state         TEXT   NOT NULL,
    slot          BIGINT NOT NULL,
    n             BIGINT NOT NULL,
    PRIMARY KEY (deployment_id, node, state, slot)
) {{without_rowid}};

-- The instances written before this migration, counted once here (slot 0).
INSERT INTO deployment_stats (deployment_id, node, state, slot, n)
    SELECT i.deployment_id, '', i.state, 0, COUNT(*) FROM instances i
    GROUP BY i.deployment_id, i.state;
INSERT INTO deployment_stats (deployment_id, node, state, slot, n)
    SELECT i.deployment_id, j.key, j.value, 0, COUNT(*) FROM instances i, {{node_states}}
    GROUP BY i.deployment_id, j.key, j.value;

-- What the instance list shows as its error code and failed node (the
-- snapshot's error code; its first FAILED node by id), kept as columns so
-- `errorCode=` and `failedNode=` are index lookups. Written by the step that
-- changes them; NULL when there is none (partial indexes: an instance that
-- never failed maintains nothing more).
ALTER TABLE instances ADD COLUMN error_code TEXT;
ALTER TABLE instances ADD COLUMN failed_node TEXT;
UPDATE instances AS i SET error_code = {{error_code}},
    failed_node = (SELECT MIN(j.key {{bytewise}}) FROM {{node_states}} WHERE j.value = 'FAILED')
    WHERE i.snapshot LIKE '%FAILED%' OR i.snapshot LIKE '%"error"%';
CREATE INDEX instances_error_code ON instances (tenant, error_code, id)
    WHERE error_code IS NOT NULL;
CREATE INDEX instances_failed_node ON instances (tenant, failed_node, id)
    WHERE failed_node IS NOT NULL;

-- Each attempt's input and output as the console shows them (issue 35 item
-- 5: inspect each step): JSON text, each at most 64 KiB (a longer one is cut
-- and ends with a marker, `runtime::output::STEP_IO_BYTES`); the output of a
-- completed attempt, a failure's details. NULL for attempts written before.
ALTER TABLE attempts ADD COLUMN input TEXT;
ALTER TABLE attempts ADD COLUMN output TEXT;
