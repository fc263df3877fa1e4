//! Row shapes shared by both backends, and their conversion to the public
//! records of [`super`].
//!
//! Invariant: both backends select the same column names with the same
//! types (TEXT, 64-bit integers, nullable where the record has an `Option`),
//! so one `FromRow` shape decodes either; every decode that can fail (a
//! deployment state, the modules JSON) answers a [`StoreError`], never panics.

use super::tenancy::ScheduleEvent;
use super::{
    AttemptRow, DeploymentLoad, DeploymentRecord, DeploymentState, InstanceRecord, JournalRow,
    ModuleReuse, NewPark, ParkRecord, StoreError, StoreResult,
};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Columns of `deployments`, in the order the backends select them.
pub(super) const DEPLOYMENT_COLUMNS: &str =
    "id, tenant, process_id, version, dialect, source, modules, state, created_at";
/// Columns of `instances` that the insert writes (`queries_steps::INSERT_INSTANCE`;
/// a test checks the two agree).
#[cfg(test)]
pub(super) const INSTANCE_COLUMNS: &str =
    "id, tenant, deployment_id, process_id, state, version, snapshot, \
     idempotency_key, retry_of, started_at, updated_at, ended_at";
/// The columns an [`InstanceRecord`] is read from: `INSTANCE_COLUMNS`, the
/// business key (migration 0020) and the columns only later steps write
/// (`closed_at`, migration 0011).
pub(super) const INSTANCE_READ_COLUMNS: &str =
    "id, tenant, deployment_id, process_id, state, version, snapshot, \
     idempotency_key, retry_of, started_at, updated_at, ended_at, closed_at, business_key";
/// Columns of `parks` that make a [`ParkRecord`].
pub(super) const PARK_COLUMNS: &str =
    "instance_id, seq, tenant, deployment_id, kind, due_at, message_name, correlation_key";
/// Columns of `attempts` that make an [`AttemptRow`].
pub(super) const ATTEMPT_COLUMNS: &str =
    "token, node, attempt, started_at, ended_at, outcome, code, class, message, calls, \
     item_node, item_index";
/// Columns of `journal` that make a [`JournalRow`].
pub(super) const JOURNAL_COLUMNS: &str = "seq, at, kind, node, data";

#[derive(Debug, sqlx::FromRow)]
pub(super) struct DeploymentRow {
    pub id: String,
    pub tenant: String,
    pub process_id: String,
    pub version: i64,
    pub dialect: String,
    pub source: String,
    pub modules: String,
    pub state: String,
    pub created_at: i64,
}

impl DeploymentRow {
    pub(super) fn into_record(self) -> StoreResult<DeploymentRecord> {
        let state = DeploymentState::parse(&self.state).ok_or_else(|| {
            StoreError::Other(format!(
                "deployment {}: unknown state {:?}",
                self.id, self.state
            ))
        })?;
        let (modules, reusable) = decode_modules(&self.id, &self.modules)?;
        Ok(DeploymentRecord {
            id: self.id,
            tenant: self.tenant,
            process_id: self.process_id,
            version: self.version,
            dialect: self.dialect,
            source: self.source,
            modules,
            reusable,
            state,
            created_at: self.created_at,
        })
    }
}

