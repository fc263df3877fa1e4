//! Instance writes called at once (issue 36 item 1): each gets its own
//! answer whatever the others do (PostgreSQL's group commit,
//! `store/pg_group.rs`, and SQLite's writer both write queued writes
//! together), and two replicas claiming and committing at the same time
//! never wait on each other's locks (PostgreSQL).
//!
//! The lock test holds one replica's claim and commit transaction open
//! (its parks locked, its instances updated) and runs the other replica's
//! claim and commits under `lock_timeout`: a statement that waited for the
//! open transaction would fail with a lock timeout, so the test needs no
//! clock of its own.

#[path = "common/backends.rs"]
mod backends;

use backends::{deployment, new_instance, Backend, POSTGRES_URL_VAR};
use std::collections::BTreeSet;
use sutra::store::{
    AnyStore, AttemptRow, NewPark, PgOptions, PgStore, StepWrite, Store, StoreError,
};

fn timer(seq: i64, due_at: i64) -> NewPark {
    NewPark {
        seq,
        kind: "timer".into(),
        due_at: Some(due_at),
        message_name: None,
        correlation_key: None,
        claim: None,
    }
}

fn waiting(arm: Vec<NewPark>) -> StepWrite {
    StepWrite {
        snapshot: "{}".into(),
        state: "WAITING".into(),
        updated_at: 1,
        arm,
        ..StepWrite::default()
    }
}

/// The step that fires park `seq`: withdraws it, records an attempt, arms `next`.
fn fired(seq: i64, next: i64) -> StepWrite {
    StepWrite {
        snapshot: format!("{{\"fired\":{seq}}}"),
        state: "WAITING".into(),
        updated_at: 2,
        withdraw: vec![seq],
        arm: vec![timer(next, 10_000)],
        attempts: vec![AttemptRow {
            token: 0,
            node: "T".into(),
            attempt: 1,
            started_at: 2,
            ended_at: 2,
            outcome: "completed".into(),
            code: None,
            class: None,
            message: None,
            calls: None,
            item_node: None,
            item_index: None,
        }],
        ..StepWrite::default()
    }
}

async fn park_seqs(store: &AnyStore, id: &str) -> Vec<i64> {
    let mut seqs: Vec<i64> = store
        .parks_of(id)
        .await
        .expect("parks")
        .into_iter()
        .map(|p| p.seq)
        .collect();
    seqs.sort_unstable();
    seqs
}

backends::store_tests! {
    /// Forty creates and forty commits at once, among them a duplicate id,
    /// a stale version, a missing instance and a park armed twice: each of
    /// those fails alone with its own error, every other write is kept
    /// whole, and nothing of a failed one is.
    async fn writes_at_once_each_get_their_own_answer(db) {
        let dep = deployment(&db).await;
        let ids: Vec<String> = (0..40).map(|n| format!("i{n:02}")).collect();
        let mut set = tokio::task::JoinSet::new();
        for id in &ids {
            let store = db.store.clone();
            let inst = new_instance(id, &dep);
            set.spawn(async move { store.create_instance(&inst, &waiting(vec![timer(1, 5)])).await });
        }
        while let Some(r) = set.join_next().await {
            r.expect("task").expect("create");
        }
        // Creates at once, one of them an id that exists.
        let mut set = tokio::task::JoinSet::new();
        for n in 0..10 {
            let store = db.store.clone();
            let id = if n == 3 { "i05".to_string() } else { format!("j{n}") };
            let inst = new_instance(&id, &dep);
            set.spawn(async move { (id, store.create_instance(&inst, &waiting(vec![timer(1, 5)])).await) });
        }
        let mut duplicates = 0;
        while let Some(r) = set.join_next().await {
            let (id, result) = r.expect("task");
            match result {
                Ok(_) => assert!(id.starts_with('j'), "{id} created"),
                Err(StoreError::Duplicate(_)) => duplicates += 1,
                Err(e) => panic!("{id}: {e}"),
            }
        }
        assert_eq!(duplicates, 1, "only the existing id is refused");
        // Commits at once: i07 at a stale version, "nobody" missing, i11
        // arming the park it already has (seq 1, not withdrawn).
        let mut set = tokio::task::JoinSet::new();
        for id in ids.iter().cloned().chain(["nobody".to_string()]) {
            let store = db.store.clone();
            set.spawn(async move {
                let (version, step) = match id.as_str() {
                    "i07" => (5, fired(1, 2)),
                    "i11" => (1, StepWrite { withdraw: vec![], arm: vec![timer(1, 7)], ..fired(1, 2) }),
                    _ => (1, fired(1, 2)),
                };
                (id.clone(), store.commit_step(&id, version, &step).await)
            });
        }
        while let Some(r) = set.join_next().await {
            let (id, result) = r.expect("task");
            match id.as_str() {
                "i07" => assert!(matches!(result, Err(StoreError::Conflict(_))), "i07: {result:?}"),
                "nobody" => assert!(matches!(result, Err(StoreError::NotFound(_))), "nobody: {result:?}"),
                "i11" => assert!(result.is_err(), "i11 armed park 1 twice: {result:?}"),
                _ => result.unwrap_or_else(|e| panic!("{id}: {e}")),
            }
        }
        for id in &ids {
            let rec = db.load_instance(id).await.expect("load").expect("exists");
            let attempts = db.attempts(id).await.expect("attempts");
            if id == "i07" || id == "i11" {
                assert_eq!((rec.version, rec.snapshot.as_str()), (1, "{}"), "{id} unchanged");
                assert_eq!(park_seqs(&db, id).await, vec![1], "{id} keeps its park only");
                assert!(attempts.is_empty(), "{id} recorded no attempt");
            } else {
                assert_eq!((rec.version, rec.snapshot.as_str()), (2, "{\"fired\":1}"), "{id}");
                assert_eq!(park_seqs(&db, id).await, vec![2], "{id}: park 1 withdrawn, 2 armed");
                assert_eq!(attempts.len(), 1, "{id} recorded its attempt");
            }
        }
    }
}

