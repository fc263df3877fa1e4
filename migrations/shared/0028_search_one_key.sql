-- Issue 36 item 3: one B-tree fewer in every commit that writes an
-- instance's searchable variables (a new instance with any, a step that
-- changed one).
--
-- 0020 kept them keyed by (instance_id, name), with a second index on
-- (name, value, tenant, instance_id) for the search: two B-trees per row.
-- Only the search reads them, so they are now keyed for it alone, in one
-- B-tree (SQLite stores a WITHOUT ROWID table's rows in its key's own
-- b-tree; on PostgreSQL the heap and the key's index, one index fewer).
--
-- Nothing can find an instance's rows by instance any more, so the store
-- deletes them by their keys: the instance row keeps, in `search_keys`,
-- the [name, value] pairs it last wrote for it (a JSON array; NULL when
-- none), and every path that rewrites or deletes an instance's variables
-- (a step that changed them, a step that deletes the instance, the
-- sweeper) reads them from there. No foreign key either: a cascade would
-- have to find the rows by instance. The copy below keeps every row, and
-- fills `search_keys` from them: on a large store the upgrade takes about
-- as long as writing those rows and each instance row that has any again.
CREATE TABLE instance_vars_0028 (
    name        TEXT NOT NULL,
    value       TEXT NOT NULL,
    tenant      TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    CONSTRAINT instance_vars_key PRIMARY KEY (name, value, tenant, instance_id)
) {{without_rowid}};
INSERT INTO instance_vars_0028 (name, value, tenant, instance_id)
    SELECT name, value, tenant, instance_id FROM instance_vars;
ALTER TABLE instances ADD COLUMN search_keys TEXT;
UPDATE instances SET search_keys = {{search_keys_of_instance}}
    WHERE id IN (SELECT instance_id FROM instance_vars);
DROP TABLE instance_vars;
ALTER TABLE instance_vars_0028 RENAME TO instance_vars;
