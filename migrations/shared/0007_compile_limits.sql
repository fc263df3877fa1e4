-- Issue 17: a tenant's compile limits, beside its module-size quota. NULL
-- keeps the server's (`sutra.sandbox.compile.max-functions`, and
-- `.cpu-time` / `.wall-time`, both lowered to `compile_ms`).
ALTER TABLE tenants ADD COLUMN max_module_functions BIGINT;
ALTER TABLE tenants ADD COLUMN compile_ms BIGINT;
