//! Named connections of HTTP tasks (issue 31): per tenant, an endpoint base
//! and an authorization (API key, basic, bearer, OAuth 2 client
//! credentials), and the OAuth tokens the host fetched for them.
//!
//! Invariants:
//! - a connection's credential (the key, password, token or client secret)
//!   is sealed with the [`Keyring`](crate::egress::secrets::Keyring) as the
//!   secret `connection:NAME` (a name no secret can take) and opened only
//!   into an attempt's request: no answer, log or attempt row holds it
//!   ([`ConnectionSpec`] is what may be shown);
//! - an OAuth token is cached per (tenant, connection, its `updated_at`)
//!   until `expires_in` has passed on the runtime's clock (less a margin):
//!   a changed connection never reuses an old token.

use super::{Runtime, RuntimeError, RuntimeResult};
use crate::codes::Code;
use crate::store::connections::ConnectionRecord;
use crate::store::Store;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Mutex;

/// The most bytes of a connection's credential.
pub const MAX_CREDENTIAL_BYTES: usize = 8 * 1024;

/// What a connection is, as it may be shown (no credential).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ConnectionSpec {
    /// The base a relative `ApiEndpoint` (or `q:http path`) is joined to,
    /// e.g. `https://api.example.com/v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    pub authorization: Authorization,
}

/// How a connection authorizes its requests (the public part).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Authorization {
    /// The credential as the value of the header `header`.
    ApiKey { header: String },
    /// `Authorization: Basic` of `username` and the credential (the password).
    Basic { username: String },
    /// `Authorization: Bearer` and the credential (the token).
    #[default]
    Bearer,
    /// A token fetched from `token_url` with `client_id` and the credential
    /// (the client secret), sent as `Authorization: Bearer`.
    Oauth2ClientCredentials {
        token_url: String,
        client_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<String>,
    },
}

impl Authorization {
    /// The request header this authorization sets (redacted in records).
    pub fn header(&self) -> &str {
        match self {
            Authorization::ApiKey { header } => header,
            _ => "authorization",
        }
    }
}

/// The body of `PUT /v1/connections/{name}`: the spec and its credential.
#[derive(Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectionInput {
    #[serde(default)]
    pub endpoint: Option<String>,
    pub authorization: Authorization,
    /// The API key, password, bearer token or OAuth client secret; write-only.
    pub credential: String,
}

impl std::fmt::Debug for ConnectionInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionInput")
            .field("endpoint", &self.endpoint)
            .field("authorization", &self.authorization)
            .field("credential", &"[redacted]")
            .finish()
    }
}

/// A connection read for an attempt: its spec and its opened credential.
pub(crate) struct Opened {
    pub spec: ConnectionSpec,
    pub credential: String,
    pub updated_at: i64,
}

/// Why a connection could not be used: the code and the message.
pub(crate) type CredentialError = (Code, String);

/// The secret row holding a connection's credential.
pub fn secret_name(connection: &str) -> String {
    format!("connection:{connection}")
}

/// Which token: (tenant, connection, the connection's `updated_at`).
pub(crate) type TokenKey = (String, String, i64);

/// Cached OAuth tokens: key → (token, expiry).
#[derive(Default)]
pub(crate) struct Tokens {
    map: Mutex<HashMap<TokenKey, (String, DateTime<Utc>)>>,
}

impl Tokens {
    pub(crate) fn get(&self, key: &TokenKey, now: DateTime<Utc>) -> Option<String> {
        let m = self.map.lock().ok()?;
        m.get(key)
            .filter(|(_, exp)| *exp > now)
            .map(|(t, _)| t.clone())
    }

    pub(crate) fn put(&self, key: TokenKey, token: String, exp: DateTime<Utc>) {
        if let Ok(mut m) = self.map.lock() {
            m.retain(|_, (_, e)| *e > exp - chrono::Duration::days(1));
            m.insert(key, (token, exp));
        }
    }

    pub(crate) fn forget(&self, key: &TokenKey) {
        if let Ok(mut m) = self.map.lock() {
            m.remove(key);
        }
    }
}

