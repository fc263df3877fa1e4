//! The SQL text of the SQLite instance writes and claims, shared by the two
//! SQLite write paths: the writer thread (`sqlite_writer.rs`, rusqlite, file
//! databases) and the sqlx group commit (`sqlite_group.rs`, in-memory
//! databases).
//!
//! Invariant: each statement exists once, so both paths write the same rows
//! with the same rules; parameters are numbered (`?N`) and bound in the
//! order given beside each constant.

/// `?1` tenant, `?2` idempotency key → the id holding that key.
pub(super) const INSTANCE_BY_KEY: &str =
    "SELECT id FROM instances WHERE tenant = ?1 AND idempotency_key = ?2";

/// `?1` id, `?2` tenant, `?3` deployment_id, `?4` process_id, `?5` state,
/// `?6` snapshot, `?7` idempotency_key, `?8` retry_of, `?9` started_at,
/// `?10` updated_at, `?11` ended_at (version 1). The column list is
/// `rows::INSTANCE_COLUMNS` (checked by a test).
pub(super) const INSERT_INSTANCE: &str = "INSERT INTO instances (id, tenant, deployment_id, \
     process_id, state, version, snapshot, idempotency_key, retry_of, started_at, updated_at, \
     ended_at) VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?7, ?8, ?9, ?10, ?11)";

/// `?1` snapshot, `?2` state, `?3` updated_at, `?4` ended_at (kept when
/// NULL), `?5` id, `?6` expected version → the instance's (tenant,
/// deployment_id), no row if the version moved or the instance is gone.
pub(super) const UPDATE_INSTANCE: &str = "UPDATE instances SET snapshot = ?1, state = ?2, \
     version = version + 1, updated_at = ?3, ended_at = COALESCE(?4, ended_at) \
     WHERE id = ?5 AND version = ?6 RETURNING tenant, deployment_id";

/// `?1` id → a row if the instance exists.
pub(super) const INSTANCE_EXISTS: &str = "SELECT 1 FROM instances WHERE id = ?1";

/// `?1` instance id: every row of it, children first (the `delete` step).
pub(super) const DELETE_INSTANCE_ALL: [&str; 4] = [
    "DELETE FROM parks WHERE instance_id = ?1",
    "DELETE FROM attempts WHERE instance_id = ?1",
    "DELETE FROM journal WHERE instance_id = ?1",
    "DELETE FROM instances WHERE id = ?1",
];

/// `?1` instance id: every park of it (`withdraw_all`).
pub(super) const DELETE_PARKS_OF: &str = "DELETE FROM parks WHERE instance_id = ?1";

/// `?1` instance id, `?2` seq.
pub(super) const DELETE_PARK: &str = "DELETE FROM parks WHERE instance_id = ?1 AND seq = ?2";

/// `?1` instance id, `?2` seq, `?3` kind, `?4` tenant, `?5` deployment_id,
/// `?6` due_at, `?7` message_name, `?8` correlation_key, `?9` claimed_by,
/// `?10` claimed_until (a pre-claim, `rows::park_claim_columns`).
pub(super) const INSERT_PARK: &str = "INSERT INTO parks (instance_id, seq, kind, tenant, \
     deployment_id, due_at, message_name, correlation_key, claimed_by, claimed_until) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

/// `?1` instance id, `?2` token, `?3` node, `?4` attempt, `?5` started_at,
/// `?6` ended_at, `?7` outcome, `?8` code, `?9` message; a replay is a no-op.
pub(super) const INSERT_ATTEMPT: &str = "INSERT INTO attempts (instance_id, token, node, \
     attempt, started_at, ended_at, outcome, code, message) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
     ON CONFLICT (instance_id, token, node, attempt) DO NOTHING";

/// `?1` instance id, `?2` seq, `?3` at, `?4` kind, `?5` node, `?6` data; a
/// replay is a no-op.
pub(super) const INSERT_JOURNAL: &str = "INSERT INTO journal (instance_id, seq, at, kind, \
     node, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (instance_id, seq) DO NOTHING";

/// `?1` owner, `?2` claimed_until, `?3` now, `?4` limit → the claimed parks
/// (`rows::PARK_COLUMNS`, in no particular order).
pub(super) const CLAIM_DUE: &str = "UPDATE parks SET claimed_by = ?1, claimed_until = ?2 \
     WHERE (instance_id, seq) IN ( \
       SELECT instance_id, seq FROM parks \
       WHERE due_at IS NOT NULL AND due_at <= ?3 \
         AND (claimed_until IS NULL OR claimed_until <= ?3) \
       ORDER BY due_at, instance_id, seq LIMIT ?4) \
     RETURNING instance_id, seq, tenant, deployment_id, kind, due_at, message_name, \
       correlation_key";

/// `?1` instance id, `?2` seq, `?3` owner: only the holder's claim goes.
pub(super) const RELEASE_CLAIM: &str = "UPDATE parks SET claimed_by = NULL, \
     claimed_until = NULL WHERE instance_id = ?1 AND seq = ?2 AND claimed_by = ?3";

#[cfg(test)]
mod tests {
    use super::super::rows::{INSTANCE_COLUMNS, PARK_COLUMNS};

    fn squash(s: &str) -> String {
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn column_lists_match_the_shared_ones() {
        assert!(squash(super::INSERT_INSTANCE).contains(&format!("({INSTANCE_COLUMNS})")));
        assert!(squash(super::CLAIM_DUE).ends_with(&format!("RETURNING {PARK_COLUMNS}")));
    }
}
