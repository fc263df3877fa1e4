//! The rows that make an instance searchable by its variables
//! (`instance_vars`, migrations 0020 and 0028), written and deleted by key.
//!
//! Invariants:
//! - the table is keyed for the search alone, (name, value, tenant,
//!   instance_id), in one B-tree: nothing finds an instance's rows by
//!   instance, so they are deleted by their keys;
//! - the instance row's `search_keys` names exactly the rows the store
//!   wrote for it (a JSON array of [name, value] pairs, NULL when none),
//!   written in the same transaction as them: a step that changes the
//!   variables deletes what the row names (never what the runtime believes
//!   is stored), and so does every path that deletes the instance (its
//!   delete step, the sweeper). A row left behind would make a search find
//!   an instance by a value it no longer has.

use super::queries::Column;
use super::sqlite_held::Held;
use super::{SearchVar, StoreError, StoreResult};
use rusqlite::{params, OptionalExtension};
use sqlx::{ColumnIndex, Database, Encode, Executor, IntoArguments, Type};

/// `$1` name, `$2` value, `$3` tenant, `$4` instance id (the table's key,
/// in its order). A row already there is the same fact (no-op).
pub(super) const INSERT_SEARCH_VAR: &str = "INSERT INTO instance_vars \
     (name, value, tenant, instance_id) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING";

/// `$1` name, `$2` value, `$3` tenant, `$4` instance id: one row, by key.
pub(super) const DELETE_SEARCH_VAR: &str = "DELETE FROM instance_vars \
     WHERE name = $1 AND value = $2 AND tenant = $3 AND instance_id = $4";

/// PostgreSQL: the rows of many instances in one statement (`$1` names,
/// `$2` values, `$3` tenants, `$4` instance ids, a [`Keys`]' columns); one
/// round trip for a whole sweep or group commit. SQLite runs
/// [`DELETE_SEARCH_VAR`] per row instead: an embedded file has no round
/// trip to save, and it has no `unnest`.
pub(super) const DELETE_SEARCH_VARS_UNNEST: &str = "DELETE FROM instance_vars AS v \
     USING unnest($1::text[], $2::text[], $3::text[], $4::text[]) \
     AS d(name, value, tenant, instance_id) \
     WHERE v.name = d.name AND v.value = d.value AND v.tenant = d.tenant \
     AND v.instance_id = d.instance_id";

/// The keys of rows to delete, column by column (as
/// [`DELETE_SEARCH_VARS_UNNEST`] binds them).
#[derive(Debug, Default)]
pub struct Keys {
    pub names: Vec<String>,
    pub values: Vec<String>,
    pub tenants: Vec<String>,
    pub ids: Vec<String>,
}

