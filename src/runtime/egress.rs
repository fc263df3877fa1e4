//! Task egress in the runtime (issue 30): a tenant's grants per task module
//! and its secrets, the deploy-time check, and the per-attempt session.
//!
//! Invariants:
//! - a module importing wasi:http deploys only when its tenant holds a
//!   grant for it (`SUTRA.TASK.MODULE_INVALID` otherwise, naming the import
//!   and the missing grant); a grant is checked against the operator's
//!   ceiling when it is written, and the effective policy is recomputed
//!   from the stored grant at every attempt (a revoked grant is met by the
//!   next attempt);
//! - a secret's value is decrypted only into an attempt's session, and only
//!   for the secrets the module's grant names; it is never answered back.

use super::{Runtime, RuntimeError, RuntimeResult};
use crate::codes::Code;
use crate::egress::secrets::{Keyring, Sealed};
use crate::egress::{Grant, Session};
use crate::sandbox::LoadedComponent;
use crate::store::egress::{GrantRecord, SealedSecret};
use crate::store::Store;
use base64::Engine;
use std::collections::HashMap;
use std::sync::Arc;

/// The most bytes of one secret's value.
pub const MAX_SECRET_BYTES: usize = 8 * 1024;

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

fn sealed_of(s: &SealedSecret) -> Option<Sealed> {
    Some(Sealed {
        key_id: s.key_id.clone(),
        nonce: b64().decode(&s.nonce).ok()?,
        ciphertext: b64().decode(&s.ciphertext).ok()?,
    })
}

impl<S: Store> Runtime<S> {
    fn keyring(&self) -> RuntimeResult<&Keyring> {
        self.inner.keyring.as_deref().ok_or_else(|| {
            RuntimeError::new(
                Code::ConfigInvalid,
                "secrets are not available: the server has no SUTRA_SECRET_KEY (sutra.secret.key)",
            )
        })
    }

    /// Set (create or replace) a module's grant, checked against the ceiling.
    pub async fn put_grant(
        &self,
        tenant: &str,
        module: &str,
        grant: &Grant,
    ) -> RuntimeResult<GrantRecord> {
        grant.check(&self.inner.egress.ceiling).map_err(|m| {
            RuntimeError::new(Code::ApiMalformed, format!("grant for `{module}`: {m}"))
        })?;
        let record = GrantRecord {
            tenant: tenant.to_string(),
            module: module.to_string(),
            grant_json: serde_json::to_string(grant).unwrap_or_default(),
            updated_at: self.inner.clock.now().timestamp_millis(),
        };
        self.inner.store.put_grant(&record).await?;
        Ok(record)
    }

    /// A module's stored grant (parsed).
    pub async fn grant_of(&self, tenant: &str, module: &str) -> RuntimeResult<Option<Grant>> {
        let Some(r) = self.inner.store.get_grant(tenant, module).await? else {
            return Ok(None);
        };
        Ok(serde_json::from_str(&r.grant_json).ok())
    }

