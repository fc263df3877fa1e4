-- Search by business data (issue 35 item 3).
--
-- A business key per instance, set at its start (the API's `businessKey`,
-- `sutra start --business-key`, or the process's `q:businessKey` variable);
-- partial, so an instance without one maintains nothing more.
ALTER TABLE instances ADD COLUMN business_key TEXT;
CREATE INDEX instances_business_key ON instances (tenant, business_key, id)
    WHERE business_key IS NOT NULL;

-- The instance's top-level scalar variables as text (a string as itself, a
-- number or boolean as its JSON), so `var.NAME=VALUE` is an index lookup,
-- never a scan of snapshots. Rewritten only by a step that changed one of
-- them; values over 256 bytes and names past the first 32 are not kept
-- (docs: README "Search"). Deleted with the instance.
CREATE TABLE instance_vars (
    instance_id TEXT NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    value       TEXT NOT NULL,
    PRIMARY KEY (instance_id, name)
) {{without_rowid}};
-- Equality on name and value (and the tenant, when the caller has one).
CREATE INDEX instance_vars_lookup ON instance_vars (name, value, tenant, instance_id);
