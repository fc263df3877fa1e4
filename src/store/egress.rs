//! Egress storage (issue 30, migration 0011): a tenant's grants per task
//! module and its sealed secrets. A supertrait of [`super::Store`]; the SQL
//! is written once for both backends.
//!
//! Invariants:
//! - a secret is stored sealed only ([`SealedSecret`]); no query returns a
//!   value, and the listing returns names and times only;
//! - a re-seal (key rotation) replaces a row only if it still holds the
//!   ciphertext that was read, so a concurrent `PUT` is never overwritten.

use super::queries::{Column, Conn, RowsAffected, SqlBackend};
use super::StoreResult;
use sqlx::{ColumnIndex, Database, Encode, Executor, IntoArguments, Type};
use std::future::Future;

/// A tenant's grant for one module, as stored (the JSON is `egress::Grant`).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct GrantRecord {
    pub tenant: String,
    pub module: String,
    pub grant_json: String,
    pub updated_at: i64,
}

/// A secret as stored: sealed (nonce and ciphertext in base64).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SealedSecret {
    pub tenant: String,
    pub name: String,
    pub key_id: String,
    pub nonce: String,
    pub ciphertext: String,
    pub updated_at: i64,
}

pub trait EgressStore: Send + Sync {
    /// Inserts or replaces the grant of (tenant, module).
    fn put_grant(&self, g: &GrantRecord) -> impl Future<Output = StoreResult<()>> + Send;
    fn get_grant(
        &self,
        tenant: &str,
        module: &str,
    ) -> impl Future<Output = StoreResult<Option<GrantRecord>>> + Send;
    fn list_grants(
        &self,
        tenant: &str,
    ) -> impl Future<Output = StoreResult<Vec<GrantRecord>>> + Send;
    /// Whether a grant was deleted.
    fn delete_grant(
        &self,
        tenant: &str,
        module: &str,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Inserts or replaces a sealed secret.
    fn put_secret(&self, s: &SealedSecret) -> impl Future<Output = StoreResult<()>> + Send;
    fn get_secret(
        &self,
        tenant: &str,
        name: &str,
    ) -> impl Future<Output = StoreResult<Option<SealedSecret>>> + Send;
    /// (name, updated_at) of a tenant's secrets, by name.
    fn list_secrets(
        &self,
        tenant: &str,
    ) -> impl Future<Output = StoreResult<Vec<(String, i64)>>> + Send;
    fn delete_secret(
        &self,
        tenant: &str,
        name: &str,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Up to `limit` secrets (every tenant's) not sealed by `key_id`.
    fn stale_secrets(
        &self,
        key_id: &str,
        limit: i64,
    ) -> impl Future<Output = StoreResult<Vec<SealedSecret>>> + Send;
    /// Replace `old` by `new` (same tenant and name) if the row still holds
    /// `old`'s ciphertext; whether it did.
    fn reseal_secret(
        &self,
        old: &SealedSecret,
        new: &SealedSecret,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
}

const SECRET_COLUMNS: &str = "tenant, name, key_id, nonce, ciphertext, updated_at";

impl<B> EgressStore for B
where
    B: SqlBackend,
    for<'c> &'c mut Conn<B>: Executor<'c, Database = B::Db>,
    for<'q> <B::Db as Database>::Arguments<'q>: IntoArguments<'q, B::Db>,
    i64: Column<B::Db>,
    String: Column<B::Db>,
    for<'s> &'s str: Type<B::Db> + Encode<'s, B::Db> + ColumnIndex<<B::Db as Database>::Row>,
    usize: ColumnIndex<<B::Db as Database>::Row>,
{
    async fn put_grant(&self, g: &GrantRecord) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO egress_grants (tenant, module, grant_json, updated_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (tenant, module) DO UPDATE SET grant_json = excluded.grant_json, \
             updated_at = excluded.updated_at",
        )
        .bind(g.tenant.as_str())
        .bind(g.module.as_str())
        .bind(g.grant_json.as_str())
        .bind(g.updated_at)
        .execute(self.writer())
        .await?;
        Ok(())
    }

    async fn get_grant(&self, tenant: &str, module: &str) -> StoreResult<Option<GrantRecord>> {
        Ok(sqlx::query_as(
            "SELECT tenant, module, grant_json, updated_at FROM egress_grants \
             WHERE tenant = $1 AND module = $2",
        )
        .bind(tenant)
        .bind(module)
        .fetch_optional(self.reads())
        .await?)
    }

    async fn list_grants(&self, tenant: &str) -> StoreResult<Vec<GrantRecord>> {
        Ok(sqlx::query_as(
            "SELECT tenant, module, grant_json, updated_at FROM egress_grants \
             WHERE tenant = $1 ORDER BY module",
        )
        .bind(tenant)
        .fetch_all(self.reads())
        .await?)
    }

    async fn delete_grant(&self, tenant: &str, module: &str) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM egress_grants WHERE tenant = $1 AND module = $2")
            .bind(tenant)
            .bind(module)
            .execute(self.writer())
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn put_secret(&self, s: &SealedSecret) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO secrets (tenant, name, key_id, nonce, ciphertext, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant, name) DO UPDATE SET \
             key_id = excluded.key_id, nonce = excluded.nonce, ciphertext = excluded.ciphertext, \
             updated_at = excluded.updated_at",
        )
        .bind(s.tenant.as_str())
        .bind(s.name.as_str())
        .bind(s.key_id.as_str())
        .bind(s.nonce.as_str())
        .bind(s.ciphertext.as_str())
        .bind(s.updated_at)
        .execute(self.writer())
        .await?;
        Ok(())
    }

    async fn get_secret(&self, tenant: &str, name: &str) -> StoreResult<Option<SealedSecret>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {SECRET_COLUMNS} FROM secrets WHERE tenant = $1 AND name = $2"
        ))
        .bind(tenant)
        .bind(name)
        .fetch_optional(self.reads())
        .await?)
    }

    async fn list_secrets(&self, tenant: &str) -> StoreResult<Vec<(String, i64)>> {
        Ok(
            // A connection's credential (`connection:NAME`) is listed with its connection.
            sqlx::query_as(
                "SELECT name, updated_at FROM secrets WHERE tenant = $1 \
                 AND name NOT LIKE 'connection:%' ORDER BY name",
            )
            .bind(tenant)
            .fetch_all(self.reads())
            .await?,
        )
    }

    async fn delete_secret(&self, tenant: &str, name: &str) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM secrets WHERE tenant = $1 AND name = $2")
            .bind(tenant)
            .bind(name)
            .execute(self.writer())
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn stale_secrets(&self, key_id: &str, limit: i64) -> StoreResult<Vec<SealedSecret>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {SECRET_COLUMNS} FROM secrets WHERE key_id <> $1 ORDER BY tenant, name LIMIT $2"
        ))
        .bind(key_id)
        .bind(limit.max(0))
        .fetch_all(self.reads())
        .await?)
    }

    async fn reseal_secret(&self, old: &SealedSecret, new: &SealedSecret) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE secrets SET key_id = $1, nonce = $2, ciphertext = $3 \
             WHERE tenant = $4 AND name = $5 AND ciphertext = $6",
        )
        .bind(new.key_id.as_str())
        .bind(new.nonce.as_str())
        .bind(new.ciphertext.as_str())
        .bind(old.tenant.as_str())
        .bind(old.name.as_str())
        .bind(old.ciphertext.as_str())
        .execute(self.writer())
        .await?;
        Ok(done.rows_affected() > 0)
    }
}

