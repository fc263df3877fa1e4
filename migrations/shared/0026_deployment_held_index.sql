-- Issue 36 item 3: one index entry fewer per finished instance.
--
-- `instances_deployment_state` had an entry for every instance, but its one
-- reader (`Store::deployment_load`, the retirement gate of a draining
-- deployment) only counts the instances that hold their deployment: live,
-- or FAILED. Partial on exactly those states, an instance that ends
-- COMPLETED, TERMINATED or COMPENSATED leaves it (one created already ended,
-- an instance finished inside its first commit, never enters it), and the
-- gate reads the same entries as before. The predicate is the text of
-- `HOLDING` in `src/store/queries.rs`, which the gate's query repeats:
-- SQLite uses a partial index only for a query whose WHERE clause has its
-- predicate. It is an OR of equalities, not `state IN (...)`: SQLite
-- evaluates an IN list in an index's predicate by building a table of the
-- list on every INSERT, which costs more than the index entry it saves.
DROP INDEX instances_deployment_state;
CREATE INDEX instances_deployment_held ON instances (deployment_id, state)
    WHERE state = 'RUNNING' OR state = 'WAITING' OR state = 'FAILED';
