//! The migrations each backend runs on open: its frozen files, then the
//! shared ones rendered for it (`migrations/README.md` says how to add one).
//!
//! Invariants:
//! - the frozen files (`migrations/sqlite/`, `migrations/postgres/`,
//!   0001-0003) are embedded by `sqlx::migrate!` exactly as before: sqlx
//!   refuses a database on which an applied migration's text (checksum)
//!   changed, so they are never edited, and nothing is added beside them;
//! - every later migration is ONE file under `migrations/shared/`, listed
//!   in [`SHARED`], whose text runs on both backends but for the column
//!   types that have no common spelling, written as placeholders
//!   ([`PLACEHOLDERS`]). Rendering is a plain, fixed substitution, so a
//!   shared migration's text, hence its checksum, never changes on a
//!   backend once released.

use super::{StoreError, StoreResult};
use futures_util::future::BoxFuture;
use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use std::borrow::Cow;

/// The shared migrations, in version order: (file name, text). A file added
/// under `migrations/shared/` and missing here fails a test.
const SHARED: &[(&str, &str)] = &[
    (
        "0004_channels.sql",
        include_str!("../../migrations/shared/0004_channels.sql"),
    ),
    (
        "0005_child_flows.sql",
        include_str!("../../migrations/shared/0005_child_flows.sql"),
    ),
    (
        "0006_idempotency_fingerprint.sql",
        include_str!("../../migrations/shared/0006_idempotency_fingerprint.sql"),
    ),
    (
        "0007_compile_limits.sql",
        include_str!("../../migrations/shared/0007_compile_limits.sql"),
    ),
    (
        "0008_attempt_output.sql",
        include_str!("../../migrations/shared/0008_attempt_output.sql"),
    ),
    (
        "0009_live_children.sql",
        include_str!("../../migrations/shared/0009_live_children.sql"),
    ),
    (
        "0010_attempt_class.sql",
        include_str!("../../migrations/shared/0010_attempt_class.sql"),
    ),
    (
        "0011_closed_instances.sql",
        include_str!("../../migrations/shared/0011_closed_instances.sql"),
    ),
    (
        "0012_egress.sql",
        include_str!("../../migrations/shared/0012_egress.sql"),
    ),
    (
        "0013_idempotency_keys.sql",
        include_str!("../../migrations/shared/0013_idempotency_keys.sql"),
    ),
    (
        "0016_retries.sql",
        include_str!("../../migrations/shared/0016_retries.sql"),
    ),
    (
        "0017_connections.sql",
        include_str!("../../migrations/shared/0017_connections.sql"),
    ),
    (
        "0018_signals.sql",
        include_str!("../../migrations/shared/0018_signals.sql"),
    ),
    (
        "0020_search.sql",
        include_str!("../../migrations/shared/0020_search.sql"),
    ),
    (
        "0021_batches.sql",
        include_str!("../../migrations/shared/0021_batches.sql"),
    ),
    (
        "0024_console_aggregates.sql",
        include_str!("../../migrations/shared/0024_console_aggregates.sql"),
    ),
    (
        "0025_attempt_item.sql",
        include_str!("../../migrations/shared/0025_attempt_item.sql"),
    ),
    (
        "0026_deployment_held_index.sql",
        include_str!("../../migrations/shared/0026_deployment_held_index.sql"),
    ),
    (
        "0027_attempts_rowid.sql",
        include_str!("../../migrations/shared/0027_attempts_rowid.sql"),
    ),
    (
        "0028_search_one_key.sql",
        include_str!("../../migrations/shared/0028_search_one_key.sql"),
    ),
];

/// Which backend a migration is rendered for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    Sqlite,
    Postgres,
}

