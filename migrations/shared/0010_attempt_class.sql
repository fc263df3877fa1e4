-- Issue 15. The error class of a failed attempt, stored with it: a guest's
-- own failure code carries its own class (in its details), which the code
-- alone cannot give back. NULL for a completion, a business error, and the
-- rows written before this migration (readers fall back to the class of a
-- Sutra code).
ALTER TABLE attempts ADD COLUMN class TEXT;