/// A second store on the test's schema whose statements give up after
/// 200 ms waiting for a lock (`lock_timeout`) instead of waiting on.
/// Opening it runs the migrations under the database-wide migration lock,
/// which other schemas' migrations (other tests) may hold for a while: an
/// open that timed out on it is tried again.
async fn impatient(url: &str, schema: &str) -> PgStore {
    let sep = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{sep}options=-c%20lock_timeout%3D200");
    let mut tries = 0;
    loop {
        let opened = PgStore::open_with(
            &url,
            PgOptions {
                max_connections: 4,
                schema: Some(schema.to_string()),
                ..PgOptions::default()
            },
        )
        .await;
        match opened {
            Ok(store) => return store,
            Err(e) if tries < 100 && e.to_string().contains("lock timeout") => tries += 1,
            Err(e) => panic!("open the impatient store: {e}"),
        }
    }
}

/// Replica A's claim and commit transaction stays open, holding the row
/// locks of ten due parks and of their instances. Replica B claims at the
/// same time: it gets exactly the ten parks A does not hold, and commits
/// the steps that fire them, without waiting on A (B's `lock_timeout`
/// would fail it); once A commits, every park was fired by one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_never_waits_on_the_locks_of_anothers_open_claim() {
    if std::env::var(POSTGRES_URL_VAR).is_err() {
        eprintln!("skipped: {POSTGRES_URL_VAR} not set");
        return;
    }
    backends::run(Backend::Postgres, |db| async move {
        use sqlx::{Connection, Row};
        let schema = db.schema.clone().expect("a schema");
        let dep = deployment(&db).await;
        let ids: Vec<String> = (0..20).map(|n| format!("i{n:02}")).collect();
        for id in &ids {
            db.create_instance(&new_instance(id, &dep), &waiting(vec![timer(1, 5)]))
                .await
                .expect("create");
        }
        let b = impatient(&db.url, &schema).await;
        // A: claims ten due parks in a transaction it keeps open, then (in
        // the same transaction) fires their instances, as a group commit does.
        let opts: sqlx::postgres::PgConnectOptions = db.url.parse().expect("URL");
        let mut a = sqlx::postgres::PgConnection::connect_with(
            &opts.options([("search_path", schema.as_str())]),
        )
        .await
        .expect("connect A");
        let mut tx = a.begin().await.expect("BEGIN");
        let held: Vec<String> = sqlx::query(
            "UPDATE parks SET claimed_by = 'a', claimed_until = 100000 WHERE (instance_id, seq) IN \
             (SELECT instance_id, seq FROM parks WHERE due_at <= 10 ORDER BY due_at, instance_id, seq \
              LIMIT 10 FOR UPDATE SKIP LOCKED) RETURNING instance_id",
        )
        .fetch_all(&mut *tx)
        .await
        .expect("A claims")
        .iter()
        .map(|r| r.get::<String, _>(0))
        .collect();
        assert_eq!(held.len(), 10);
        sqlx::query("UPDATE instances SET version = version + 1 WHERE id = ANY($1)")
            .bind(&held)
            .execute(&mut *tx)
            .await
            .expect("A updates its instances");
        // B, meanwhile: a claim and the commits of what it claimed.
        let claimed = b.claim_due(10, 100, "b", 60_000).await.expect("B claims without waiting");
        let mine: BTreeSet<String> = claimed.iter().map(|p| p.instance_id.clone()).collect();
        let theirs: BTreeSet<String> = held.iter().cloned().collect();
        assert_eq!(mine.len(), 10, "B claims the ten parks A does not hold");
        assert!(mine.is_disjoint(&theirs), "no park is claimed twice");
        let mut set = tokio::task::JoinSet::new();
        for id in mine.clone() {
            let b = b.clone();
            set.spawn(async move { b.commit_step(&id, 1, &fired(1, 2)).await });
        }
        while let Some(r) = set.join_next().await {
            r.expect("task").expect("B commits without waiting for A");
        }
        // The guard is live: B's step of an instance A holds waits for A's
        // lock, and gives up with a lock timeout.
        let blocked = b.commit_step(&held[0], 1, &fired(1, 2)).await;
        assert!(
            blocked.as_ref().is_err_and(|e| e.to_string().contains("lock timeout")),
            "a step of an instance A holds waits for A: {blocked:?}"
        );
        // Nobody waited for a lock in this schema's tables while A held its own.
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE NOT l.granted AND n.nspname = $1",
        )
        .bind(&schema)
        .fetch_one(&mut *tx)
        .await
        .expect("pg_locks");
        assert_eq!(waiting, 0);
        tx.commit().await.expect("A commits");
        for id in &ids {
            let rec = db.load_instance(id).await.expect("load").expect("exists");
            assert_eq!(rec.version, 2, "{id} was fired once, by A or by B");
        }
        b.close().await;
    })
    .await;
}
