//! The console's maintained aggregates (migration 0024): per deployment, its
//! instances counted by state and by node state (`deployment_stats`), and
//! each instance's error code and failed node as columns.
//!
//! Every change is a delta the runtime computes from what it knows changed —
//! the [`Tally`] of the last committed snapshot against the new one — and
//! the store writes in the same transaction as the step (so a retried or
//! crashed step leaves the counts as exact as the instance rows). The
//! sweeper subtracts what it deletes, a migration moves what it re-pins
//! (both from the snapshots they touch, [`Tally::of_json`]).
//!
//! Invariants:
//! - a count is the sum of its rows over `slot`; a step writes the slot of
//!   its instance ([`slot_of`]), so concurrent steps of one deployment rarely
//!   wait on one row, and no row is one that every step updates;
//! - the rows of a transaction are written in one key order
//!   ([`collect`] sorts them), so two transactions never deadlock on them;
//! - `node` '' is the instance's own state.

use super::queries::Column;
use super::{StepWrite, StoreResult};
use serde::{Deserialize, Serialize};
use sqlx::{Database, Encode, Executor, IntoArguments, Type};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// How many slots a count is spread over.
pub const SLOTS: u64 = 16;

/// The slot of instance `id`: FNV-1a of its bytes, modulo [`SLOTS`].
pub fn slot_of(id: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % SLOTS) as i64
}

/// One change of a count: `n` more (or fewer) instances of deployment
/// `deployment_id` in `state` at `node` ('' for the instance itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatDelta {
    pub deployment_id: String,
    pub node: String,
    /// A state's name: borrowed from the engine's names when the runtime
    /// counts a snapshot (no copy per step), owned when read from a row.
    pub state: Cow<'static, str>,
    pub slot: i64,
    pub n: i64,
}

/// The failure columns a step sets (both, `None` clearing one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureColumns {
    pub error_code: Option<String>,
    pub failed_node: Option<String>,
}

/// What an instance counts for: its state, its node states, its error code
/// and failed node (the first FAILED node by id, as the instance list shows
/// it). The empty tally (no state) is an instance that does not exist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    pub state: Option<Cow<'static, str>>,
    pub nodes: BTreeMap<String, Cow<'static, str>>,
    pub error_code: Option<String>,
}

impl Tally {
    /// The failed node: the first node (by id) in state FAILED.
    pub fn failed_node(&self) -> Option<&str> {
        self.nodes
            .iter()
            .find(|(_, s)| *s == "FAILED")
            .map(|(n, _)| n.as_str())
    }

    /// The tally of a stored instance: its `state` and its snapshot's JSON
    /// (a snapshot that does not read counts its state only).
    pub fn of_json(state: &str, snapshot: &str) -> Tally {
        #[derive(Deserialize)]
        struct Peek {
            #[serde(default)]
            node_states: BTreeMap<String, String>,
            #[serde(default)]
            error: Option<ErrorPeek>,
        }
        #[derive(Deserialize)]
        struct ErrorPeek {
            code: String,
        }
        let peek: Option<Peek> = serde_json::from_str(snapshot).ok();
        let (nodes, error_code) = match peek {
            Some(p) => (
                p.node_states
                    .into_iter()
                    .map(|(n, s)| (n, Cow::Owned(s)))
                    .collect(),
                p.error.map(|e| e.code),
            ),
            None => (BTreeMap::new(), None),
        };
        Tally {
            state: Some(Cow::Owned(state.to_string())),
            nodes,
            error_code,
        }
    }

    /// The deltas from `self` (what the store counts) to `next`, for an
    /// instance of `deployment_id` in `slot`.
    pub fn deltas(&self, next: &Tally, deployment_id: &str, slot: i64) -> Vec<StatDelta> {
        let mut out = Vec::new();
        let mut delta = |node: &str, state: &Cow<'static, str>, n: i64| {
            out.push(StatDelta {
                deployment_id: deployment_id.to_string(),
                node: node.to_string(),
                state: state.clone(),
                slot,
                n,
            })
        };
        if self.state != next.state {
            if let Some(s) = &self.state {
                delta("", s, -1);
            }
            if let Some(s) = &next.state {
                delta("", s, 1);
            }
        }
        for (node, state) in &self.nodes {
            if next.nodes.get(node) != Some(state) {
                delta(node, state, -1);
            }
        }
        for (node, state) in &next.nodes {
            if self.nodes.get(node) != Some(state) {
                delta(node, state, 1);
            }
        }
        out
    }

    /// The failure columns to write going from `self` to `next`, if they change.
    pub fn failure_change(&self, next: &Tally) -> Option<FailureColumns> {
        let (code, node) = (next.error_code.as_deref(), next.failed_node());
        (self.error_code.as_deref() != code || self.failed_node() != node).then(|| FailureColumns {
            error_code: code.map(str::to_string),
            failed_node: node.map(str::to_string),
        })
    }
}

