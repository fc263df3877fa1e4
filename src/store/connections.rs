//! Connection storage (issue 31, migration 0017): a tenant's named
//! connections for HTTP tasks. A supertrait of [`super::Store`]; the SQL is
//! written once for both backends.
//!
//! Invariant: a row holds what may be shown only (`spec_json`: no
//! credential); the credential is a sealed row of `secrets` named
//! `connection:NAME` (`runtime::connections`), written before this row and
//! deleted with it.

use super::queries::{Column, Conn, RowsAffected, SqlBackend};
use super::StoreResult;
use sqlx::{ColumnIndex, Database, Encode, Executor, IntoArguments, Type};
use std::future::Future;

/// A connection as stored (the JSON is `runtime::connections::ConnectionSpec`).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ConnectionRecord {
    pub tenant: String,
    pub name: String,
    pub spec_json: String,
    pub updated_at: i64,
}

pub trait ConnectionStore: Send + Sync {
    /// Inserts or replaces the connection (tenant, name).
    fn put_connection(&self, c: &ConnectionRecord) -> impl Future<Output = StoreResult<()>> + Send;
    fn get_connection(
        &self,
        tenant: &str,
        name: &str,
    ) -> impl Future<Output = StoreResult<Option<ConnectionRecord>>> + Send;
    fn list_connections(
        &self,
        tenant: &str,
    ) -> impl Future<Output = StoreResult<Vec<ConnectionRecord>>> + Send;
    /// Whether a connection was deleted.
    fn delete_connection(
        &self,
        tenant: &str,
        name: &str,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
}

const COLUMNS: &str = "tenant, name, spec_json, updated_at";

impl<B> ConnectionStore for B
where
    B: SqlBackend,
    for<'c> &'c mut Conn<B>: Executor<'c, Database = B::Db>,
    for<'q> <B::Db as Database>::Arguments<'q>: IntoArguments<'q, B::Db>,
    i64: Column<B::Db>,
    String: Column<B::Db>,
    for<'s> &'s str: Type<B::Db> + Encode<'s, B::Db> + ColumnIndex<<B::Db as Database>::Row>,
    usize: ColumnIndex<<B::Db as Database>::Row>,
{
    async fn put_connection(&self, c: &ConnectionRecord) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO connections (tenant, name, spec_json, updated_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (tenant, name) DO UPDATE SET spec_json = excluded.spec_json, \
             updated_at = excluded.updated_at",
        )
        .bind(c.tenant.as_str())
        .bind(c.name.as_str())
        .bind(c.spec_json.as_str())
        .bind(c.updated_at)
        .execute(self.writer())
        .await?;
        Ok(())
    }

    async fn get_connection(
        &self,
        tenant: &str,
        name: &str,
    ) -> StoreResult<Option<ConnectionRecord>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM connections WHERE tenant = $1 AND name = $2"
        ))
        .bind(tenant)
        .bind(name)
        .fetch_optional(self.reads())
        .await?)
    }

    async fn list_connections(&self, tenant: &str) -> StoreResult<Vec<ConnectionRecord>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM connections WHERE tenant = $1 ORDER BY name"
        ))
        .bind(tenant)
        .fetch_all(self.reads())
        .await?)
    }

    async fn delete_connection(&self, tenant: &str, name: &str) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM connections WHERE tenant = $1 AND name = $2")
            .bind(tenant)
            .bind(name)
            .execute(self.writer())
            .await?;
        Ok(done.rows_affected() > 0)
    }
}

impl ConnectionStore for super::AnyStore {
    async fn put_connection(&self, c: &ConnectionRecord) -> StoreResult<()> {
        delegate!(self, s => s.put_connection(c).await)
    }
    async fn get_connection(
        &self,
        tenant: &str,
        name: &str,
    ) -> StoreResult<Option<ConnectionRecord>> {
        delegate!(self, s => s.get_connection(tenant, name).await)
    }
    async fn list_connections(&self, tenant: &str) -> StoreResult<Vec<ConnectionRecord>> {
        delegate!(self, s => s.list_connections(tenant).await)
    }
    async fn delete_connection(&self, tenant: &str, name: &str) -> StoreResult<bool> {
        delegate!(self, s => s.delete_connection(tenant, name).await)
    }
}