/// The `modules` column: a JSON object of task name → digest, or, for a
/// module deployed reusable, task name → `{"digest": ..., "reusable":
/// {"max_reuses", "memory_ceiling_bytes"}}` (older rows hold strings only).
pub(super) fn encode_modules(
    modules: &BTreeMap<String, String>,
    reusable: &BTreeMap<String, ModuleReuse>,
) -> StoreResult<String> {
    let entries: serde_json::Map<String, serde_json::Value> = modules
        .iter()
        .map(|(name, digest)| {
            let value = match reusable.get(name) {
                Some(r) => serde_json::json!({ "digest": digest, "reusable": r }),
                None => serde_json::Value::String(digest.clone()),
            };
            (name.clone(), value)
        })
        .collect();
    serde_json::to_string(&entries)
        .map_err(|e| StoreError::Other(format!("cannot encode deployment modules: {e}")))
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ModuleEntry {
    Digest(String),
    Reusable {
        digest: String,
        reusable: ModuleReuse,
    },
}

type Modules = (BTreeMap<String, String>, BTreeMap<String, ModuleReuse>);

fn decode_modules(id: &str, text: &str) -> StoreResult<Modules> {
    let entries: BTreeMap<String, ModuleEntry> = serde_json::from_str(text)
        .map_err(|e| StoreError::Other(format!("deployment {id}: bad modules JSON: {e}")))?;
    let mut modules = BTreeMap::new();
    let mut reusable = BTreeMap::new();
    for (name, entry) in entries {
        match entry {
            ModuleEntry::Digest(d) => {
                modules.insert(name, d);
            }
            ModuleEntry::Reusable {
                digest,
                reusable: r,
            } => {
                reusable.insert(name.clone(), r);
                modules.insert(name, digest);
            }
        }
    }
    Ok((modules, reusable))
}

/// Rows decode straight into the public record.
pub(super) type InstanceRow = InstanceRecord;

/// Rows decode straight into the public record.
pub(super) type ParkRow = ParkRecord;

/// Claimed parks in the order a poller should fire them: earliest due first,
/// then by instance and seq (RETURNING gives no order on either backend).
pub(super) fn sort_claimed(mut parks: Vec<ParkRecord>) -> Vec<ParkRecord> {
    parks.sort_by(|a, b| (a.due_at, &a.instance_id, a.seq).cmp(&(b.due_at, &b.instance_id, b.seq)));
    parks
}

/// Rows decode straight into the public record.
pub(super) type AttemptDbRow = AttemptRow;

/// Rows decode straight into the public record.
pub(super) type JournalDbRow = JournalRow;

/// A unique-constraint violation becomes [`StoreError::Duplicate`] (described
/// by `what`); every other database error stays [`StoreError::Db`].
pub(super) fn duplicate_or_db(e: sqlx::Error, what: impl FnOnce() -> String) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::Duplicate(what()),
        _ => StoreError::Db(e),
    }
}