/// A stored instance moving from `before` to `after` (each `None` when it
/// does not exist on that side): the deltas of both deployments.
pub fn moved(
    id: &str,
    before: Option<(&str, &Tally)>,
    after: Option<(&str, &Tally)>,
) -> Vec<StatDelta> {
    let slot = slot_of(id);
    let empty = Tally::default();
    match (before, after) {
        (Some((d1, t1)), Some((d2, t2))) if d1 == d2 => t1.deltas(t2, d1, slot),
        (before, after) => {
            let mut out = Vec::new();
            if let Some((d, t)) = before {
                out.extend(t.deltas(&empty, d, slot));
            }
            if let Some((d, t)) = after {
                out.extend(empty.deltas(t, d, slot));
            }
            out
        }
    }
}

/// The deltas of `steps` and of the children they start, summed by row and
/// in key order, zero sums dropped.
pub(super) fn collect<'a>(steps: impl IntoIterator<Item = &'a StepWrite>) -> Vec<StatDelta> {
    // Summed under a key that compares its cheap parts first: a batch's
    // deltas mostly share one long deployment id, which a key leading with
    // it compares in full at every step of every lookup (a thousand steps
    // make thousands of lookups); the few sums are then put in key order.
    // (slot, node, state, deployment) → (sum, the state's name as held).
    type Sums<'a> = BTreeMap<(i64, &'a str, &'a str, &'a str), (i64, &'a Cow<'static, str>)>;
    let mut sums: Sums<'a> = BTreeMap::new();
    let mut add = |d: &'a StatDelta| {
        sums.entry((d.slot, &d.node, &d.state, &d.deployment_id))
            .or_insert((0, &d.state))
            .0 += d.n;
    };
    for step in steps {
        step.stats.iter().for_each(&mut add);
        for c in &step.children {
            c.step.stats.iter().for_each(&mut add);
        }
    }
    let mut out: Vec<StatDelta> = sums
        .into_iter()
        .filter(|(_, (n, _))| *n != 0)
        .map(|((slot, node, _, deployment_id), (n, state))| StatDelta {
            deployment_id: deployment_id.to_string(),
            node: node.to_string(),
            state: state.clone(),
            slot,
            n,
        })
        .collect();
    out.sort_unstable_by(|a, b| {
        (&a.deployment_id, &a.node, &a.state, a.slot).cmp(&(
            &b.deployment_id,
            &b.node,
            &b.state,
            b.slot,
        ))
    });
    out
}

/// Rows per upsert statement.
const CHUNK: usize = 16;

/// The upsert of `rows` rows (`$1..$5` the first row's deployment, node,
/// state, slot, n, and so on: numbered in order of first use).
fn upsert_sql(rows: usize) -> &'static str {
    static SQL: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let all = SQL.get_or_init(|| {
        (1..=CHUNK)
            .map(|k| {
                let values: Vec<String> = (0..k)
                    .map(|r| {
                        let b = r * 5;
                        format!(
                            "(${}, ${}, ${}, ${}, ${})",
                            b + 1,
                            b + 2,
                            b + 3,
                            b + 4,
                            b + 5
                        )
                    })
                    .collect();
                format!(
                    "INSERT INTO deployment_stats (deployment_id, node, state, slot, n) \
                     VALUES {} ON CONFLICT (deployment_id, node, state, slot) \
                     DO UPDATE SET n = deployment_stats.n + excluded.n",
                    values.join(", ")
                )
            })
            .collect()
    });
    &all[rows - 1]
}

/// Writes `deltas` ([`collect`]ed) on an sqlx connection of either backend.
pub(super) async fn write<DB>(conn: &mut DB::Connection, deltas: &[StatDelta]) -> StoreResult<()>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    i64: Column<DB>,
    for<'s> &'s str: Type<DB> + Encode<'s, DB>,
{
    for chunk in deltas.chunks(CHUNK) {
        let mut q = sqlx::query(upsert_sql(chunk.len()));
        for d in chunk {
            q = q
                .bind(d.deployment_id.as_str())
                .bind(d.node.as_str())
                .bind(d.state.as_ref())
                .bind(d.slot)
                .bind(d.n);
        }
        q.execute(&mut *conn).await?;
    }
    Ok(())
}

/// The same on the SQLite writer thread's connection.
pub(super) fn write_rusqlite(
    conn: &rusqlite::Connection,
    deltas: &[StatDelta],
) -> rusqlite::Result<()> {
    for chunk in deltas.chunks(CHUNK) {
        let mut st = conn.prepare_cached(upsert_sql(chunk.len()))?;
        let mut values: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(chunk.len() * 5);
        for d in chunk {
            values.extend([
                &d.deployment_id as &dyn rusqlite::ToSql,
                &d.node,
                &d.state,
                &d.slot,
                &d.n,
            ]);
        }
        st.execute(values.as_slice())?;
    }
    Ok(())
}

/// `$1` error code, `$2` failed node, `$3` instance id.
pub(super) const SET_FAILURE: &str =
    "UPDATE instances SET error_code = $1, failed_node = $2 WHERE id = $3";

/// `$1` deployment: (node, state, instances) from the aggregate.
pub(super) const NODE_COUNTS: &str = "SELECT node, state, CAST(SUM(n) AS BIGINT) \
     FROM deployment_stats WHERE deployment_id = $1 AND node <> '' \
     GROUP BY node, state HAVING SUM(n) <> 0 ORDER BY node, state";

