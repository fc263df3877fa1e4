//! Bearer keys: who is calling. A tenant key maps to its tenant; the admin
//! key (`SUTRA_ADMIN_KEY`, `--admin-key`) manages tenants.
//!
//! Invariants:
//! - a key is `sutra_<key_id>_<secret>` (16 + 64 hex digits); only
//!   `sha256(key)` is stored, under `key_id`, and compared in constant time;
//!   the secret is shown once, at creation;
//! - the admin key is compared in constant time too (over its sha256, so
//!   its length does not leak);
//! - a missing, malformed or unknown key is one answer: 401 `SUTRA.API.UNAUTHORIZED`;
//! - every request reads its key from the store (nothing is cached), so a
//!   revoked key stops working at once, on every replica.

use super::error::{ApiError, ApiResult};
use super::AppState;
use crate::codes::Code;
use crate::store::tenancy::{ApiKeyRecord, TenancyStore, TenantLimits, TenantRecord};
use crate::store::{StoreError, StoreResult};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    Admin,
    Tenant(String),
}

/// A caller that must be a tenant (tenant routes).
#[derive(Debug, Clone)]
pub struct TenantCaller(pub String);

/// A caller that must be the admin (admin routes).
#[derive(Debug, Clone)]
pub struct AdminCaller;

/// A caller of `/metrics`: the admin key or the metrics token
/// (`sutra.metrics.token`), never a tenant key.
#[derive(Debug, Clone)]
pub struct MetricsCaller;

/// Whether `given` is `secret`, in constant time (over sha256, so the
/// length does not leak).
fn same_secret(given: &str, secret: &str) -> bool {
    bool::from(sha256(given.as_bytes()).ct_eq(&sha256(secret.as_bytes())))
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// `sha256(key)`, hex.
pub fn hash_key(key: &str) -> String {
    hex::encode(sha256(key.as_bytes()))
}

/// A fresh key: (key_id, whole key).
pub fn new_key() -> (String, String) {
    let id: [u8; 8] = rand::random();
    let secret: [u8; 32] = rand::random();
    let key_id = hex::encode(id);
    let key = format!("sutra_{key_id}_{}", hex::encode(secret));
    (key_id, key)
}

/// The key id of a well-formed key.
fn key_id_of(key: &str) -> Option<&str> {
    let rest = key.strip_prefix("sutra_")?;
    let (id, secret) = rest.split_once('_')?;
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(id, 16) && hex(secret, 64)).then_some(id)
}

/// A tenant name: 1 to 63 of `a-z 0-9 - _`, starting with a letter or digit.
pub fn valid_tenant_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
}

/// Create a tenant and its first key; answers (tenant, key). The key is
/// never stored: print it now.
pub async fn create_tenant<S: TenancyStore>(
    store: &S,
    name: &str,
    limits: TenantLimits,
    now_ms: i64,
) -> StoreResult<(TenantRecord, String)> {
    if !valid_tenant_name(name) {
        return Err(StoreError::Other(format!(
            "invalid tenant name {name:?}: use 1 to 63 of a-z, 0-9, - and _ (starting with a letter or digit)"
        )));
    }
    let tenant = TenantRecord {
        name: name.to_string(),
        created_at: now_ms,
        limits,
    };
    store.create_tenant(&tenant).await?;
    let key = add_key(store, name, now_ms).await?;
    Ok((tenant, key))
}

/// A fresh key of `tenant`: (the record to store, the whole key to show once).
fn fresh_key(tenant: &str, now_ms: i64) -> (ApiKeyRecord, String) {
    let (key_id, key) = new_key();
    let rec = ApiKeyRecord {
        key_id,
        tenant: tenant.to_string(),
        key_hash: hash_key(&key),
        created_at: now_ms,
    };
    (rec, key)
}

/// Add a key to an existing tenant; answers the key.
pub async fn add_key<S: TenancyStore>(store: &S, tenant: &str, now_ms: i64) -> StoreResult<String> {
    let (rec, key) = fresh_key(tenant, now_ms);
    store.insert_api_key(&rec).await?;
    Ok(key)
}

