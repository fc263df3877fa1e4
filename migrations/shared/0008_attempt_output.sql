-- What the guest wrote during an attempt, kept with its attempt row and
-- bounded by the runtime before it is written (src/runtime/output.rs): the
-- tail of its stderr, and its last `host.log` lines as a JSON array of
-- {"level", "message"}. NULL when it wrote nothing.
ALTER TABLE attempts ADD COLUMN stderr TEXT;
ALTER TABLE attempts ADD COLUMN logs TEXT;
