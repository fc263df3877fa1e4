-- Issue 31: a tenant's named connections for HTTP tasks (`PUT /v1/connections/{name}`).
-- Shared: runs as is on SQLite and PostgreSQL.
--
-- `spec_json` is what may be shown (`crate::runtime::connections::ConnectionSpec`):
-- the endpoint base, the authorization type, a header name, a user name, an
-- OAuth token URL, client id and scope. The credential itself (an API key, a
-- password, a bearer token, an OAuth client secret) is never here: it is a
-- sealed row of `secrets` named `connection:NAME` (a name no secret can take),
-- so it is sealed, rotated and deleted as the egress secrets are.
CREATE TABLE connections (
    tenant      TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    spec_json   TEXT    NOT NULL,
    updated_at  BIGINT  NOT NULL,
    PRIMARY KEY (tenant, name)
);