impl EgressStore for super::AnyStore {
    async fn put_grant(&self, g: &GrantRecord) -> StoreResult<()> {
        delegate!(self, s => s.put_grant(g).await)
    }
    async fn get_grant(&self, tenant: &str, module: &str) -> StoreResult<Option<GrantRecord>> {
        delegate!(self, s => s.get_grant(tenant, module).await)
    }
    async fn list_grants(&self, tenant: &str) -> StoreResult<Vec<GrantRecord>> {
        delegate!(self, s => s.list_grants(tenant).await)
    }
    async fn delete_grant(&self, tenant: &str, module: &str) -> StoreResult<bool> {
        delegate!(self, s => s.delete_grant(tenant, module).await)
    }
    async fn put_secret(&self, x: &SealedSecret) -> StoreResult<()> {
        delegate!(self, s => s.put_secret(x).await)
    }
    async fn get_secret(&self, tenant: &str, name: &str) -> StoreResult<Option<SealedSecret>> {
        delegate!(self, s => s.get_secret(tenant, name).await)
    }
    async fn list_secrets(&self, tenant: &str) -> StoreResult<Vec<(String, i64)>> {
        delegate!(self, s => s.list_secrets(tenant).await)
    }
    async fn delete_secret(&self, tenant: &str, name: &str) -> StoreResult<bool> {
        delegate!(self, s => s.delete_secret(tenant, name).await)
    }
    async fn stale_secrets(&self, key_id: &str, limit: i64) -> StoreResult<Vec<SealedSecret>> {
        delegate!(self, s => s.stale_secrets(key_id, limit).await)
    }
    async fn reseal_secret(&self, old: &SealedSecret, new: &SealedSecret) -> StoreResult<bool> {
        delegate!(self, s => s.reseal_secret(old, new).await)
    }
}
