-- Issue 36 item 3: one index entry fewer per finished instance, one page
-- fewer in the commit of an instance that ends in it.
--
-- `instances_tenant_state` had an entry for every instance, but its one
-- reader is the live-instance quota (`Store::live_instance_count`, on every
-- start of a tenant with a quota, and of a child flow), which counts a
-- tenant's RUNNING and WAITING instances; the console's lists by tenant and
-- state walk `instances_tenant` in id order, and its counts are the
-- maintained aggregates (0024). Partial on the live states, an instance
-- leaves it when it ends (one that ends inside its first commit never
-- enters it), and the quota reads the same entries as before. The predicate
-- is the text of `LIVE_OR` in `src/store/queries.rs`, which the quota's
-- query repeats: SQLite uses a partial index only for a query whose WHERE
-- clause has its predicate. An OR of equalities, not `state IN (...)`, for
-- the reason 0026 gives (an IN list there is a table built on every insert).
DROP INDEX instances_tenant_state;
CREATE INDEX instances_tenant_live ON instances (tenant, state)
    WHERE state = 'RUNNING' OR state = 'WAITING';
