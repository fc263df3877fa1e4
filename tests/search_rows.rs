//! The rows that make instances searchable by their variables (migration
//! 0028: one B-tree keyed for the search, deleted by the keys the instance
//! row names), on SQLite and PostgreSQL: a search finds an instance by what
//! its variables are now, never by what they were; and nothing is left
//! behind when a step changes them, when a step deletes the instance, when
//! the sweeper deletes it, whether the steps are written one at a time or
//! many in one transaction (PostgreSQL's group commit, SQLite's writer
//! thread), and across the migration itself.

#[path = "common/backends.rs"]
mod backends;

use backends::{deployment, new_instance, TENANT};

use sutra::store::{AnyStore, InstanceFilter, SearchVar, StepWrite, Store};

fn vars(pairs: &[(&str, &str)]) -> Vec<SearchVar> {
    pairs
        .iter()
        .map(|(name, value)| SearchVar {
            name: name.to_string(),
            value: value.to_string(),
        })
        .collect()
}

/// A step in `state` whose searchable variables are now `now` (`None`: as
/// they were).
fn step(state: &str, now: Option<&[(&str, &str)]>) -> StepWrite {
    let ended = matches!(state, "COMPLETED" | "TERMINATED");
    StepWrite {
        snapshot: "{}".into(),
        state: state.into(),
        updated_at: 10,
        ended_at: ended.then_some(10),
        search: now.map(vars),
        ..StepWrite::default()
    }
}

/// Creates instance `id` of `dep` with its first step.
async fn create(store: &AnyStore, dep: &str, id: &str, first: &StepWrite) {
    let inst = new_instance(id, dep);
    store.create_instance(&inst, first).await.expect("create");
}

/// The ids of the instances whose variable `name` is now `value`.
async fn found(store: &AnyStore, name: &str, value: &str) -> Vec<String> {
    let filter = InstanceFilter {
        tenant: Some(TENANT.into()),
        vars: vars(&[(name, value)]),
        limit: 100,
        ..InstanceFilter::default()
    };
    let rows = store.list_instances(&filter).await.expect("list");
    rows.into_iter().map(|r| r.id).collect()
}

/// How many searchable-variable rows the database holds.
async fn rows(db: &backends::TestDb) -> i64 {
    db.count("SELECT COUNT(*) FROM instance_vars").await
}