fn check_spec(spec: &ConnectionSpec) -> Result<(), String> {
    let url_ok = |what: &str, u: &str| -> Result<(), String> {
        let parsed = url::Url::parse(u).map_err(|e| format!("{what} `{u}`: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(format!("{what} `{u}` is not an http(s) URL"));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(format!(
                "{what} holds no credentials (use the authorization)"
            ));
        }
        Ok(())
    };
    if let Some(e) = &spec.endpoint {
        url_ok("endpoint", e)?;
    }
    match &spec.authorization {
        Authorization::ApiKey { header } => {
            if http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                return Err(format!("`{header}` is not a header name"));
            }
        }
        Authorization::Basic { username } => {
            if username.contains(':') || username.is_empty() {
                return Err("a basic username is not empty and holds no `:`".into());
            }
        }
        Authorization::Bearer => {}
        Authorization::Oauth2ClientCredentials {
            token_url,
            client_id,
            ..
        } => {
            url_ok("token_url", token_url)?;
            if client_id.is_empty() {
                return Err("client_id is empty".into());
            }
        }
    }
    Ok(())
}

fn spec_of(r: &ConnectionRecord) -> Option<ConnectionSpec> {
    serde_json::from_str(&r.spec_json).ok()
}

impl<S: Store> Runtime<S> {
    /// Create or replace a connection: its credential sealed first, then its spec.
    pub async fn put_connection(
        &self,
        tenant: &str,
        name: &str,
        input: ConnectionInput,
    ) -> RuntimeResult<ConnectionSpec> {
        if !crate::egress::policy::valid_secret_name(name) {
            return Err(RuntimeError::new(
                Code::ApiMalformed,
                "a connection name is 1 to 64 of letters, digits, `_`, `-`, `.`",
            ));
        }
        let spec = ConnectionSpec {
            endpoint: input.endpoint,
            authorization: input.authorization,
        };
        check_spec(&spec).map_err(|m| {
            RuntimeError::new(Code::ApiMalformed, format!("connection `{name}`: {m}"))
        })?;
        if input.credential.is_empty() || input.credential.len() > MAX_CREDENTIAL_BYTES {
            return Err(RuntimeError::new(
                Code::ApiMalformed,
                format!("a connection's credential is 1 to {MAX_CREDENTIAL_BYTES} bytes"),
            ));
        }
        self.seal_secret(tenant, &secret_name(name), &input.credential)
            .await?;
        let record = ConnectionRecord {
            tenant: tenant.to_string(),
            name: name.to_string(),
            spec_json: serde_json::to_string(&spec).unwrap_or_default(),
            updated_at: self.inner.clock.now().timestamp_millis(),
        };
        self.inner.store.put_connection(&record).await?;
        Ok(spec)
    }

    /// A connection's spec and when it was last set.
    pub async fn connection(
        &self,
        tenant: &str,
        name: &str,
    ) -> RuntimeResult<Option<(ConnectionSpec, i64)>> {
        let r = self.inner.store.get_connection(tenant, name).await?;
        Ok(r.and_then(|r| spec_of(&r).map(|s| (s, r.updated_at))))
    }

    /// The tenant's connections (name, spec, updated_at), by name.
    pub async fn connections(
        &self,
        tenant: &str,
    ) -> RuntimeResult<Vec<(String, ConnectionSpec, i64)>> {
        let rows = self.inner.store.list_connections(tenant).await?;
        Ok(rows
            .into_iter()
            .filter_map(|r| spec_of(&r).map(|s| (r.name.clone(), s, r.updated_at)))
            .collect())
    }

    /// Delete a connection and its credential; whether it existed.
    pub async fn delete_connection(&self, tenant: &str, name: &str) -> RuntimeResult<bool> {
        let existed = self.inner.store.delete_connection(tenant, name).await?;
        self.inner
            .store
            .delete_secret(tenant, &secret_name(name))
            .await?;
        Ok(existed)
    }

    /// A connection opened for an attempt, or the `Credential.*` failure.
    pub(crate) async fn open_connection(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Opened, CredentialError> {
        let not_found = || {
            (
                Code::CredentialNotFound,
                format!("the task names the connection `{name}`, which the tenant does not have (PUT /v1/connections/{name})"),
            )
        };
        let record = match self.inner.store.get_connection(tenant, name).await {
            Ok(Some(r)) => r,
            Ok(None) => return Err(not_found()),
            Err(e) => {
                return Err((
                    Code::CredentialUnavailable,
                    format!("connection `{name}` cannot be read: {e}"),
                ))
            }
        };
        let spec = spec_of(&record).ok_or_else(|| {
            (
                Code::CredentialUnavailable,
                format!("connection `{name}` is malformed in the store"),
            )
        })?;
        match self.open_secret(tenant, &secret_name(name)).await {
            Ok(Some(credential)) => Ok(Opened {
                spec,
                credential,
                updated_at: record.updated_at,
            }),
            Ok(None) => Err(not_found()),
            Err(e) => Err((
                Code::CredentialUnavailable,
                format!(
                    "the credential of connection `{name}` cannot be opened: {}",
                    e.message
                ),
            )),
        }
    }
}