impl Keys {
    /// Adds the rows a `search_keys` column names for instance `id` of
    /// `tenant`.
    pub fn add(&mut self, id: &str, tenant: &str, keys: Option<&str>) -> StoreResult<()> {
        for (name, value) in parse_keys(keys)? {
            self.names.push(name);
            self.values.push(value);
            self.tenants.push(tenant.to_string());
            self.ids.push(id.to_string());
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Each row's key, in the table's column order.
    pub fn rows(&self) -> impl Iterator<Item = (&str, &str, &str, &str)> {
        self.names
            .iter()
            .zip(&self.values)
            .zip(self.tenants.iter().zip(&self.ids))
            .map(|((n, v), (t, i))| (n.as_str(), v.as_str(), t.as_str(), i.as_str()))
    }
}

/// `$1` instance id → its `search_keys` (no row if the instance is gone).
pub(super) const SEARCH_KEYS_OF: &str = "SELECT search_keys FROM instances WHERE id = $1";

/// `$1` the keys ([`keys_text`]), `$2` instance id.
pub(super) const SET_SEARCH_KEYS: &str = "UPDATE instances SET search_keys = $1 WHERE id = $2";

/// The `search_keys` column for `vars`: NULL when there are none.
pub(super) fn keys_text(vars: &[SearchVar]) -> Option<String> {
    if vars.is_empty() {
        return None;
    }
    use serde_json::Value;
    let pair = |v: &SearchVar| Value::from(vec![v.name.as_str(), v.value.as_str()]);
    Some(Value::Array(vars.iter().map(pair).collect()).to_string())
}

/// The [name, value] pairs a `search_keys` column names. A column the store
/// did not write is refused rather than guessed at.
pub(super) fn parse_keys(text: Option<&str>) -> StoreResult<Vec<(String, String)>> {
    match text {
        None => Ok(Vec::new()),
        Some(t) => serde_json::from_str(t).map_err(|e| {
            StoreError::Other(format!(
                "an instance's search_keys is not [[name, value], ...]: {e}"
            ))
        }),
    }
}

/// The step's searchable variables on an sqlx connection: `fresh` for an
/// instance row inserted in this transaction with its keys
/// (`INSERT_INSTANCE`); otherwise the rows the instance row names are
/// deleted first and the row is pointed at the new ones.
pub(super) async fn write<DB>(
    conn: &mut DB::Connection,
    id: &str,
    tenant: &str,
    vars: &[SearchVar],
    fresh: bool,
) -> StoreResult<()>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    Option<String>: Column<DB>,
    for<'s> &'s str: Type<DB> + Encode<'s, DB>,
    for<'s> Option<&'s str>: Type<DB> + Encode<'s, DB>,
    usize: ColumnIndex<DB::Row>,
{
    if !fresh {
        delete::<DB>(conn, id, tenant).await?;
        sqlx::query(SET_SEARCH_KEYS)
            .bind(keys_text(vars))
            .bind(id)
            .execute(&mut *conn)
            .await?;
    }
    for v in vars {
        sqlx::query(INSERT_SEARCH_VAR)
            .bind(&*v.name)
            .bind(&*v.value)
            .bind(tenant)
            .bind(id)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Deletes the rows instance `id`'s row names (before the instance row
/// itself goes, or before its variables are rewritten).
pub(super) async fn delete<DB>(conn: &mut DB::Connection, id: &str, tenant: &str) -> StoreResult<()>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    Option<String>: Column<DB>,
    for<'s> &'s str: Type<DB> + Encode<'s, DB>,
    usize: ColumnIndex<DB::Row>,
{
    let keys: Option<Option<String>> = sqlx::query_scalar(SEARCH_KEYS_OF)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?;
    let mut rows = Keys::default();
    rows.add(id, tenant, keys.flatten().as_deref())?;
    delete_each::<DB>(conn, &rows).await
}

/// Deletes `rows`, one statement each ([`DELETE_SEARCH_VAR`]).
pub(super) async fn delete_each<DB>(conn: &mut DB::Connection, rows: &Keys) -> StoreResult<()>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'s> &'s str: Type<DB> + Encode<'s, DB>,
{
    for (name, value, tenant, id) in rows.rows() {
        sqlx::query(DELETE_SEARCH_VAR)
            .bind(name)
            .bind(value)
            .bind(tenant)
            .bind(id)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Deletes `rows` on PostgreSQL in one statement
/// ([`DELETE_SEARCH_VARS_UNNEST`]).
pub(super) async fn delete_unnest(conn: &mut sqlx::PgConnection, rows: &Keys) -> StoreResult<()> {
    if rows.is_empty() {
        return Ok(());
    }
    sqlx::query(DELETE_SEARCH_VARS_UNNEST)
        .bind(&rows.names)
        .bind(&rows.values)
        .bind(&rows.tenants)
        .bind(&rows.ids)
        .execute(conn)
        .await?;
    Ok(())
}

/// [`write`] on the SQLite writer thread's connection.
pub(super) fn write_rusqlite(
    conn: &Held,
    id: &str,
    tenant: &str,
    vars: &[SearchVar],
    fresh: bool,
) -> StoreResult<()> {
    if !fresh {
        delete_rusqlite(conn, id, tenant)?;
        conn.with(SET_SEARCH_KEYS, |s| s.execute(params![keys_text(vars), id]))?;
    }
    conn.with(INSERT_SEARCH_VAR, |insert| {
        for v in vars {
            insert.execute(params![v.name, v.value, tenant, id])?;
        }
        Ok(())
    })?;
    Ok(())
}

/// [`delete`] on the SQLite writer thread's connection.
pub(super) fn delete_rusqlite(conn: &Held, id: &str, tenant: &str) -> StoreResult<()> {
    let keys: Option<Option<String>> = conn.with(SEARCH_KEYS_OF, |s| {
        s.query_row(params![id], |r| r.get(0)).optional()
    })?;
    let keys = parse_keys(keys.flatten().as_deref())?;
    if keys.is_empty() {
        return Ok(());
    }
    conn.with(DELETE_SEARCH_VAR, |delete| {
        for (name, value) in &keys {
            delete.execute(params![name, value, tenant, id])?;
        }
        Ok(())
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(name: &str, value: &str) -> SearchVar {
        SearchVar {
            name: name.into(),
            value: value.into(),
        }
    }

    #[test]
    fn keys_read_back_as_written_whatever_their_text() {
        let vars = [
            var("order", "A-1"),
            var("q\"uote", "[1, \"x\"]"),
            var("ünï", ""),
        ];
        let text = keys_text(&vars);
        let back = parse_keys(text.as_deref()).unwrap();
        let want: Vec<(String, String)> = vars
            .iter()
            .map(|v| (v.name.clone(), v.value.clone()))
            .collect();
        assert_eq!(back, want);
        assert_eq!(keys_text(&[]), None);
        assert!(parse_keys(None).unwrap().is_empty());
    }

    #[test]
    fn both_backfills_spellings_read_back() {
        // SQLite's json_group_array and PostgreSQL's json_agg (0028).
        for text in [
            r#"[["a","1"],["b","x y"]]"#,
            r#"[["a", "1"], ["b", "x y"]]"#,
        ] {
            let keys = parse_keys(Some(text)).unwrap();
            assert_eq!(
                keys,
                vec![("a".into(), "1".into()), ("b".into(), "x y".into())]
            );
        }
    }

    #[test]
    fn a_column_the_store_did_not_write_is_refused() {
        for text in ["", "{}", r#"[["a"]]"#, r#"[[1, 2]]"#] {
            assert!(parse_keys(Some(text)).is_err(), "{text}");
        }
    }
}