/// The placeholders of a shared migration: (placeholder, SQLite, PostgreSQL).
/// Everything else is written as both backends read it (integers `BIGINT`,
/// which SQLite stores with INTEGER affinity, strings `TEXT`).
pub(super) const PLACEHOLDERS: [(&str, &str, &str); 9] = [
    // A generated 64-bit row id, the table's primary key.
    (
        "{{id}}",
        "INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT",
        "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    ),
    // A byte string.
    ("{{bytes}}", "BLOB", "BYTEA"),
    // After a table with a primary key: SQLite stores the rows in the key's
    // own b-tree (one b-tree less to maintain per insert); PostgreSQL has no
    // such option (its heap and key index are what it has).
    ("{{without_rowid}}", "WITHOUT ROWID", ""),
    // A FROM item: the (key, value) text pairs of the `node_states` object
    // of the snapshot of the instance aliased `i`, aliased `j` (a backfill
    // from snapshots: the JSON functions differ, as in `SqlBackend::NODE_STATES`).
    (
        "{{node_states}}",
        "json_each(i.snapshot, '$.node_states') j",
        "jsonb_each_text(i.snapshot::jsonb -> 'node_states') j",
    ),
    // The code of the error of the snapshot of the instance aliased `i`.
    (
        "{{error_code}}",
        "json_extract(i.snapshot, '$.error.code')",
        "(i.snapshot::jsonb #>> '{error,code}')",
    ),
    // After a text expression: compare it byte by byte (SQLite's default
    // BINARY collation; PostgreSQL's default follows the database's locale).
    ("{{bytewise}}", "", "COLLATE \"C\""),
    // Around statements that only SQLite runs: a change of SQLite's own
    // storage that PostgreSQL has no counterpart of (0027: a table rebuilt
    // to drop AUTOINCREMENT). On PostgreSQL the block is a comment, so it
    // must hold no comment delimiter of its own ([`render`] refuses one).
    ("{{sqlite_only_begin}}", "", "/*"),
    ("{{sqlite_only_end}}", "", "*/"),
    // An expression: the JSON array of the [name, value] pairs of the
    // `instance_vars` rows of the instance being updated (`instances.id`),
    // as `search_rows::keys_text` writes them (0028's backfill: the JSON
    // functions differ).
    (
        "{{search_keys_of_instance}}",
        "(SELECT json_group_array(json_array(v.name, v.value)) \
         FROM instance_vars v WHERE v.instance_id = instances.id)",
        "(SELECT json_agg(json_build_array(v.name, v.value))::text \
         FROM instance_vars v WHERE v.instance_id = instances.id)",
    ),
];

/// The migrator of `dialect`: its frozen migrations, then the shared ones.
pub(super) async fn migrator(dialect: Dialect) -> StoreResult<Migrator> {
    let all = migrations(dialect).map_err(StoreError::Other)?;
    Ok(Migrator::new(Listed(all)).await?)
}

/// Every migration of `dialect`, in the order they run.
pub(super) fn migrations(dialect: Dialect) -> Result<Vec<Migration>, String> {
    let frozen = match dialect {
        Dialect::Sqlite => sqlx::migrate!("migrations/sqlite"),
        Dialect::Postgres => sqlx::migrate!("migrations/postgres"),
    };
    let mut all: Vec<Migration> = frozen.iter().cloned().collect();
    for (file, text) in SHARED {
        all.push(shared(file, text, dialect)?);
    }
    Ok(all)
}

/// A shared migration rendered for `dialect`; `file` is `NNNN_description.sql`.
fn shared(file: &str, text: &str, dialect: Dialect) -> Result<Migration, String> {
    let (version, description) = file
        .strip_suffix(".sql")
        .and_then(|stem| stem.split_once('_'))
        .and_then(|(v, d)| Some((v.parse::<i64>().ok()?, d.replace('_', " "))))
        .ok_or_else(|| format!("shared migration {file}: name it NNNN_description.sql"))?;
    Ok(Migration::new(
        version,
        Cow::Owned(description),
        MigrationType::Simple,
        Cow::Owned(render(text, dialect).map_err(|e| format!("shared migration {file}: {e}"))?),
        false,
    ))
}

/// `text` with every placeholder replaced by `dialect`'s spelling; an
/// unknown `{{..}}` is an error.
pub(super) fn render(text: &str, dialect: Dialect) -> Result<String, String> {
    // A block only SQLite runs must close, and hold no comment delimiter
    // (PostgreSQL reads it as one comment) nor another block.
    let (begin, end) = ("{{sqlite_only_begin}}", "{{sqlite_only_end}}");
    if text.matches(begin).count() != text.matches(end).count() {
        return Err(format!("every {begin} needs one {end}"));
    }
    let mut rest = text;
    while let Some(at) = rest.find(begin) {
        let block = &rest[at + begin.len()..];
        let close = block
            .find(end)
            .ok_or_else(|| format!("{begin} without {end}"))?;
        let inner = &block[..close];
        if inner.contains("/*") || inner.contains("*/") || inner.contains(begin) {
            return Err(format!(
                "a {begin} block holds a comment delimiter or another block"
            ));
        }
        rest = &block[close + end.len()..];
    }
    let mut out = text.to_string();
    for (placeholder, sqlite, postgres) in PLACEHOLDERS {
        let spelling = match dialect {
            Dialect::Sqlite => sqlite,
            Dialect::Postgres => postgres,
        };
        out = out.replace(placeholder, spelling);
    }
    match out.find("{{") {
        Some(at) => Err(format!(
            "unknown placeholder {:?}",
            out[at..].split("}}").next().unwrap_or_default()
        )),
        None => Ok(out),
    }
}

/// A list of migrations as sqlx's source of them.
#[derive(Debug)]
struct Listed(Vec<Migration>);

impl<'s> MigrationSource<'s> for Listed {
    fn resolve(self) -> BoxFuture<'s, Result<Vec<Migration>, BoxDynError>> {
        Box::pin(async move { Ok(self.0) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_frozen_migrations_keep_their_checksums() {
        // The embedded files, byte for byte: what databases in use recorded.
        for (dialect, dir) in [(Dialect::Sqlite, "sqlite"), (Dialect::Postgres, "postgres")] {
            let all = migrations(dialect).unwrap();
            let frozen: Vec<_> = all.iter().filter(|m| m.version <= 3).collect();
            assert_eq!(frozen.len(), 3, "{dir}");
            for m in frozen {
                let file = std::fs::read_dir(Path::new("migrations").join(dir))
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .find(|p| {
                        p.file_name()
                            .unwrap()
                            .to_string_lossy()
                            .starts_with(&format!("{:04}_", m.version))
                    })
                    .unwrap();
                let text = std::fs::read_to_string(file).unwrap();
                assert_eq!(
                    m.checksum,
                    Migration::new(0, "".into(), MigrationType::Simple, text.into(), false)
                        .checksum
                );
            }
        }
    }

    #[test]
    fn every_shared_file_is_listed_in_order_after_the_frozen_ones() {
        let mut files: Vec<String> = std::fs::read_dir("migrations/shared")
            .map(|dir| {
                dir.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .filter(|name| name.ends_with(".sql"))
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        let listed: Vec<&str> = SHARED.iter().map(|(file, _)| *file).collect();
        assert_eq!(
            files, listed,
            "list every migrations/shared/*.sql in SHARED"
        );
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            let versions: Vec<i64> = migrations(dialect)
                .unwrap()
                .iter()
                .map(|m| m.version)
                .collect();
            assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
        }
    }

    #[test]
    fn placeholders_render_per_backend_and_unknown_ones_are_refused() {
        let text = "CREATE TABLE t (id {{id}}, body {{bytes}} NOT NULL, at BIGINT NOT NULL);";
        assert_eq!(
            render(text, Dialect::Sqlite).unwrap(),
            "CREATE TABLE t (id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, body BLOB NOT NULL, at BIGINT NOT NULL);"
        );
        assert_eq!(
            render(text, Dialect::Postgres).unwrap(),
            "CREATE TABLE t (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body BYTEA NOT NULL, at BIGINT NOT NULL);"
        );
        assert_eq!(
            render("x {{blob}} y", Dialect::Sqlite).unwrap_err(),
            "unknown placeholder \"{{blob\""
        );
        assert!(shared("outbox.sql", "", Dialect::Sqlite).is_err());
        // A block only SQLite runs: a comment on PostgreSQL.
        let text = "SELECT 1;\n{{sqlite_only_begin}}\nDROP TABLE t;\n{{sqlite_only_end}}\n";
        assert_eq!(
            render(text, Dialect::Sqlite).unwrap(),
            "SELECT 1;\n\nDROP TABLE t;\n\n"
        );
        assert_eq!(
            render(text, Dialect::Postgres).unwrap(),
            "SELECT 1;\n/*\nDROP TABLE t;\n*/\n"
        );
        for bad in [
            "{{sqlite_only_begin}} DROP TABLE t;",
            "{{sqlite_only_begin}} /* x */ {{sqlite_only_end}}",
            "{{sqlite_only_begin}} x */ {{sqlite_only_end}}",
            "{{sqlite_only_end}} x {{sqlite_only_begin}}",
        ] {
            assert!(render(bad, Dialect::Postgres).is_err(), "{bad}");
        }
        let m = shared("0004_outbox_rows.sql", "SELECT 1;", Dialect::Postgres).unwrap();
        assert_eq!((m.version, m.description.as_ref()), (4, "outbox rows"));
    }

    #[test]
    fn a_rendered_shared_table_is_written_and_read_on_sqlite() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let text = "CREATE TABLE t (id {{id}}, body {{bytes}} NOT NULL, at BIGINT NOT NULL);";
        conn.execute_batch(&render(text, Dialect::Sqlite).unwrap())
            .unwrap();
        conn.execute(
            "INSERT INTO t (body, at) VALUES (?1, ?2)",
            rusqlite::params![vec![0u8, 255], i64::MAX],
        )
        .unwrap();
        let (id, body, at): (i64, Vec<u8>, i64) = conn
            .query_row("SELECT id, body, at FROM t", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .unwrap();
        assert_eq!((id, body, at), (1, vec![0, 255], i64::MAX));
    }
}
