-- Issue 28: an operator closes a FAILED instance (`POST /v1/instances/{id}/close`,
-- `sutra close`): it stays FAILED, no longer keeps its deployment DRAINING,
-- and retention deletes it `sutra.instance.retention` after it was closed.
-- (A FAILED child flow needs no close: its failure went to its parent, and
-- it goes when its parent has gone.)
ALTER TABLE instances ADD COLUMN closed_at BIGINT;
ALTER TABLE instances ADD COLUMN close_reason TEXT;
CREATE INDEX instances_closed ON instances (closed_at) WHERE closed_at IS NOT NULL;