/// `$1` tenant, `$2` process (or NULL): (state, instances) from the aggregate.
pub(super) const STATE_COUNTS: &str = "SELECT s.state, CAST(SUM(s.n) AS BIGINT) \
     FROM deployments d JOIN deployment_stats s ON s.deployment_id = d.id AND s.node = '' \
     WHERE d.tenant = $1 AND (CAST($2 AS TEXT) IS NULL OR d.process_id = CAST($2 AS TEXT)) \
     GROUP BY s.state HAVING SUM(s.n) <> 0 ORDER BY s.state";

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(state: &str, nodes: &[(&str, &str)], code: Option<&str>) -> Tally {
        Tally {
            state: Some(Cow::Owned(state.to_string())),
            nodes: nodes
                .iter()
                .map(|(n, s)| (n.to_string(), Cow::Owned(s.to_string())))
                .collect(),
            error_code: code.map(str::to_string),
        }
    }

    #[test]
    fn deltas_name_only_what_changed() {
        let a = tally(
            "RUNNING",
            &[("start", "SUCCEEDED"), ("task", "RUNNING")],
            None,
        );
        let b = tally(
            "FAILED",
            &[("start", "SUCCEEDED"), ("task", "FAILED")],
            Some("X"),
        );
        let d: Vec<(String, String, i64)> = a
            .deltas(&b, "d1", 3)
            .into_iter()
            .map(|d| (d.node, d.state.into_owned(), d.n))
            .collect();
        assert_eq!(
            d,
            vec![
                ("".into(), "RUNNING".into(), -1),
                ("".into(), "FAILED".into(), 1),
                ("task".into(), "RUNNING".into(), -1),
                ("task".into(), "FAILED".into(), 1),
            ]
        );
        assert_eq!(
            a.failure_change(&b),
            Some(FailureColumns {
                error_code: Some("X".into()),
                failed_node: Some("task".into())
            })
        );
        assert_eq!(b.failure_change(&b), None);
        // Gone: everything it counted is taken back.
        let gone = b.deltas(&Tally::default(), "d1", 3);
        assert_eq!(gone.iter().map(|d| d.n).sum::<i64>(), -3);
    }

    #[test]
    fn a_move_between_deployments_takes_from_one_and_gives_to_the_other() {
        let a = tally("FAILED", &[("task", "FAILED")], Some("X"));
        let b = tally("RUNNING", &[("task", "READY")], None);
        let d = moved("i1", Some(("d1", &a)), Some(("d2", &b)));
        let sum = |dep: &str| {
            d.iter()
                .filter(|x| x.deployment_id == dep)
                .map(|x| x.n)
                .sum::<i64>()
        };
        assert_eq!((sum("d1"), sum("d2")), (-2, 2));
    }

    /// The sums a transaction writes: one per row, zero sums dropped, in
    /// (deployment, node, state, slot) order whatever order they came in
    /// (every writer takes the rows in that one order).
    #[test]
    fn a_batch_sums_each_row_once_in_key_order() {
        let step = |deltas: &[(&str, &str, &str, i64, i64)]| StepWrite {
            stats: deltas
                .iter()
                .map(|&(dep, node, state, slot, n)| StatDelta {
                    deployment_id: dep.into(),
                    node: node.into(),
                    state: Cow::Owned(state.to_string()),
                    slot,
                    n,
                })
                .collect(),
            ..StepWrite::default()
        };
        let steps = [
            step(&[("d2", "", "COMPLETED", 1, 1), ("d1", "t", "FAILED", 0, 1)]),
            step(&[("d1", "", "RUNNING", 5, 1), ("d1", "", "COMPLETED", 9, 1)]),
            step(&[("d1", "", "RUNNING", 5, -1), ("d1", "", "COMPLETED", 9, 1)]),
            step(&[("d1", "", "COMPLETED", 2, 1), ("d2", "", "COMPLETED", 1, 1)]),
        ];
        let rows: Vec<(String, String, String, i64, i64)> = collect(&steps)
            .into_iter()
            .map(|d| (d.deployment_id, d.node, d.state.into_owned(), d.slot, d.n))
            .collect();
        let row = |d: &str, n: &str, s: &str, slot, k| (d.into(), n.into(), s.into(), slot, k);
        assert_eq!(
            rows,
            vec![
                row("d1", "", "COMPLETED", 2, 1),
                row("d1", "", "COMPLETED", 9, 2),
                row("d1", "t", "FAILED", 0, 1),
                row("d2", "", "COMPLETED", 1, 2),
            ]
        );
    }

    #[test]
    fn slots_spread_and_stay_put() {
        let slots: std::collections::HashSet<i64> =
            (0..200).map(|i| slot_of(&format!("id-{i}"))).collect();
        assert_eq!(slots.len(), SLOTS as usize);
        assert_eq!(slot_of("abc"), slot_of("abc"));
    }

    #[test]
    fn the_upsert_numbers_its_parameters_in_order() {
        assert!(upsert_sql(2).contains("($1, $2, $3, $4, $5), ($6, $7, $8, $9, $10)"));
    }
}