    /// Refuse a deploy whose module imports wasi:http without a grant.
    pub(crate) async fn check_egress_grants(
        &self,
        tenant: &str,
        loaded: impl Iterator<Item = (&String, &LoadedComponent)>,
    ) -> RuntimeResult<()> {
        for (name, c) in loaded {
            let Some(import) = c.egress_import() else {
                continue;
            };
            let granted = self
                .grant_of(tenant, name)
                .await?
                .is_some_and(|g| !g.allow.is_empty());
            if !granted {
                return Err(RuntimeError::new(
                    Code::TaskModuleInvalid,
                    format!(
                        "module `{name}` imports `{import}`, which needs an egress grant for `{name}`: \
                         the tenant has none (PUT /v1/egress/{name}, or --allow-host for a local run)"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The egress session of one attempt of `module` (`None` when the
    /// component makes no outbound call).
    pub(crate) async fn session_for(
        &self,
        tenant: &str,
        module: &str,
        component: &LoadedComponent,
        idempotency_key: &str,
    ) -> Option<Arc<Session>> {
        component.egress_import()?;
        Some(self.session_of(tenant, module, idempotency_key).await)
    }

    /// The egress session of one attempt under `module`'s grant (an HTTP
    /// task's is `model::HTTP_TASK`'s).
    pub(crate) async fn session_of(
        &self,
        tenant: &str,
        module: &str,
        idempotency_key: &str,
    ) -> Arc<Session> {
        let grant = match self.grant_of(tenant, module).await {
            Ok(g) => g.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(%tenant, %module, error = %e, "cannot read the egress grant: every request of this attempt is denied");
                Grant::default()
            }
        };
        let policy = grant.policy(&self.inner.egress.ceiling);
        let mut secrets = HashMap::new();
        if let Some(ring) = self.inner.keyring.as_deref() {
            for name in grant.secret_names() {
                let Ok(Some(row)) = self.inner.store.get_secret(tenant, &name).await else {
                    continue;
                };
                match sealed_of(&row).map(|s| ring.open(tenant, &name, &s)) {
                    Some(Ok(v)) => {
                        if let Ok(v) = String::from_utf8(v) {
                            secrets.insert(name, v);
                        }
                    }
                    Some(Err(e)) => tracing::warn!(%tenant, secret = %name, "{e}"),
                    None => tracing::warn!(%tenant, secret = %name, "a stored secret is malformed"),
                }
            }
        }
        Arc::new(Session::new(
            self.inner.egress.clone(),
            policy,
            secrets,
            Some(idempotency_key.to_string()),
        ))
    }

    /// Seal and store a secret (its value is never answered back).
    pub async fn put_secret(&self, tenant: &str, name: &str, value: &str) -> RuntimeResult<()> {
        if !crate::egress::policy::valid_secret_name(name) {
            return Err(RuntimeError::new(
                Code::ApiMalformed,
                "a secret name is 1 to 64 of letters, digits, `_`, `-`, `.`",
            ));
        }
        if value.is_empty() || value.len() > MAX_SECRET_BYTES {
            return Err(RuntimeError::new(
                Code::ApiMalformed,
                format!("a secret's value is 1 to {MAX_SECRET_BYTES} bytes"),
            ));
        }
        self.seal_secret(tenant, name, value).await
    }

    /// Seal `value` and store it as the secret `name` (no name check: a
    /// connection's credential is `connection:NAME`, a name no secret takes).
    pub(crate) async fn seal_secret(
        &self,
        tenant: &str,
        name: &str,
        value: &str,
    ) -> RuntimeResult<()> {
        let sealed = self
            .keyring()?
            .seal(tenant, name, value.as_bytes())
            .map_err(|m| RuntimeError::new(Code::ApiInternal, m))?;
        self.inner
            .store
            .put_secret(&SealedSecret {
                tenant: tenant.to_string(),
                name: name.to_string(),
                key_id: sealed.key_id,
                nonce: b64().encode(&sealed.nonce),
                ciphertext: b64().encode(&sealed.ciphertext),
                updated_at: self.inner.clock.now().timestamp_millis(),
            })
            .await?;
        Ok(())
    }

    /// The value of the secret `name`, opened: `Ok(None)` when there is none,
    /// `Err` when it cannot be opened (no keyring, a key no longer configured).
    pub(crate) async fn open_secret(
        &self,
        tenant: &str,
        name: &str,
    ) -> RuntimeResult<Option<String>> {
        let Some(row) = self.inner.store.get_secret(tenant, name).await? else {
            return Ok(None);
        };
        let ring = self.keyring()?;
        let value = sealed_of(&row)
            .ok_or_else(|| "a stored secret is malformed".to_string())
            .and_then(|s| ring.open(tenant, name, &s))
            .and_then(|v| String::from_utf8(v).map_err(|_| "not UTF-8".to_string()))
            .map_err(|m| RuntimeError::new(Code::ApiInternal, m))?;
        Ok(Some(value))
    }

    /// Re-seal every secret sealed by a previous key under the current one
    /// (rotation); how many were re-sealed. Reads work throughout.
    pub async fn reseal_secrets(&self) -> RuntimeResult<u64> {
        let Some(ring) = self.inner.keyring.as_deref() else {
            return Ok(0);
        };
        let mut done = 0;
        loop {
            let stale = self
                .inner
                .store
                .stale_secrets(ring.current_id(), 100)
                .await?;
            if stale.is_empty() {
                return Ok(done);
            }
            let mut progressed = false;
            for row in stale {
                let Some(value) =
                    sealed_of(&row).and_then(|s| ring.open(&row.tenant, &row.name, &s).ok())
                else {
                    tracing::warn!(tenant = %row.tenant, secret = %row.name, "cannot open a secret to re-seal it (its key is not configured)");
                    continue;
                };
                let fresh = ring
                    .seal(&row.tenant, &row.name, &value)
                    .map_err(|m| RuntimeError::new(Code::ApiInternal, m))?;
                let new = SealedSecret {
                    key_id: fresh.key_id,
                    nonce: b64().encode(&fresh.nonce),
                    ciphertext: b64().encode(&fresh.ciphertext),
                    ..row.clone()
                };
                if self.inner.store.reseal_secret(&row, &new).await? {
                    done += 1;
                    progressed = true;
                }
            }
            if !progressed {
                return Ok(done);
            }
        }
    }
}
