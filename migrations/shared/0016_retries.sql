-- The retries of an instance (issue 35 item 6): a FAILED instance links to
-- the instances retried from it, and the console counts the FAILED that a
-- retry took over apart from those that still need attention. Partial: only
-- retries carry `retry_of`, so every other insert maintains nothing more.
CREATE INDEX instances_retry_of ON instances (retry_of) WHERE retry_of IS NOT NULL;
