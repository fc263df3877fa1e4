-- Issue 30: outbound HTTP of tasks. Shared: runs as is on SQLite and PostgreSQL.

-- A tenant's egress grant for one task module (the registered task's name):
-- what its attempts may call. JSON (`crate::egress::Grant`), checked against
-- the operator's ceiling when written and again at every request.
CREATE TABLE egress_grants (
    tenant      TEXT    NOT NULL,
    module      TEXT    NOT NULL,
    grant_json  TEXT    NOT NULL,
    updated_at  BIGINT  NOT NULL,
    PRIMARY KEY (tenant, module)
);

-- A tenant's secrets, sealed (XChaCha20-Poly1305, `crate::egress::secrets`):
-- never the value. `key_id` names the key that sealed the row (rotation).
-- The nonce and ciphertext are base64 text.
CREATE TABLE secrets (
    tenant      TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    key_id      TEXT    NOT NULL,
    nonce       TEXT    NOT NULL,
    ciphertext  TEXT    NOT NULL,
    updated_at  BIGINT  NOT NULL,
    PRIMARY KEY (tenant, name)
);

-- The outbound calls of an attempt (JSON, bounded: `crate::egress::calls`):
-- method, scheme, host, port, path without its query, status, bytes, duration,
-- and each denial's code and reason. NULL when it made none.
ALTER TABLE attempts ADD COLUMN calls TEXT;