/// `limit <= 0` means "no limit" (an [`super::InstanceFilter`] built with
/// `..Default::default()` lists everything).
/// A keyset-paged listing: `SELECT {columns} FROM {table}`, one `AND rule $N`
/// per filter that is set, `ORDER BY id LIMIT $last`; answers the SQL and
/// the values to bind in order (then the limit).
pub(super) fn paged_select<'a>(
    columns: &str,
    table: &str,
    filters: &[(&str, &'a Option<String>)],
) -> (String, Vec<&'a String>) {
    paged_select_in(columns, table, filters, false)
}

/// [`paged_select`] in id order, or newest first (`desc`: descending ids;
/// pair it with an `id <` keyset filter).
pub(super) fn paged_select_in<'a>(
    columns: &str,
    table: &str,
    filters: &[(&str, &'a Option<String>)],
    desc: bool,
) -> (String, Vec<&'a String>) {
    paged_select_with(columns, table, filters, &[], desc)
}

/// [`paged_select_in`] with more rules, each with several values: a rule's
/// `$?` placeholders are numbered in order and bound with its values.
pub(super) fn paged_select_with<'a>(
    columns: &str,
    table: &str,
    filters: &[(&str, &'a Option<String>)],
    more: &[(&str, Vec<&'a String>)],
    desc: bool,
) -> (String, Vec<&'a String>) {
    let mut sql = format!("SELECT {columns} FROM {table} WHERE 1 = 1");
    let mut values = Vec::new();
    for (rule, value) in filters {
        if let Some(value) = value {
            values.push(value);
            sql.push_str(&format!(" AND {rule} ${}", values.len()));
        }
    }
    for (rule, binds) in more {
        let mut parts = rule.split("$?");
        sql.push_str(" AND ");
        sql.push_str(parts.next().unwrap_or_default());
        for (part, value) in parts.zip(binds) {
            values.push(value);
            sql.push_str(&format!("${}{part}", values.len()));
        }
    }
    let order = if desc { "id DESC" } else { "id" };
    sql.push_str(&format!(" ORDER BY {order} LIMIT ${}", values.len() + 1));
    (sql, values)
}

pub(super) fn effective_limit(limit: i64) -> i64 {
    if limit <= 0 {
        i64::MAX
    } else {
        limit
    }
}

/// The earliest instant at which `claim_due` could hand out a park, given
/// the parks stored now: for an unclaimed timed park its `due_at`, for a
/// claimed one its `claimed_until` (the claim lapses then, should its holder
/// die). Message waits (no `due_at`) never count. A poller sleeps until this
/// instant (or until it arms a park itself). The same SQL runs on both
/// backends.
///
/// The claimed branch is `MIN(claimed_until)`, not the later of `due_at` and
/// `claimed_until` per row: every stored claim lapses at or after its park's
/// `due_at` (`claim_due` only claims parks due at `now` and sets
/// `claimed_until = now + lease`; a pre-claim is written with
/// `MAX(until, due_at)`, [`park_claim_columns`]), so both give the same
/// answer, and the minimum is read from the front of an index instead of
/// scanning every claimed row. Each branch reads the front of a partial
/// index (`parks_claimed` for the claimed one; `parks_unclaimed_due`,
/// migration 0003, for the unclaimed one, so it does not walk past the
/// claimed parks at the front of `parks_due`).
pub(super) const NEXT_DUE_SQL: &str = "SELECT MIN(t) FROM ( \
       SELECT MIN(due_at) AS t FROM parks WHERE due_at IS NOT NULL AND claimed_until IS NULL \
       UNION ALL \
       SELECT MIN(claimed_until) AS t FROM parks WHERE due_at IS NOT NULL AND claimed_until IS NOT NULL \
     ) AS next_due";

/// The `claimed_by` / `claimed_until` a new park is written with: its
/// pre-claim ([`super::NewPark::claim`]) on a timed park, with `until` raised
/// to `due_at` if earlier (a claim never lapses before its park is due, see
/// [`NEXT_DUE_SQL`]); none on a message wait (never claimed: the claim is
/// ignored) or a park armed without one.
pub(super) fn park_claim_columns(p: &NewPark) -> (Option<&str>, Option<i64>) {
    match (&p.claim, p.due_at) {
        (Some(c), Some(due)) => (Some(c.owner.as_str()), Some(c.until.max(due))),
        _ => (None, None),
    }
}

/// Folds `(state, count)` rows into a [`DeploymentLoad`].
pub(super) fn load_from_counts(rows: &[(String, i64)]) -> DeploymentLoad {
    let mut load = DeploymentLoad::default();
    for (state, n) in rows {
        match state.as_str() {
            "RUNNING" => load.running += n,
            "WAITING" => load.waiting += n,
            "FAILED" => load.failed += n,
            _ => {}
        }
    }
    load
}

/// Columns of `tenants`.
pub(super) const TENANT_COLUMNS: &str =
    "name, created_at, max_instances, max_module_bytes, fuel, deadline_ms, memory_bytes, \
     max_module_functions, compile_ms";
/// Columns of `schedules`.
pub(super) const SCHEDULE_COLUMNS: &str =
    "deployment_id, start_node, tenant, armed_at, last_slot, next_due, state, fires, skipped, refused";
/// Columns of `schedule_events` that make a [`ScheduleEvent`].
pub(super) const EVENT_COLUMNS: &str = "at, slot, skipped, outcome, instance_id, code, message";

/// The counters a fire bumps: (fires, refused).
pub(super) fn fire_counts(event: &ScheduleEvent) -> (i64, i64) {
    if event.outcome == "fired" {
        (1, 0)
    } else {
        (0, 1)
    }
}
