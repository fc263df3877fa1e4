-- Child flows (process calls: the States language's InvokeFlow). Shared:
-- runs as is on SQLite and PostgreSQL.

-- A child instance knows its parent: the instance and the child park that
-- awaits it. Written in the transaction of the parent's step that created it.
ALTER TABLE instances ADD COLUMN parent_id TEXT;
ALTER TABLE instances ADD COLUMN parent_park BIGINT;
CREATE INDEX instances_parent ON instances (parent_id) WHERE parent_id IS NOT NULL;

-- A child's end (its outcome, JSON), written on its parent's child park in
-- the transaction of the child's final step; the park falls due with it.
ALTER TABLE parks ADD COLUMN payload TEXT;
