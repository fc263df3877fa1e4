-- next_due reads the earliest unclaimed timed park from the front of this
-- index (the claimed ones, at the front of parks_due, are not walked past).
-- Keep in step with migrations/postgres/0003_next_due.sql.
CREATE INDEX parks_unclaimed_due ON parks (due_at) WHERE due_at IS NOT NULL AND claimed_until IS NULL;