backends::store_tests! {
    /// One at a time: a change, a delete step and the sweeper each take
    /// exactly the rows the instance had.
    async fn no_row_outlives_its_value_or_its_instance(db) {
        let dep = deployment(&db).await;
        create(&db, &dep, "a", &step("RUNNING", Some(&[("order", "A-1"), ("vip", "true")]))).await;
        create(&db, &dep, "b", &step("COMPLETED", Some(&[("order", "B-1")]))).await;
        create(&db, &dep, "c", &step("RUNNING", Some(&[("order", "C-1"), ("region", "eu")]))).await;
        create(&db, &dep, "d", &step("RUNNING", None)).await;
        assert_eq!(found(&db, "order", "A-1").await, ["a"]);
        assert_eq!(rows(&db).await, 5);

        // a: one value changes, one variable goes.
        db.commit_step("a", 1, &step("RUNNING", Some(&[("order", "A-2")]))).await.expect("change a");
        assert!(found(&db, "order", "A-1").await.is_empty(), "found by a value it no longer has");
        assert!(found(&db, "vip", "true").await.is_empty());
        assert_eq!(found(&db, "order", "A-2").await, ["a"]);
        // d: its first searchable variable, then none at all.
        db.commit_step("d", 1, &step("RUNNING", Some(&[("order", "D-1")]))).await.expect("d gets one");
        assert_eq!(found(&db, "order", "D-1").await, ["d"]);
        db.commit_step("d", 2, &step("RUNNING", Some(&[]))).await.expect("d has none");
        assert!(found(&db, "order", "D-1").await.is_empty());
        // A step that leaves them as they were keeps them.
        db.commit_step("a", 2, &step("WAITING", None)).await.expect("a waits");
        assert_eq!(found(&db, "order", "A-2").await, ["a"]);
        assert_eq!(rows(&db).await, 4, "a's one, b's one, c's two");

        // c: deleted by its own step.
        let delete = StepWrite { delete: true, ..step("TERMINATED", None) };
        db.commit_step("c", 1, &delete).await.expect("delete c");
        assert!(found(&db, "region", "eu").await.is_empty());
        assert_eq!(rows(&db).await, 2);
        // b: swept.
        assert_eq!(db.sweep(1_000, 100).await.expect("sweep"), 1);
        assert!(found(&db, "order", "B-1").await.is_empty());
        assert_eq!(rows(&db).await, 1, "only a's");
    }

    /// One sweep of many finished instances (PostgreSQL deletes their rows
    /// in one statement) takes every row of each and none of the live ones,
    /// even where a live instance has the same name and value.
    async fn one_sweep_of_many_instances_takes_exactly_their_rows(db) {
        let dep = deployment(&db).await;
        for n in 0..30 {
            let (id, order) = (format!("done{n:02}"), format!("D-{n}"));
            let first = match n % 3 {
                0 => step("COMPLETED", None),
                1 => step("COMPLETED", Some(&[("order", order.as_str())])),
                _ => step("COMPLETED", Some(&[("order", order.as_str()), ("kind", "x")])),
            };
            create(&db, &dep, &id, &first).await;
        }
        create(&db, &dep, "live", &step("RUNNING", Some(&[("order", "L-1"), ("kind", "x")]))).await;
        assert_eq!(rows(&db).await, 10 + 20 + 2);
        assert_eq!(db.sweep(1_000, 100).await.expect("sweep"), 30);
        assert_eq!(rows(&db).await, 2, "only the live instance's rows are left");
        assert_eq!(found(&db, "kind", "x").await, ["live"]);
        assert_eq!(found(&db, "order", "L-1").await, ["live"]);
        assert!(found(&db, "order", "D-1").await.is_empty());
    }

    /// Many at once: creates and changes committed concurrently (batched
    /// into shared transactions) leave exactly the current rows.
    async fn steps_written_together_keep_exactly_the_current_rows(db) {
        let dep = deployment(&db).await;
        let ids: Vec<String> = (0..24).map(|n| format!("i{n:02}")).collect();
        let creates = ids.iter().map(|id| {
            let (store, dep) = (db.store.clone(), dep.clone());
            let old = format!("old-{id}");
            let first = step("RUNNING", Some(&[("order", old.as_str()), ("kind", "x")]));
            let id = id.clone();
            tokio::spawn(async move { create(&store, &dep, &id, &first).await })
        });
        for c in futures_util::future::join_all(creates).await {
            c.expect("create task");
        }
        assert_eq!(found(&db, "kind", "x").await.len(), 24);
        let changes = ids.iter().map(|id| {
            let store = db.store.clone();
            let new = format!("new-{id}");
            let next = step("RUNNING", Some(&[("order", new.as_str())]));
            let id = id.clone();
            tokio::spawn(async move { store.commit_step(&id, 1, &next).await })
        });
        for c in futures_util::future::join_all(changes).await {
            c.expect("change task").expect("change");
        }
        for id in &ids {
            assert!(found(&db, "order", &format!("old-{id}")).await.is_empty(), "{id} by its old value");
            assert_eq!(found(&db, "order", &format!("new-{id}")).await, std::slice::from_ref(id));
        }
        assert!(found(&db, "kind", "x").await.is_empty());
        assert_eq!(rows(&db).await, 24);
    }

    /// Migration 0028 keeps every searchable row and lets the store delete
    /// them by key afterwards: the instance rows learn which rows are theirs.
    async fn rows_written_before_migration_0028_are_kept_then_deleted_by_key(db) {
        let dep = deployment(&db).await;
        create(&db, &dep, "a", &step("RUNNING", Some(&[("order", "A-1"), ("vip", "true")]))).await;
        create(&db, &dep, "b", &step("COMPLETED", Some(&[("order", "B-1")]))).await;
        create(&db, &dep, "c", &step("RUNNING", None)).await;
        // A database as 0027 left it: the table keyed by instance with its
        // lookup index, no keys on the instance row, 0028 not applied.
        db.raw_execute(
            "CREATE TABLE instance_vars_0020 (
                 instance_id TEXT NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
                 tenant TEXT NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL,
                 PRIMARY KEY (instance_id, name));
             INSERT INTO instance_vars_0020 (instance_id, tenant, name, value)
                 SELECT instance_id, tenant, name, value FROM instance_vars;
             DROP TABLE instance_vars;
             ALTER TABLE instance_vars_0020 RENAME TO instance_vars;
             CREATE INDEX instance_vars_lookup ON instance_vars (name, value, tenant, instance_id);
             ALTER TABLE instances DROP COLUMN search_keys;
             DELETE FROM _sqlx_migrations WHERE version = 28;",
        )
        .await;
        let store = db.reopen().await;
        assert_eq!(found(&store, "order", "A-1").await, ["a"]);
        assert_eq!(found(&store, "vip", "true").await, ["a"]);
        assert_eq!(found(&store, "order", "B-1").await, ["b"]);
        assert_eq!(rows(&db).await, 3);
        store.commit_step("a", 1, &step("RUNNING", Some(&[("order", "A-2")]))).await.expect("change a");
        assert!(found(&store, "order", "A-1").await.is_empty());
        assert!(found(&store, "vip", "true").await.is_empty());
        assert_eq!(found(&store, "order", "A-2").await, ["a"]);
        assert_eq!(store.sweep(1_000, 100).await.expect("sweep"), 1);
        assert!(found(&store, "order", "B-1").await.is_empty());
        assert_eq!(rows(&db).await, 1);
        store.close().await;
    }
}