/// Rotate a tenant's keys: a new key, and every other key revoked in the
/// same transaction (a grace period is two calls: add a key, move the
/// clients, then revoke the old one). Answers (the new key, the revoked ids).
pub async fn rotate_keys<S: TenancyStore>(
    store: &S,
    tenant: &str,
    now_ms: i64,
) -> StoreResult<(String, Vec<String>)> {
    let (rec, key) = fresh_key(tenant, now_ms);
    let revoked = store.replace_api_keys(&rec).await?;
    Ok((key, revoked))
}

/// The public prefix of a key with id `key_id` (what a key listing shows).
pub fn key_prefix(key_id: &str) -> String {
    format!("sutra_{key_id}_")
}

/// The key id of a whole key, for people who hold the key and want its id.
pub fn key_id_of_key(key: &str) -> Option<&str> {
    key_id_of(key)
}

/// Who a bearer key is, if anyone.
pub async fn authenticate(state: &AppState, key: &str) -> ApiResult<Option<Principal>> {
    if let Some(admin) = &state.config.admin_key {
        if same_secret(key, admin) {
            return Ok(Some(Principal::Admin));
        }
    }
    let Some(key_id) = key_id_of(key) else {
        return Ok(None);
    };
    let Some(rec) = state.runtime.store().get_api_key(key_id).await? else {
        return Ok(None);
    };
    let given = hash_key(key);
    Ok(bool::from(given.as_bytes().ct_eq(rec.key_hash.as_bytes()))
        .then_some(Principal::Tenant(rec.tenant)))
}

fn bearer(parts: &Parts) -> Option<&str> {
    let value = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
        .filter(|t| !t.is_empty())
}

pub(super) async fn principal(parts: &Parts, state: &Arc<AppState>) -> ApiResult<Principal> {
    let key = bearer(parts).ok_or_else(ApiError::unauthorized)?;
    authenticate(state, key)
        .await?
        .ok_or_else(ApiError::unauthorized)
}

impl FromRequestParts<Arc<AppState>> for TenantCaller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        match principal(parts, state).await? {
            Principal::Tenant(t) => Ok(TenantCaller(t)),
            Principal::Admin => Err(ApiError::new(
                Code::ApiForbidden,
                "the admin key manages tenants; use a tenant's key for this route",
            )),
        }
    }
}

impl FromRequestParts<Arc<AppState>> for AdminCaller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        match principal(parts, state).await? {
            Principal::Admin => Ok(AdminCaller),
            Principal::Tenant(_) => Err(ApiError::new(
                Code::ApiForbidden,
                "this route needs the admin key",
            )),
        }
    }
}

impl FromRequestParts<Arc<AppState>> for MetricsCaller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let key = bearer(parts).ok_or_else(|| {
            ApiError::new(
                Code::ApiUnauthorized,
                "/metrics needs the admin key or the metrics token (sutra.metrics.token) \
                 as a bearer key",
            )
        })?;
        if let Some(token) = &state.config.metrics_token {
            if same_secret(key, token) {
                return Ok(MetricsCaller);
            }
        }
        match authenticate(state, key).await? {
            Some(Principal::Admin) => Ok(MetricsCaller),
            Some(Principal::Tenant(_)) => Err(ApiError::new(
                Code::ApiForbidden,
                "/metrics needs the admin key or the metrics token, not a tenant's key",
            )),
            None => Err(ApiError::unauthorized()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_well_formed_and_distinct() {
        let (id, key) = new_key();
        assert_eq!(key_id_of(&key), Some(id.as_str()));
        let (_, other) = new_key();
        assert_ne!(key, other);
        assert_ne!(hash_key(&key), hash_key(&other));
        for bad in [
            "",
            "sutra_",
            "sutra_abc_def",
            "bearer",
            &key[..key.len() - 1],
            &format!("{key}0"),
        ] {
            assert_eq!(key_id_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn tenant_names_are_checked() {
        for ok in ["acme", "a", "team-1", "x_y", "0day"] {
            assert!(valid_tenant_name(ok), "{ok}");
        }
        for bad in ["", "Acme", "-x", "a b", "a/b", &"x".repeat(64), "é"] {
            assert!(!valid_tenant_name(bad), "{bad}");
        }
    }
}
