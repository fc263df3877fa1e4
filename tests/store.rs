//! The store contract, run on SQLite and on PostgreSQL (see
//! `tests/common/backends.rs`): what the runtime relies on from either backend.

#[path = "common/backends.rs"]
mod backends;

use std::collections::{BTreeMap, BTreeSet};
use sutra::store::tenancy::TenancyStore;
use sutra::store::{
    AttemptOutput, AttemptRow, Created, DeploymentLoad, DeploymentRecord, DeploymentState,
    EndedInstance, InstanceFilter, JournalRow, KeyHolder, NewDeployment, NewInstance, NewPark,
    NewStart, ParkClaim, StepWrite, Store, StoreError,
};

const T: &str = "acme";

fn new_deployment(id: &str, tenant: &str, process: &str) -> NewDeployment {
    NewDeployment {
        id: id.to_string(),
        tenant: tenant.to_string(),
        process_id: process.to_string(),
        dialect: "bpmn".to_string(),
        source: format!("<definitions id=\"{id}\"/>"),
        modules: BTreeMap::from([("charge".to_string(), "ab12".to_string())]),
        reusable: BTreeMap::new(),
        created_at: 1_000,
    }
}

async fn deploy<S: Store>(store: &S, id: &str) -> DeploymentRecord {
    store
        .insert_deployment(&new_deployment(id, T, "order"))
        .await
        .unwrap()
}

fn new_instance(id: &str, d: &DeploymentRecord, key: Option<&str>) -> NewInstance {
    NewInstance {
        id: id.to_string(),
        tenant: d.tenant.clone(),
        deployment_id: d.id.clone(),
        process_id: d.process_id.clone(),
        idempotency_key: key.map(str::to_string),
        idempotency_fingerprint: key.map(|k| format!("fp-{k}")),
        retry_of: None,
        business_key: None,
        started_at: 100,
    }
}

fn step(state: &str, snapshot: &str, at: i64) -> StepWrite {
    StepWrite {
        snapshot: snapshot.to_string(),
        state: state.to_string(),
        updated_at: at,
        ..StepWrite::default()
    }
}

/// `step`, the first of instance `inst`, with the count deltas the runtime
/// adds to it (an instance that did not exist now counts in its state:
/// migration 0024's maintained counts).
fn counted(inst: &NewInstance, step: StepWrite) -> StepWrite {
    use sutra::store::stats::{slot_of, Tally};
    let now = Tally::of_json(&step.state, &step.snapshot);
    StepWrite {
        stats: Tally::default().deltas(&now, &inst.deployment_id, slot_of(&inst.id)),
        ..step
    }
}

fn timer(seq: i64, due: i64) -> NewPark {
    NewPark {
        seq,
        kind: "timer".to_string(),
        due_at: Some(due),
        message_name: None,
        correlation_key: None,
        claim: None,
    }
}

fn message(seq: i64, name: &str, key: Option<&str>) -> NewPark {
    NewPark {
        seq,
        kind: "message".to_string(),
        due_at: None,
        message_name: Some(name.to_string()),
        correlation_key: key.map(str::to_string),
        claim: None,
    }
}

/// `park` written already claimed by `owner` until `until`.
fn pre_claimed(park: NewPark, owner: &str, until: i64) -> NewPark {
    NewPark {
        claim: Some(ParkClaim {
            owner: owner.to_string(),
            until,
        }),
        ..park
    }
}

fn attempt(node: &str, n: i64) -> AttemptRow {
    AttemptRow {
        token: 1,
        node: node.to_string(),
        attempt: n,
        started_at: 10 * n,
        ended_at: 10 * n + 5,
        outcome: "failed".to_string(),
        code: Some("SUTRA.TASK.TRAP".to_string()),
        class: Some("transient".to_string()),
        message: Some(format!("attempt {n}")),
        calls: None,
        item_node: None,
        item_index: None,
    }
}

fn journal(seq: i64) -> JournalRow {
    JournalRow {
        seq,
        at: seq * 10,
        kind: "node.entered".to_string(),
        node: Some("a".to_string()),
        data: "{}".to_string(),
    }
}

/// Creates a WAITING instance of a fresh deployment with `parks` armed.
async fn waiting_instance<S: Store>(
    store: &S,
    d: &DeploymentRecord,
    id: &str,
    parks: Vec<NewPark>,
) {
    let first = StepWrite {
        arm: parks,
        ..step("WAITING", "{}", 100)
    };
    let inst = new_instance(id, d, None);
    let first = counted(&inst, first);
    assert_eq!(
        store.create_instance(&inst, &first).await.unwrap(),
        Created::New
    );
}

/// An instance that reached `state` at `ended_at` (with one attempt row).
async fn ended_instance<S: Store>(
    store: &S,
    d: &DeploymentRecord,
    id: &str,
    state: &str,
    ended_at: i64,
) {
    let first = StepWrite {
        ended_at: Some(ended_at),
        attempts: vec![attempt("a", 1)],
        ..step(state, "{}", ended_at)
    };
    let inst = new_instance(id, d, None);
    let first = counted(&inst, first);
    store.create_instance(&inst, &first).await.unwrap();
}

backends::store_tests! {
    async fn migrations_are_idempotent_on_reopen(db) {
        let d = deploy(&*db, "d1").await;
        let again = db.reopen().await;
        let third = db.reopen().await;
        assert_eq!(again.get_deployment("d1").await.unwrap(), Some(d.clone()));
        assert_eq!(third.active_deployment(T, "order").await.unwrap(), Some(d));
        assert_eq!(again.backend(), db.backend());
        again.close().await;
        third.close().await;
    }

    async fn deployments_are_versioned_and_the_previous_one_drains(db) {
        let v1 = deploy(&*db, "d1").await;
        assert_eq!((v1.version, v1.state), (1, DeploymentState::Active));
        assert_eq!(v1.modules.get("charge").map(String::as_str), Some("ab12"));
        let v2 = deploy(&*db, "d2").await;
        assert_eq!((v2.version, v2.state), (2, DeploymentState::Active));
        assert_eq!(db.get_deployment("d1").await.unwrap().unwrap().state, DeploymentState::Draining);
        assert_eq!(db.active_deployment(T, "order").await.unwrap().unwrap().id, "d2");

        // Versions count per (tenant, process).
        let other = db.insert_deployment(&new_deployment("d3", T, "refund")).await.unwrap();
        let elsewhere = db.insert_deployment(&new_deployment("d4", "globex", "order")).await.unwrap();
        assert_eq!((other.version, elsewhere.version), (1, 1));
        let ids: Vec<String> = db.list_deployments(Some(T)).await.unwrap().into_iter().map(|d| d.id).collect();
        assert_eq!(ids, ["d1", "d2", "d3"]);
        assert_eq!(db.list_deployments(None).await.unwrap().len(), 4);

        // A refused deploy (id reused) rolls back the DRAINING of the active one.
        let err = db.insert_deployment(&new_deployment("d2", T, "order")).await.unwrap_err();
        assert!(matches!(err, StoreError::Duplicate(_)), "{err:?}");
        assert_eq!(db.active_deployment(T, "order").await.unwrap().unwrap().id, "d2");

        db.set_deployment_state("d1", DeploymentState::Retired).await.unwrap();
        assert_eq!(db.get_deployment("d1").await.unwrap().unwrap().state, DeploymentState::Retired);
        let err = db.set_deployment_state("nope", DeploymentState::Retired).await.unwrap_err();
        assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
        assert_eq!(db.get_deployment("nope").await.unwrap(), None);
    }

    async fn create_is_idempotent_per_tenant_key(db) {
        let d = deploy(&*db, "d1").await;
        let first = StepWrite { arm: vec![timer(1, 500)], ..step("WAITING", "{\"n\":1}", 100) };
        assert_eq!(db.create_instance(&new_instance("i1", &d, Some("k")), &first).await.unwrap(), Created::New);
        // Same key, another id: answers the first instance and writes nothing.
        let again = StepWrite { arm: vec![timer(1, 700)], ..step("WAITING", "{\"n\":2}", 100) };
        assert_eq!(
            db.create_instance(&new_instance("i2", &d, Some("k")), &again).await.unwrap(),
            Created::Existing("i1".to_string())
        );
        assert_eq!(db.load_instance("i2").await.unwrap(), None);
        assert!(db.parks_of("i2").await.unwrap().is_empty());
        let i1 = db.load_instance("i1").await.unwrap().unwrap();
        assert_eq!((i1.version, i1.snapshot.as_str(), i1.idempotency_key.as_deref()), (1, "{\"n\":1}", Some("k")));
        // The first start's fingerprint is kept beside its key (issue 16).
        assert_eq!(
            db.instance_by_key(T, "k", 100).await.unwrap(),
            Some(KeyHolder { id: "i1".into(), fingerprint: Some("fp-k".into()), ended: None })
        );
        assert_eq!(db.instance_by_key(T, "other", 100).await.unwrap(), None);

        // Without a key every start is new; a reused id is refused.
        let running = step("RUNNING", "{}", 1);
        assert_eq!(db.create_instance(&new_instance("i3", &d, None), &running).await.unwrap(), Created::New);
        assert_eq!(db.create_instance(&new_instance("i4", &d, None), &running).await.unwrap(), Created::New);
        let err = db.create_instance(&new_instance("i3", &d, None), &running).await.unwrap_err();
        assert!(matches!(err, StoreError::Duplicate(_)), "{err:?}");

        // Keys are per tenant.
        let g = db.insert_deployment(&new_deployment("g1", "globex", "order")).await.unwrap();
        let created = db.create_instance(&new_instance("g-i1", &g, Some("k")), &running).await.unwrap();
        assert_eq!(created, Created::New);
    }

    /// The owned create (the runtime's start path) writes what the borrowed
    /// one writes and hands the step back whole, written or refused.
    async fn an_owned_create_writes_the_step_and_hands_it_back(db) {
        let d = deploy(&*db, "d1").await;
        let start = |id: &str, key: Option<&str>, step: &StepWrite| {
            Box::new(NewStart { instance: new_instance(id, &d, key), step: step.clone() })
        };
        let first = StepWrite { arm: vec![timer(1, 500)], ..step("WAITING", "{\"n\":1}", 100) };
        let (created, back) = db.create_instance_owned(start("i1", Some("k"), &first)).await;
        assert_eq!(created.unwrap(), Created::New);
        assert_eq!(*back, *start("i1", Some("k"), &first));
        let i1 = db.load_instance("i1").await.unwrap().unwrap();
        assert_eq!((i1.version, i1.state.as_str(), i1.snapshot.as_str()), (1, "WAITING", "{\"n\":1}"));
        assert_eq!(db.parks_of("i1").await.unwrap().len(), 1);
        // A reused key answers the first instance; a reused id is refused: the step comes back either way.
        let again = step("RUNNING", "{\"n\":2}", 100);
        let (created, back) = db.create_instance_owned(start("i2", Some("k"), &again)).await;
        assert_eq!(created.unwrap(), Created::Existing("i1".to_string()));
        assert_eq!(back.step, again);
        assert_eq!(db.load_instance("i2").await.unwrap(), None);
        let (created, back) = db.create_instance_owned(start("i1", None, &again)).await;
        assert!(matches!(created, Err(StoreError::Duplicate(_))), "{created:?}");
        assert_eq!(back.step, again);
        assert_eq!(db.load_instance("i1").await.unwrap().unwrap().snapshot, "{\"n\":1}");
    }

    /// The owned commit (every drive's path) writes what the borrowed one
    /// writes and hands the step back whole, written or refused.
    async fn an_owned_commit_writes_the_step_and_hands_it_back(db) {
        let d = deploy(&*db, "d1").await;
        waiting_instance(&*db, &d, "i1", vec![timer(1, 500)]).await;
        let next = StepWrite {
            arm: vec![timer(2, 900)],
            withdraw: vec![1],
            attempts: vec![attempt("a", 1)],
            ..step("WAITING", "{\"at\":2}", 200)
        };
        // A stale version writes nothing; the step comes back.
        let (done, back) = db.commit_step_owned("i1", 7, Box::new(next.clone())).await;
        assert!(matches!(done, Err(StoreError::Conflict(_))), "{done:?}");
        assert_eq!(*back, next);
        assert_eq!(db.load_instance("i1").await.unwrap().unwrap().version, 1);
        assert!(db.attempts("i1").await.unwrap().is_empty());
        // The current version writes all of it; the step comes back unchanged.
        let (done, back) = db.commit_step_owned("i1", 1, Box::new(next.clone())).await;
        done.unwrap();
        assert_eq!(*back, next);
        let i = db.load_instance("i1").await.unwrap().unwrap();
        assert_eq!((i.version, i.state.as_str(), i.snapshot.as_str()), (2, "WAITING", "{\"at\":2}"));
        let parks: Vec<i64> = db.parks_of("i1").await.unwrap().iter().map(|p| p.seq).collect();
        assert_eq!(parks, [2]);
        assert_eq!(db.attempts("i1").await.unwrap(), vec![attempt("a", 1)]);
        // A missing instance is refused as the borrowed commit refuses it.
        let (done, back) = db.commit_step_owned("missing", 1, Box::new(next.clone())).await;
        assert!(matches!(done, Err(StoreError::NotFound(_))), "{done:?}");
        assert_eq!(*back, next);
    }

    /// Issue 33 item 5: an instance deleted at its end (retention PT0S)
    /// leaves its idempotency key for its window: the key answers what the
    /// instance ended as, a start with it creates nothing; past the window
    /// the key is free again and the sweep's purge removes it.
    async fn a_deleted_instance_keeps_its_key_for_its_window(db) {
        let d = deploy(&*db, "d1").await;
        let ended = StepWrite {
            ended_at: Some(150),
            delete: true,
            key_window_ms: 1_000,
            ..step("COMPLETED", "{}", 150)
        };
        // Deleted in its first step (the create), and in a later one (a commit).
        assert_eq!(db.create_instance(&new_instance("i1", &d, Some("k")), &ended).await.unwrap(), Created::New);
        assert_eq!(db.load_instance("i1").await.unwrap(), None);
        let running = step("RUNNING", "{}", 100);
        assert_eq!(db.create_instance(&new_instance("i2", &d, Some("k2")), &running).await.unwrap(), Created::New);
        db.commit_step("i2", 1, &StepWrite { state: "TERMINATED".into(), ..ended.clone() }).await.unwrap();
        assert_eq!(db.load_instance("i2").await.unwrap(), None);

        let kept = |id: &str, state: &str| KeyHolder {
            id: id.into(),
            fingerprint: Some(format!("fp-{}", if id == "i1" { "k" } else { "k2" })),
            ended: Some(EndedInstance {
                state: state.into(),
                process_id: "order".into(),
                deployment_id: "d1".into(),
                started_at: 100,
                ended_at: Some(150),
            }),
        };
        assert_eq!(db.instance_by_key(T, "k", 1_149).await.unwrap(), Some(kept("i1", "COMPLETED")));
        assert_eq!(db.instance_by_key(T, "k2", 1_149).await.unwrap(), Some(kept("i2", "TERMINATED")));
        // Another tenant's key of the same name is its own.
        assert_eq!(db.instance_by_key("globex", "k", 1_149).await.unwrap(), None);
        // A start with the key inside its window answers the deleted instance, writes nothing.
        let again = NewInstance { started_at: 1_000, ..new_instance("i3", &d, Some("k")) };
        assert_eq!(db.create_instance(&again, &running).await.unwrap(), Created::Existing("i1".into()));
        assert_eq!(db.load_instance("i3").await.unwrap(), None);
        // Past it (its end + 1 s), the key is free.
        assert_eq!(db.instance_by_key(T, "k", 1_150).await.unwrap(), None);
        let later = NewInstance { started_at: 1_200, ..new_instance("i4", &d, Some("k")) };
        assert_eq!(db.create_instance(&later, &running).await.unwrap(), Created::New);
        assert_eq!(db.instance_by_key(T, "k", 1_200).await.unwrap().unwrap().id, "i4");
        assert_eq!(db.purge_kept_keys(1_149).await.unwrap(), 0);
        assert_eq!(db.purge_kept_keys(1_150).await.unwrap(), 2);
        // A key without an instance behind it keeps nothing; nor a deleted one without a key.
        assert_eq!(db.create_instance(&new_instance("i5", &d, None), &ended).await.unwrap(), Created::New);
        assert_eq!(db.purge_kept_keys(i64::MAX / 2).await.unwrap(), 0);
    }

    async fn concurrent_deploys_get_distinct_versions_and_one_active(db) {
        let mut tasks = Vec::new();
        for n in 0..6 {
            let store = db.store.clone();
            let d = new_deployment(&format!("d{n}"), T, "order");
            tasks.push(tokio::spawn(async move { store.insert_deployment(&d).await.unwrap() }));
        }
        let mut versions = Vec::new();
        for t in tasks {
            versions.push(t.await.unwrap().version);
        }
        versions.sort();
        assert_eq!(versions, [1, 2, 3, 4, 5, 6]);
        let all = db.list_deployments(Some(T)).await.unwrap();
        let active: Vec<_> = all.iter().filter(|d| d.state == DeploymentState::Active).collect();
        assert_eq!(active.len(), 1);
        assert_eq!(active[0].version, 6, "the last version is the active one");
    }

    async fn concurrent_starts_with_one_key_create_one_instance(db) {
        let d = deploy(&*db, "d1").await;
        let mut tasks = Vec::new();
        for n in 0..6 {
            let store = db.store.clone();
            let inst = new_instance(&format!("i{n}"), &d, Some("order-42"));
            let first = StepWrite { arm: vec![timer(1, 10)], ..step("WAITING", "{}", 1) };
            tasks.push(tokio::spawn(async move { (inst.id.clone(), store.create_instance(&inst, &first).await.unwrap()) }));
        }
        let mut winners = Vec::new();
        let mut answers = Vec::new();
        for t in tasks {
            let (id, created) = t.await.unwrap();
            match created {
                Created::New => winners.push(id),
                Created::Existing(existing) => answers.push(existing),
            }
        }
        assert_eq!(winners.len(), 1, "{winners:?}");
        assert!(answers.iter().all(|a| *a == winners[0]), "{answers:?} vs {winners:?}");
        assert_eq!(db.live_instances().await.unwrap(), winners);
        assert_eq!(db.park_counts().await.unwrap(), [("timer".to_string(), 1)]);
    }

    async fn a_step_failing_half_way_among_concurrent_ones_fails_alone(db) {
        // Steps sent together (SQLite's writer runs them in one transaction):
        // the one that fails after writing its snapshot keeps nothing, the
        // others commit.
        let d = deploy(&*db, "d1").await;
        for n in 0..8 {
            waiting_instance(&*db, &d, &format!("i{n}"), vec![timer(1, 1_000)]).await;
        }
        let mut tasks = Vec::new();
        for n in 0..8i64 {
            let store = db.store.clone();
            // i3 arms park 1 again: its update succeeds, then the park insert fails.
            let seq = if n == 3 { 1 } else { 2 };
            let write = StepWrite {
                arm: vec![timer(seq, 2_000)],
                attempts: vec![attempt("a", 1)],
                ..step("WAITING", &format!("s{n}"), 5)
            };
            tasks.push(tokio::spawn(async move { store.commit_step(&format!("i{n}"), 1, &write).await }));
        }
        for (n, task) in tasks.into_iter().enumerate() {
            let result = task.await.unwrap();
            let id = format!("i{n}");
            let i = db.load_instance(&id).await.unwrap().unwrap();
            let parks: Vec<i64> = db.parks_of(&id).await.unwrap().iter().map(|p| p.seq).collect();
            let attempts = db.attempts(&id).await.unwrap().len();
            if n == 3 {
                assert!(matches!(result, Err(StoreError::Duplicate(_))), "{result:?}");
                assert_eq!((i.version, i.snapshot.as_str(), parks, attempts), (1, "{}", vec![1], 0));
            } else {
                result.unwrap();
                assert_eq!((i.version, i.snapshot, parks, attempts), (2, format!("s{n}"), vec![1, 2], 1));
            }
        }
    }

    async fn concurrent_commits_at_one_version_exactly_one_wins(db) {
        let d = deploy(&*db, "d1").await;
        waiting_instance(&*db, &d, "i1", vec![]).await;
        for round in 1..=5i64 {
            let mut tasks = Vec::new();
            for n in 0..4 {
                let store = db.store.clone();
                let write = StepWrite {
                    arm: vec![timer(round * 10 + n, 1_000)],
                    ..step("WAITING", &format!("{round}/{n}"), round)
                };
                tasks.push(tokio::spawn(async move { store.commit_step("i1", round, &write).await }));
            }
            let mut won = 0;
            for t in tasks {
                match t.await.unwrap() {
                    Ok(()) => won += 1,
                    Err(StoreError::Conflict(id)) => assert_eq!(id, "i1"),
                    Err(e) => panic!("unexpected {e:?}"),
                }
            }
            assert_eq!(won, 1, "round {round}");
            let i = db.load_instance("i1").await.unwrap().unwrap();
            assert_eq!(i.version, round + 1);
            // Only the winner's park exists.
            assert_eq!(db.parks_of("i1").await.unwrap().len() as i64, round);
        }
        let err = db.commit_step("missing", 1, &step("RUNNING", "{}", 1)).await.unwrap_err();
        assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
    }

    async fn a_step_writes_everything_or_nothing(db) {
        let d = deploy(&*db, "d1").await;
        waiting_instance(&*db, &d, "i1", vec![timer(1, 500)]).await;
        let full = StepWrite {
            arm: vec![timer(2, 900), message(3, "paid", Some("o-1"))],
            withdraw: vec![1],
            attempts: vec![attempt("a", 1)],
            journal: vec![journal(1)],
            ..step("WAITING", "{\"at\":2}", 200)
        };
        // A stale version writes none of it.
        let err = db.commit_step("i1", 7, &full).await.unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
        let parks: Vec<i64> = db.parks_of("i1").await.unwrap().iter().map(|p| p.seq).collect();
        assert_eq!(parks, [1]);
        assert!(db.attempts("i1").await.unwrap().is_empty());
        assert!(db.journal("i1").await.unwrap().is_empty());

        // A step failing half-way (a park seq armed twice) rolls back the snapshot too.
        let broken = StepWrite {
            arm: vec![timer(1, 600)],
            attempts: vec![attempt("a", 1)],
            ..step("WAITING", "{\"broken\":1}", 300)
        };
        let err = db.commit_step("i1", 1, &broken).await.unwrap_err();
        assert!(matches!(err, StoreError::Duplicate(_)), "{err:?}");
        let i = db.load_instance("i1").await.unwrap().unwrap();
        assert_eq!((i.version, i.snapshot.as_str(), i.updated_at), (1, "{}", 100));
        assert!(db.attempts("i1").await.unwrap().is_empty());

        db.commit_step("i1", 1, &full).await.unwrap();
        let i = db.load_instance("i1").await.unwrap().unwrap();
        assert_eq!((i.version, i.snapshot.as_str(), i.updated_at), (2, "{\"at\":2}", 200));
        let parks = db.parks_of("i1").await.unwrap();
        assert_eq!(parks.iter().map(|p| p.seq).collect::<Vec<_>>(), [2, 3]);
        assert_eq!((parks[0].tenant.as_str(), parks[0].deployment_id.as_str()), (T, "d1"));
        assert_eq!(db.attempts("i1").await.unwrap(), vec![attempt("a", 1)]);
        assert_eq!(db.journal("i1").await.unwrap(), vec![journal(1)]);

        // Group commit: one conflict fails the whole batch.
        waiting_instance(&*db, &d, "i2", vec![]).await;
        let batch = vec![
            ("i2".to_string(), 1, StepWrite { arm: vec![timer(1, 1)], ..step("WAITING", "b", 1) }),
            ("i1".to_string(), 1, step("WAITING", "stale", 1)),
        ];
        assert!(matches!(db.commit_steps(&batch).await.unwrap_err(), StoreError::Conflict(id) if id == "i1"));
        let i2 = db.load_instance("i2").await.unwrap().unwrap();
        assert_eq!((i2.version, i2.snapshot.as_str()), (1, "{}"));
        assert!(db.parks_of("i2").await.unwrap().is_empty());
        let batch = vec![
            ("i2".to_string(), 1, step("WAITING", "b", 1)),
            ("i1".to_string(), 2, step("WAITING", "c", 1)),
        ];
        db.commit_steps(&batch).await.unwrap();
        assert_eq!(db.load_instance("i1").await.unwrap().unwrap().version, 3);
        assert_eq!(db.load_instance("i2").await.unwrap().unwrap().version, 2);
    }

    async fn terminal_step_withdraws_all_and_delete_removes_everything(db) {
        let d = deploy(&*db, "d1").await;
        waiting_instance(&*db, &d, "i1", vec![timer(1, 500), timer(2, 600), message(3, "m", None)]).await;
        let done = StepWrite {
            withdraw_all: true,
            ended_at: Some(700),
            attempts: vec![attempt("a", 1)],
            journal: vec![journal(1)],
            ..step("COMPLETED", "{\"done\":true}", 700)
        };
        db.commit_step("i1", 1, &done).await.unwrap();
        assert!(db.parks_of("i1").await.unwrap().is_empty());
        let i = db.load_instance("i1").await.unwrap().unwrap();
        assert_eq!((i.state.as_str(), i.ended_at, i.version), ("COMPLETED", Some(700), 2));
        // A later step without a stamp keeps the end instant.
        db.commit_step("i1", 2, &step("COMPLETED", "{\"done\":true}", 800)).await.unwrap();
        assert_eq!(db.load_instance("i1").await.unwrap().unwrap().ended_at, Some(700));

        waiting_instance(&*db, &d, "i2", vec![timer(1, 500), message(2, "m", None)]).await;
        let gone = StepWrite {
            delete: true,
            attempts: vec![attempt("a", 1)],
            journal: vec![journal(1)],
            ..step("COMPLETED", "{}", 900)
        };
        let before = StepWrite { attempts: vec![attempt("b", 1)], journal: vec![journal(9)], ..step("WAITING", "{}", 800) };
        db.commit_step("i2", 1, &before).await.unwrap();
        db.commit_step("i2", 2, &gone).await.unwrap();
        assert_eq!(db.load_instance("i2").await.unwrap(), None);
        assert!(db.parks_of("i2").await.unwrap().is_empty());
        assert!(db.attempts("i2").await.unwrap().is_empty());
        assert!(db.journal("i2").await.unwrap().is_empty());
        assert!(db.find_message_parks(T, "m", None).await.unwrap().is_empty());
        // The other instance is untouched.
        assert_eq!(db.attempts("i1").await.unwrap().len(), 1);
    }

    async fn each_due_park_goes_to_exactly_one_of_many_claimers(db) {
        let d = deploy(&*db, "d1").await;
        let mut due = BTreeSet::new();
        for i in 0..12 {
            let id = format!("i{i:02}");
            let parks = vec![timer(1, 100 + i), timer(2, 200 + i), timer(3, 5_000), message(4, "m", None)];
            waiting_instance(&*db, &d, &id, parks).await;
            due.insert((id.clone(), 1));
            due.insert((id, 2));
        }
        let mut tasks = Vec::new();
        for c in 0..8 {
            let store = db.store.clone();
            tasks.push(tokio::spawn(async move {
                let owner = format!("replica-{c}");
                let mut got = Vec::new();
                loop {
                    let batch = store.claim_due(1_000, 3, &owner, 60_000).await.unwrap();
                    if batch.is_empty() {
                        return got;
                    }
                    got.extend(batch.into_iter().map(|p| (p.instance_id, p.seq)));
                }
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        let unique: BTreeSet<_> = all.iter().cloned().collect();
        assert_eq!(unique.len(), all.len(), "a park was handed out twice");
        assert_eq!(unique, due);
        assert!(db.claim_due(1_000, 100, "late", 60_000).await.unwrap().is_empty());
    }

    async fn an_expired_claim_is_claimable_again_a_live_one_is_not(db) {
        let d = deploy(&*db, "d1").await;
        waiting_instance(&*db, &d, "i1", vec![timer(1, 100), timer(2, 150)]).await;
        let got = db.claim_due(200, 10, "a", 1_000).await.unwrap();
        assert_eq!(got.iter().map(|p| p.seq).collect::<Vec<_>>(), [1, 2], "earliest due first");
        assert_eq!((got[0].kind.as_str(), got[0].due_at), ("timer", Some(100)));
        assert!(db.claim_due(1_199, 10, "b", 1_000).await.unwrap().is_empty(), "claim is live until 1200");
        let taken = db.claim_due(1_200, 1, "b", 1_000).await.unwrap();
        assert_eq!(taken.iter().map(|p| p.seq).collect::<Vec<_>>(), [1], "limit honoured");

        // Releasing: only the holder's release counts; then claimable at once.
        db.release_claim("i1", 1, "a").await.unwrap();
        let seqs = |v: Vec<sutra::store::ParkRecord>| v.into_iter().map(|p| p.seq).collect::<Vec<_>>();
        assert_eq!(seqs(db.claim_due(1_300, 10, "c", 1_000).await.unwrap()), [2], "a's lapsed claim, not b's live one");
        db.release_claim("i1", 1, "b").await.unwrap();
        assert_eq!(seqs(db.claim_due(1_300, 10, "c", 1_000).await.unwrap()), [1]);
        assert!(db.claim_due(1_300, 0, "c", 1_000).await.unwrap().is_empty());
    }

    async fn next_due_is_the_earliest_instant_a_claim_can_succeed(db) {
        assert_eq!(db.next_due().await.unwrap(), None);
        let d = deploy(&*db, "d1").await;
        waiting_instance(&*db, &d, "m1", vec![message(1, "m", Some("k"))]).await;
        assert_eq!(db.next_due().await.unwrap(), None, "message waits are never due");
        waiting_instance(&*db, &d, "t1", vec![timer(1, 900), timer(2, 500)]).await;
        assert_eq!(db.next_due().await.unwrap(), Some(500));
        // Claimed (lease until 1600): the park counts again only when the claim lapses.
        assert_eq!(db.claim_due(600, 10, "a", 1_000).await.unwrap().len(), 1);
        assert_eq!(db.next_due().await.unwrap(), Some(900));
        db.commit_step("t1", 1, &StepWrite { withdraw: vec![1], ..step("WAITING", "{}", 700) }).await.unwrap();
        assert_eq!(db.next_due().await.unwrap(), Some(1_600));
        db.release_claim("t1", 2, "a").await.unwrap();
        assert_eq!(db.next_due().await.unwrap(), Some(500));
    }

    async fn a_pre_claimed_park_goes_to_nobody_before_its_claim_lapses(db) {
        let d = deploy(&*db, "d1").await;
        // Armed by the create: due at 100, pre-claimed by "me" until 5000.
        waiting_instance(&*db, &d, "i1", vec![pre_claimed(timer(1, 100), "me", 5_000), timer(2, 200)]).await;
        assert_eq!(db.next_due().await.unwrap(), Some(200), "the unclaimed park comes first");
        let seqs = |v: Vec<sutra::store::ParkRecord>| v.into_iter().map(|p| (p.instance_id, p.seq)).collect::<Vec<_>>();
        assert_eq!(seqs(db.claim_due(1_000, 10, "other", 60_000).await.unwrap()), [("i1".to_string(), 2)]);
        assert!(db.claim_due(1_000, 10, "me", 60_000).await.unwrap().is_empty(), "not even to its owner");
        assert_eq!(db.next_due().await.unwrap(), Some(5_000), "next_due reports the pre-claim's until");
        assert!(db.claim_due(4_999, 10, "other", 60_000).await.unwrap().is_empty());
        let lapsed = db.claim_due(5_000, 10, "other", 1_000).await.unwrap();
        assert_eq!(seqs(lapsed.clone()), [("i1".to_string(), 1)], "claimable by anyone once lapsed");
        assert_eq!((lapsed[0].kind.as_str(), lapsed[0].due_at), ("timer", Some(100)));

        // Armed by a step: released by its owner, claimable at once; by anyone else, not.
        waiting_instance(&*db, &d, "i2", vec![]).await;
        let arm = StepWrite { arm: vec![pre_claimed(timer(7, 300), "me", 9_000)], ..step("WAITING", "{}", 300) };
        db.commit_step("i2", 1, &arm).await.unwrap();
        assert_eq!(db.next_due().await.unwrap(), Some(6_000), "i1/1 is claimed by other until 6000");
        db.release_claim("i2", 7, "other").await.unwrap();
        assert!(db.claim_due(1_000, 10, "other", 60_000).await.unwrap().is_empty(), "only the owner releases");
        db.release_claim("i2", 7, "me").await.unwrap();
        assert_eq!(db.next_due().await.unwrap(), Some(300));
        assert_eq!(seqs(db.claim_due(1_000, 10, "other", 60_000).await.unwrap()), [("i2".to_string(), 7)]);

        // A pre-claim lapsing before its park is due counts from the due instant.
        waiting_instance(&*db, &d, "i3", vec![pre_claimed(timer(1, 800), "me", 50)]).await;
        assert_eq!(db.next_due().await.unwrap(), Some(800));
        assert!(db.claim_due(799, 10, "other", 60_000).await.unwrap().is_empty());
        db.release_claim("i3", 1, "me").await.unwrap();
        assert_eq!(db.next_due().await.unwrap(), Some(800));
        assert_eq!(seqs(db.claim_due(800, 10, "other", 60_000).await.unwrap()), [("i3".to_string(), 1)]);
        // A message wait ignores a pre-claim: it is found, never due.
        waiting_instance(&*db, &d, "i4", vec![pre_claimed(message(1, "m", None), "me", 50)]).await;
        assert_eq!(db.find_message_parks(T, "m", None).await.unwrap().len(), 1);
        assert_eq!(db.next_due().await.unwrap(), Some(6_000));
        let lapsed = seqs(db.claim_due(i64::MAX / 2, 10, "other", 1).await.unwrap());
        assert_eq!(lapsed.len(), 4, "every lapsed claim, never the message wait: {lapsed:?}");
        assert!(lapsed.iter().all(|(id, _)| id != "i4"));
    }

    async fn next_due_is_the_earliest_lapse_among_many_claims(db) {
        let d = deploy(&*db, "d1").await;
        let parks = (1..=40).map(|s| timer(s, 10 * s)).collect();
        waiting_instance(&*db, &d, "i1", parks).await;
        // Claims lapsing at 1000 + 10*k, taken in order of due (k = 0..=3).
        for k in 0..4 {
            assert_eq!(db.claim_due(400, 10, &format!("c{k}"), 600 + 10 * k).await.unwrap().len(), 10);
        }
        assert_eq!(db.next_due().await.unwrap(), Some(1_000));
        for seq in 1..=10 {
            db.release_claim("i1", seq, "c0").await.unwrap();
        }
        assert_eq!(db.next_due().await.unwrap(), Some(10), "released: due again at once");
        assert_eq!(db.claim_due(400, 100, "c0", 1_000).await.unwrap().len(), 10);
        assert_eq!(db.next_due().await.unwrap(), Some(1_010));
        // Pre-claims of later parks join the claimed branch.
        waiting_instance(&*db, &d, "i2", vec![pre_claimed(timer(1, 900), "me", 1_005)]).await;
        assert_eq!(db.next_due().await.unwrap(), Some(1_005));
    }

    async fn other_writes_interleave_with_instance_writes_and_claims(db) {
        use sutra::store::tenancy::{TenancyStore, TenantLimits, TenantRecord};
        let d = deploy(&*db, "base").await;
        let mut tasks = Vec::new();
        // Instance writers: create, then steps arming due parks.
        for w in 0..4 {
            let store = db.store.clone();
            let d = d.clone();
            tasks.push(tokio::spawn(async move {
                for n in 0..10 {
                    let id = format!("w{w}-{n}");
                    let first = StepWrite { arm: vec![timer(1, 10)], ..step("WAITING", "{}", 1) };
                    store.create_instance(&new_instance(&id, &d, None), &first).await.unwrap();
                    for v in 1..=3 {
                        let next = StepWrite { arm: vec![timer(v + 1, 10)], ..step("WAITING", "{}", v) };
                        store.commit_step(&id, v, &next).await.unwrap();
                    }
                }
            }));
        }
        // Claimers.
        for c in 0..2 {
            let store = db.store.clone();
            tasks.push(tokio::spawn(async move {
                let owner = format!("claimer-{c}");
                for _ in 0..30 {
                    for p in store.claim_due(1_000, 4, &owner, 60_000).await.unwrap() {
                        if p.seq % 2 == 0 {
                            store.release_claim(&p.instance_id, p.seq, &owner).await.unwrap();
                        }
                    }
                }
            }));
        }
        // The writes that stay on the other write path.
        let store = db.store.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..10 {
                let deployment = store.insert_deployment(&new_deployment(&format!("p{n}"), T, &format!("proc{n}"))).await.unwrap();
                store.put_module(T, &format!("digest{n}"), b"\0asm").await.unwrap();
                assert!(store.try_lease("sweeper", "me", 1_000 + n, 500).await.unwrap());
                store.sweep(1_000, 10).await.unwrap();
                let tenant = TenantRecord { name: format!("t{n}"), created_at: n, limits: TenantLimits::default() };
                store.create_tenant(&tenant).await.unwrap();
                store.set_deployment_state(&deployment.id, DeploymentState::Draining).await.unwrap();
            }
        }));
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(db.live_instances().await.unwrap().len(), 40);
        for w in 0..4 {
            for n in 0..10 {
                let i = db.load_instance(&format!("w{w}-{n}")).await.unwrap().unwrap();
                assert_eq!(i.version, 4);
                assert_eq!(db.parks_of(&i.id).await.unwrap().len(), 4);
            }
        }
        assert_eq!(db.list_deployments(Some(T)).await.unwrap().len(), 11);
        assert_eq!(db.list_tenants().await.unwrap().len(), 10);
        assert_eq!(db.get_module(T, "digest9").await.unwrap().as_deref(), Some(&b"\0asm"[..]));
        // Every park is claimable exactly once more in the end.
        let mut rest = 0;
        loop {
            let got = db.claim_due(100_000, 64, "last", 1_000).await.unwrap().len();
            if got == 0 {
                break;
            }
            rest += got;
        }
        assert_eq!(rest, 160);
    }

    async fn a_thousand_concurrent_creates_each_get_their_own_answer(db) {
        let d = deploy(&*db, "d1").await;
        let mut tasks = Vec::new();
        for n in 0..1_000 {
            let store = db.store.clone();
            // Every 100th start reuses the id of the one before it: a duplicate.
            let id = if n % 100 == 99 { format!("i{:04}", n - 1) } else { format!("i{n:04}") };
            let inst = new_instance(&id, &d, None);
            let first = StepWrite { arm: vec![timer(1, 10)], ..step("WAITING", "{}", 1) };
            tasks.push(tokio::spawn(async move { store.create_instance(&inst, &first).await }));
        }
        let (mut new, mut duplicates) = (0, 0);
        for t in tasks {
            match t.await.unwrap() {
                Ok(Created::New) => new += 1,
                Err(StoreError::Duplicate(_)) => duplicates += 1,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!((new, duplicates), (990, 10));
        assert_eq!(db.live_instances().await.unwrap().len(), 990);
        assert_eq!(db.park_counts().await.unwrap(), [("timer".to_string(), 990)]);
    }

    async fn message_parks_are_found_by_tenant_name_and_key(db) {
        let d = deploy(&*db, "d1").await;
        waiting_instance(&*db, &d, "i1", vec![message(1, "paid", Some("o-1")), timer(2, 100)]).await;
        waiting_instance(&*db, &d, "i2", vec![message(1, "paid", None)]).await;
        waiting_instance(&*db, &d, "i3", vec![message(1, "paid", Some("o-2")), message(2, "shipped", Some("o-1"))]).await;
        let g = db.insert_deployment(&new_deployment("g1", "globex", "order")).await.unwrap();
        waiting_instance(&*db, &g, "g-i1", vec![message(1, "paid", Some("o-1"))]).await;

        let hit = db.find_message_parks(T, "paid", Some("o-1")).await.unwrap();
        assert_eq!(hit.iter().map(|p| (p.instance_id.as_str(), p.seq)).collect::<Vec<_>>(), [("i1", 1)]);
        assert_eq!(hit[0].correlation_key.as_deref(), Some("o-1"));
        assert_eq!(hit[0].due_at, None);
        let keyless = db.find_message_parks(T, "paid", None).await.unwrap();
        assert_eq!(keyless.iter().map(|p| p.instance_id.as_str()).collect::<Vec<_>>(), ["i2"]);
        assert!(db.find_message_parks(T, "refunded", Some("o-1")).await.unwrap().is_empty());
        assert_eq!(db.find_message_parks("globex", "paid", Some("o-1")).await.unwrap().len(), 1);
        // Message waits are never claimed by the timer poller.
        assert_eq!(db.claim_due(i64::MAX / 2, 100, "a", 1).await.unwrap().len(), 1);
        assert_eq!(db.park_counts().await.unwrap(), [("message".to_string(), 5), ("timer".to_string(), 1)]);
    }

    async fn a_replayed_step_records_attempts_and_journal_once(db) {
        let d = deploy(&*db, "d1").await;
        waiting_instance(&*db, &d, "i1", vec![]).await;
        let first = StepWrite { attempts: vec![attempt("a", 1)], journal: vec![journal(1)], ..step("RUNNING", "{}", 1) };
        db.commit_step("i1", 1, &first).await.unwrap();
        let replay = StepWrite {
            attempts: vec![attempt("a", 1), attempt("a", 2)],
            journal: vec![journal(1), journal(2)],
            ..step("RUNNING", "{}", 2)
        };
        db.commit_step("i1", 2, &replay).await.unwrap();
        assert_eq!(db.attempts("i1").await.unwrap(), vec![attempt("a", 1), attempt("a", 2)]);
        assert_eq!(db.journal("i1").await.unwrap(), vec![journal(1), journal(2)]);
    }

    async fn sweep_deletes_only_ended_completed_or_terminated_without_parks(db) {
        let d = deploy(&*db, "d1").await;
        ended_instance(&*db, &d, "done-old", "COMPLETED", 100).await;
        ended_instance(&*db, &d, "term-old", "TERMINATED", 200).await;
        ended_instance(&*db, &d, "done-new", "COMPLETED", 5_000).await;
        ended_instance(&*db, &d, "failed-old", "FAILED", 100).await;
        // Ended but still holding a park: kept.
        let parked = StepWrite { ended_at: Some(100), arm: vec![message(1, "m", None)], ..step("COMPLETED", "{}", 100) };
        db.create_instance(&new_instance("parked-old", &d, None), &parked).await.unwrap();
        waiting_instance(&*db, &d, "live", vec![timer(1, 10)]).await;
        db.create_instance(&new_instance("running", &d, None), &step("RUNNING", "{}", 1)).await.unwrap();

        assert_eq!(db.sweep(1_000, 1).await.unwrap(), 1, "limit honoured");
        assert_eq!(db.load_instance("done-old").await.unwrap(), None, "oldest first");
        assert!(db.attempts("done-old").await.unwrap().is_empty());
        assert_eq!(db.sweep(1_000, 100).await.unwrap(), 1);
        assert_eq!(db.load_instance("term-old").await.unwrap(), None);
        assert_eq!(db.sweep(1_000, 100).await.unwrap(), 0);
        for kept in ["done-new", "failed-old", "parked-old", "live", "running"] {
            assert!(db.load_instance(kept).await.unwrap().is_some(), "{kept} was swept");
        }
        assert_eq!(db.attempts("failed-old").await.unwrap().len(), 1);
    }

    async fn a_lease_has_one_holder_at_a_time(db) {
        assert!(db.try_lease("sweeper", "a", 1_000, 500).await.unwrap());
        assert!(!db.try_lease("sweeper", "b", 1_200, 500).await.unwrap(), "held by a until 1500");
        assert!(db.try_lease("sweeper", "a", 1_400, 500).await.unwrap(), "renewed until 1900");
        assert!(!db.try_lease("sweeper", "b", 1_600, 500).await.unwrap(), "the renewal counts");
        assert!(db.try_lease("sweeper", "b", 1_900, 500).await.unwrap(), "taken over after expiry");
        assert!(!db.try_lease("sweeper", "a", 2_000, 500).await.unwrap());
        assert!(db.try_lease("arming", "a", 2_000, 500).await.unwrap(), "leases are independent");
        db.release_lease("sweeper", "a").await.unwrap();
        assert!(!db.try_lease("sweeper", "c", 2_100, 500).await.unwrap(), "only the holder releases");
        db.release_lease("sweeper", "b").await.unwrap();
        assert!(db.try_lease("sweeper", "c", 2_100, 500).await.unwrap());
    }

    async fn concurrent_lease_takers_get_one_winner(db) {
        let mut tasks = Vec::new();
        for n in 0..6 {
            let store = db.store.clone();
            let holder = format!("h{n}");
            tasks.push(tokio::spawn(async move { store.try_lease("singleton", &holder, 10, 1_000).await.unwrap() }));
        }
        let mut winners = 0;
        for t in tasks {
            winners += usize::from(t.await.unwrap());
        }
        assert_eq!(winners, 1);
    }

    async fn modules_are_content_addressed_per_tenant(db) {
        db.put_module(T, "ab12", b"\0asm-one").await.unwrap();
        db.put_module(T, "ab12", b"\0asm-one").await.unwrap();
        assert_eq!(db.get_module(T, "ab12").await.unwrap().as_deref(), Some(&b"\0asm-one"[..]));
        assert_eq!(db.get_module("globex", "ab12").await.unwrap(), None);
        assert_eq!(db.get_module(T, "ffff").await.unwrap(), None);
    }

    async fn instances_are_listed_filtered_paged_and_counted(db) {
        let d1 = deploy(&*db, "d1").await;
        waiting_instance(&*db, &d1, "a", vec![timer(1, 10)]).await;
        let b = new_instance("b", &d1, None);
        db.create_instance(&b, &counted(&b, step("RUNNING", "{}", 1))).await.unwrap();
        ended_instance(&*db, &d1, "c", "FAILED", 5).await;
        let d2 = deploy(&*db, "d2").await;
        ended_instance(&*db, &d2, "d", "COMPLETED", 5).await;
        let e = new_instance("e", &d2, None);
        db.create_instance(&e, &counted(&e, step("RUNNING", "{}", 1))).await.unwrap();

        let ids = |v: Vec<sutra::store::InstanceRecord>| v.into_iter().map(|i| i.id).collect::<Vec<_>>();
        let all = InstanceFilter { tenant: Some(T.to_string()), ..InstanceFilter::default() };
        assert_eq!(ids(db.list_instances(&all).await.unwrap()), ["a", "b", "c", "d", "e"]);
        let page = InstanceFilter { limit: 2, after_id: Some("b".to_string()), ..all.clone() };
        assert_eq!(ids(db.list_instances(&page).await.unwrap()), ["c", "d"]);
        // Newest first, paged downward from a cursor.
        let newest = InstanceFilter { newest_first: true, ..all.clone() };
        assert_eq!(ids(db.list_instances(&newest).await.unwrap()), ["e", "d", "c", "b", "a"]);
        let down = InstanceFilter { limit: 2, before_id: Some("d".to_string()), ..newest.clone() };
        assert_eq!(ids(db.list_instances(&down).await.unwrap()), ["c", "b"]);
        let running = InstanceFilter { state: Some("RUNNING".to_string()), ..all.clone() };
        assert_eq!(ids(db.list_instances(&running).await.unwrap()), ["b", "e"]);
        let of_d2 = InstanceFilter {
            deployment_id: Some("d2".to_string()),
            process_id: Some("order".to_string()),
            ..all.clone()
        };
        assert_eq!(ids(db.list_instances(&of_d2).await.unwrap()), ["d", "e"]);
        let other = InstanceFilter { tenant: Some("globex".to_string()), ..InstanceFilter::default() };
        assert!(db.list_instances(&other).await.unwrap().is_empty());

        assert_eq!(db.live_instances().await.unwrap(), ["a", "b", "e"]);
        assert_eq!(db.deployment_load("d1").await.unwrap(), DeploymentLoad { running: 1, waiting: 1, failed: 1 });
        assert_eq!(db.deployment_load("d2").await.unwrap(), DeploymentLoad { running: 1, waiting: 0, failed: 0 });
        assert_eq!(db.park_counts().await.unwrap(), [("timer".to_string(), 1)]);

        // Counted by state, optionally of one process and an id range (ids
        // begin with their start instant: the API's since/until).
        let counts = |v: Vec<(String, i64)>| v.into_iter().collect::<BTreeMap<_, _>>();
        let n = |pairs: &[(&str, i64)]| pairs.iter().map(|(s, n)| (s.to_string(), *n)).collect::<BTreeMap<_, _>>();
        assert_eq!(
            counts(db.instance_counts(T, None, None, None).await.unwrap()),
            n(&[("COMPLETED", 1), ("FAILED", 1), ("RUNNING", 2), ("WAITING", 1)])
        );
        assert_eq!(
            counts(db.instance_counts(T, None, Some("b"), Some("d")).await.unwrap()),
            n(&[("FAILED", 1), ("RUNNING", 1)]),
            "from b (included) to d (excluded)"
        );
        assert_eq!(counts(db.instance_counts(T, None, Some("d"), None).await.unwrap()), n(&[("COMPLETED", 1), ("RUNNING", 1)]));
        assert_eq!(counts(db.instance_counts(T, None, None, Some("b")).await.unwrap()), n(&[("WAITING", 1)]));
        assert_eq!(counts(db.instance_counts(T, Some("order"), Some("c"), Some("e")).await.unwrap()), n(&[("COMPLETED", 1), ("FAILED", 1)]));
        assert!(db.instance_counts("globex", None, None, None).await.unwrap().is_empty());
    }

    async fn attempt_outputs_are_kept_on_their_rows(db) {
        let d = deploy(&*db, "d1").await;
        let out = |node: &str, n: i64, stderr: Option<&str>, logs: Option<&str>| AttemptOutput {
            calls: None,
            token: 1,
            node: node.to_string(),
            attempt: n,
            stderr: stderr.map(str::to_string),
            logs: logs.map(str::to_string),
            input: None,
            output: None,
        };
        let logs = r#"[{"level":"info","message":"<b>hi</b>"}]"#;
        // Written with the first step, and with a later one; an attempt that
        // wrote nothing has none; a replay changes nothing.
        let first = StepWrite {
            attempts: vec![attempt("a", 1), attempt("a", 2)],
            outputs: vec![out("a", 2, Some("trap at 0x1\n"), None)],
            ..step("RUNNING", "{}", 1)
        };
        db.create_instance(&new_instance("i1", &d, None), &first).await.unwrap();
        let next = StepWrite {
            attempts: vec![attempt("b", 1)],
            outputs: vec![out("b", 1, None, Some(logs))],
            ..step("RUNNING", "{}", 2)
        };
        db.commit_step("i1", 1, &next).await.unwrap();
        let replay = StepWrite {
            attempts: vec![attempt("b", 1)],
            outputs: vec![out("b", 1, Some("other"), None)],
            ..step("RUNNING", "{}", 3)
        };
        db.commit_step("i1", 2, &replay).await.unwrap();
        assert_eq!(db.attempts("i1").await.unwrap(), vec![attempt("a", 1), attempt("a", 2), attempt("b", 1)]);
        assert_eq!(
            db.attempt_outputs("i1").await.unwrap(),
            vec![out("a", 2, Some("trap at 0x1\n"), None), out("b", 1, None, Some(logs))]
        );
        assert!(db.attempt_outputs("nothing").await.unwrap().is_empty());
    }
}

/// SQLite only: while another connection holds the file's write lock, the
/// writer thread's writes and claims and the sqlx pool's writes wait for it
/// (busy timeout) instead of failing, and all succeed once it is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_writes_wait_for_a_lock_held_elsewhere() {
    use sqlx::{Connection, Executor};
    use std::str::FromStr;
    use std::time::Duration;
    use sutra::store::SqliteStore;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("lock.db").display());
    let store = SqliteStore::open(&url).await.unwrap();
    let d = deploy(&store, "d1").await;
    waiting_instance(&store, &d, "i1", vec![timer(1, 10)]).await;

    let opts = sqlx::sqlite::SqliteConnectOptions::from_str(&url).unwrap();
    let mut other = sqlx::SqliteConnection::connect_with(&opts).await.unwrap();
    other.execute("BEGIN IMMEDIATE").await.unwrap();
    let writes = {
        let store = store.clone();
        let d = d.clone();
        tokio::spawn(async move {
            let next = StepWrite {
                arm: vec![timer(2, 20)],
                ..step("WAITING", "{}", 2)
            };
            let commit = store.commit_step("i1", 1, &next);
            let (inst, running) = (new_instance("i2", &d, None), step("RUNNING", "{}", 1));
            let create = store.create_instance(&inst, &running);
            let claim = store.claim_due(100, 10, "me", 1_000);
            let lease = store.try_lease("sweeper", "me", 1, 1_000);
            let refund = new_deployment("d2", T, "refund");
            let deploy = store.insert_deployment(&refund);
            let (commit, create, claim, lease, deploy) =
                tokio::join!(commit, create, claim, lease, deploy);
            commit.unwrap();
            assert_eq!(create.unwrap(), Created::New);
            assert_eq!(claim.unwrap().len(), 2);
            assert!(lease.unwrap());
            assert_eq!(deploy.unwrap().version, 1);
        })
    };
    // While the lock is held, nothing can have been written.
    let mut writes = writes;
    assert!(
        tokio::time::timeout(Duration::from_millis(200), &mut writes)
            .await
            .is_err(),
        "a write finished while another connection held the write lock"
    );
    other.execute("COMMIT").await.unwrap();
    writes.await.unwrap();
    assert_eq!(store.load_instance("i1").await.unwrap().unwrap().version, 2);
    other.close().await.unwrap();
    store.close().await;
}

/// SQLite only: a closed store answers its writes with an error (no hang),
/// and what it acknowledged before closing is on disk for the next opener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_closed_store_refuses_writes_and_kept_what_it_acknowledged() {
    use sutra::store::SqliteStore;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("closed.db").display());
    let store = SqliteStore::open(&url).await.unwrap();
    let d = deploy(&store, "d1").await;
    waiting_instance(&store, &d, "i1", vec![pre_claimed(timer(1, 10), "me", 500)]).await;
    store.close().await;
    assert!(store
        .commit_step("i1", 1, &step("WAITING", "{}", 2))
        .await
        .is_err());
    assert!(store.claim_due(1_000, 10, "me", 1_000).await.is_err());
    let again = SqliteStore::open(&url).await.unwrap();
    assert_eq!(again.load_instance("i1").await.unwrap().unwrap().version, 1);
    assert_eq!(
        again.next_due().await.unwrap(),
        Some(500),
        "the pre-claim was stored"
    );
    again.close().await;
}

/// SQLite only: an in-memory database (no writer thread: its instance
/// writes and claims take the sqlx group commit) keeps the same rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_in_memory_keeps_the_write_and_claim_rules() {
    use sutra::store::SqliteStore;
    let store = SqliteStore::open("sqlite::memory:").await.unwrap();
    let d = deploy(&store, "d1").await;
    waiting_instance(
        &store,
        &d,
        "i1",
        vec![pre_claimed(timer(1, 10), "me", 500), timer(2, 20)],
    )
    .await;
    let err = store
        .commit_step("i1", 7, &step("WAITING", "{}", 2))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    let err = store
        .create_instance(&new_instance("i1", &d, None), &step("RUNNING", "{}", 1))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Duplicate(_)), "{err:?}");
    let got = store.claim_due(100, 10, "other", 1_000).await.unwrap();
    assert_eq!(got.iter().map(|p| p.seq).collect::<Vec<_>>(), [2]);
    assert_eq!(store.next_due().await.unwrap(), Some(500));
    store.release_claim("i1", 1, "me").await.unwrap();
    assert_eq!(
        store
            .claim_due(100, 10, "other", 1_000)
            .await
            .unwrap()
            .len(),
        1
    );
    let batch = vec![("i1".to_string(), 1, step("WAITING", "b", 3))];
    store.commit_steps(&batch).await.unwrap();
    assert_eq!(store.load_instance("i1").await.unwrap().unwrap().version, 2);
    store.close().await;
}

/// Not a behaviour test: the cost of one `commit_step` on SQLite with
/// `synchronous=FULL` vs `NORMAL` on this machine's disk. Run with
/// `cargo test --test store measure -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run on demand"]
async fn measure_sqlite_commit_step_full_vs_normal() {
    use std::time::Instant;
    use sutra::store::{SqliteOptions, SqliteStore, Synchronous};
    for synchronous in [Synchronous::Full, Synchronous::Normal] {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("bench.db").display());
        let store = SqliteStore::open_with(
            &url,
            SqliteOptions {
                synchronous,
                ..SqliteOptions::default()
            },
        )
        .await
        .unwrap();
        let d = deploy(&store, "d1").await;
        waiting_instance(&store, &d, "i1", vec![timer(0, 10)]).await;
        let mut times = Vec::new();
        for v in 1..=400i64 {
            let write = StepWrite {
                withdraw: vec![v - 1],
                arm: vec![timer(v, 10 + v)],
                attempts: vec![attempt("a", v)],
                ..step(
                    "WAITING",
                    &format!("{{\"v\":{v},\"pad\":\"{}\"}}", "x".repeat(512)),
                    v,
                )
            };
            let t = Instant::now();
            store.commit_step("i1", v, &write).await.unwrap();
            times.push(t.elapsed());
        }
        times.sort();
        let mean = times.iter().sum::<std::time::Duration>() / times.len() as u32;
        println!(
            "sqlite synchronous={synchronous:?}: commit_step mean {mean:?}, p50 {:?}, p99 {:?} ({} commits)",
            times[times.len() / 2],
            times[times.len() * 99 / 100],
            times.len()
        );
        assert_eq!(
            store.load_instance("i1").await.unwrap().unwrap().version,
            401
        );
        store.close().await;
    }
}

/// SQLite only: every accepted spelling of a datasource opens (creating the
/// file), a file database runs in WAL mode, and `AnyStore::open` picks SQLite
/// for anything that is not a PostgreSQL URL.
#[tokio::test]
async fn sqlite_opens_every_url_form() {
    use sutra::store::{AnyStore, SqliteStore};
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).display().to_string();
    let forms = [
        format!("sqlite://{}", path("a.db")),
        format!("sqlite:{}", path("b.db")),
        path("c.db"),
        "sqlite::memory:".to_string(),
    ];
    for url in &forms {
        let store = AnyStore::open(url)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(store.backend(), "sqlite");
        let d = deploy(&store, "d1").await;
        waiting_instance(&store, &d, "i1", vec![timer(1, 5)]).await;
        // Read back (through the read pool for a file, the one connection in memory).
        assert_eq!(store.load_instance("i1").await.unwrap().unwrap().version, 1);
        assert_eq!(store.next_due().await.unwrap(), Some(5));
        store.close().await;
    }
    for name in ["a.db", "b.db", "c.db"] {
        assert!(dir.path().join(name).exists(), "{name} not created");
    }
    // WAL: the write-ahead log sits next to an open file database.
    let store = SqliteStore::open(&path("wal.db")).await.unwrap();
    deploy(&store, "d1").await;
    assert!(dir.path().join("wal.db-wal").exists(), "not in WAL mode");
    store.close().await;
    // Reopened, the data is still there.
    let store = SqliteStore::open(&path("wal.db")).await.unwrap();
    assert_eq!(
        store
            .active_deployment(T, "order")
            .await
            .unwrap()
            .map(|d| d.version),
        Some(1)
    );
    store.close().await;
}

/// Not a behaviour test: the SQLite write path on a file database
/// (`synchronous=FULL`), on the writer thread and on the sqlx group commit
/// (`writer_thread: false`, the path before the writer thread): p50 of a lone
/// `create_instance` (instance + attempt park), of a lone `commit_step`, of
/// `claim_due` + `release_claim`, the time to commit 1,000 concurrent
/// `create_instance` calls, and `next_due` with 12,800 claimed parks. Run with
/// `cargo test --release --test store measure_sqlite_write_path -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run on demand"]
async fn measure_sqlite_write_path() {
    for writer_thread in [false, true] {
        measure_write_path(writer_thread).await;
    }
}

async fn measure_write_path(writer_thread: bool) {
    use sqlx::Connection;
    use std::str::FromStr;
    use std::time::{Duration, Instant};
    use sutra::store::{SqliteOptions, SqliteStore};
    fn p50(mut v: Vec<Duration>) -> Duration {
        v.sort();
        v[v.len() / 2]
    }
    let path = if writer_thread {
        "writer thread"
    } else {
        "sqlx group commit"
    };
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("bench.db").display());
    let opts = SqliteOptions {
        writer_thread,
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open_with(&url, opts).await.unwrap();
    let d = deploy(&store, "d1").await;
    let snapshot = format!("{{\"pad\":\"{}\"}}", "x".repeat(512));

    // A lone create: the instance and its attempt park.
    let mut creates = Vec::new();
    for n in 0..400 {
        let first = StepWrite {
            arm: vec![timer(1, 1_000_000)],
            ..step("RUNNING", &snapshot, 1)
        };
        let inst = new_instance(&format!("c{n:04}"), &d, None);
        let t = Instant::now();
        store.create_instance(&inst, &first).await.unwrap();
        creates.push(t.elapsed());
    }
    // A lone commit: withdraw a park, arm one, record an attempt.
    waiting_instance(&store, &d, "i1", vec![timer(0, 10)]).await;
    let mut commits = Vec::new();
    for v in 1..=400i64 {
        let write = StepWrite {
            withdraw: vec![v - 1],
            arm: vec![timer(v, 1_000_000 + v)],
            attempts: vec![attempt("a", v)],
            ..step("WAITING", &snapshot, v)
        };
        let t = Instant::now();
        store.commit_step("i1", v, &write).await.unwrap();
        commits.push(t.elapsed());
    }
    // A lone claim and release of one due park.
    waiting_instance(&store, &d, "due", vec![timer(1, 5)]).await;
    let (mut claims, mut releases) = (Vec::new(), Vec::new());
    for _ in 0..400 {
        let t = Instant::now();
        let got = store.claim_due(10, 16, "me", 60_000).await.unwrap();
        claims.push(t.elapsed());
        assert_eq!(got.len(), 1);
        let t = Instant::now();
        store.release_claim("due", 1, "me").await.unwrap();
        releases.push(t.elapsed());
    }
    let gone = StepWrite {
        withdraw: vec![1],
        ..step("WAITING", "{}", 1)
    };
    store.commit_step("due", 1, &gone).await.unwrap();
    println!(
        "{path}: lone create_instance p50 {:?}, commit_step p50 {:?}, claim_due p50 {:?}, release_claim p50 {:?}",
        p50(creates),
        p50(commits),
        p50(claims),
        p50(releases)
    );

    // 1,000 concurrent creates.
    let t = Instant::now();
    let mut tasks = Vec::new();
    for n in 0..1_000 {
        let store = store.clone();
        let inst = new_instance(&format!("b{n:04}"), &d, None);
        let first = StepWrite {
            arm: vec![timer(1, 1_000_000)],
            ..step("RUNNING", &snapshot, 1)
        };
        tasks.push(tokio::spawn(async move {
            store.create_instance(&inst, &first).await.unwrap()
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), Created::New);
    }
    println!(
        "{path}: 1,000 concurrent create_instance committed in {:?}",
        t.elapsed()
    );

    // next_due with 12,800 claimed parks (100 instances x 128 due parks).
    for n in 0..100 {
        let parks = (1..=128).map(|s| timer(s, 20 + s)).collect();
        waiting_instance(&store, &d, &format!("p{n:03}"), parks).await;
    }
    let mut claimed = 0;
    loop {
        let got = store.claim_due(1_000, 512, "me", 3_600_000).await.unwrap();
        if got.is_empty() {
            break;
        }
        claimed += got.len();
    }
    assert_eq!(claimed, 12_800);
    let mut reads = Vec::new();
    for _ in 0..100 {
        let t = Instant::now();
        assert_eq!(store.next_due().await.unwrap(), Some(1_000_000));
        reads.push(t.elapsed());
    }
    let mut empty_claims = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        assert!(store
            .claim_due(1_000, 16, "me", 60_000)
            .await
            .unwrap()
            .is_empty());
        empty_claims.push(t.elapsed());
    }
    println!(
        "{path}: with 12,800 claimed parks: next_due p50 {:?}, an empty claim_due p50 {:?}",
        p50(reads),
        p50(empty_claims)
    );
    store.close().await;

    if writer_thread {
        // The next_due query before this change (MAX(due_at, claimed_until)
        // per claimed row, no parks_unclaimed_due index) on the same data.
        const OLD_NEXT_DUE: &str = "SELECT MIN(t) FROM ( \
           SELECT MIN(due_at) AS t FROM parks WHERE due_at IS NOT NULL AND claimed_until IS NULL \
           UNION ALL \
           SELECT MIN(CASE WHEN claimed_until > due_at THEN claimed_until ELSE due_at END) AS t \
           FROM parks WHERE due_at IS NOT NULL AND claimed_until IS NOT NULL) AS next_due";
        let opts = sqlx::sqlite::SqliteConnectOptions::from_str(&url).unwrap();
        let mut conn = sqlx::SqliteConnection::connect_with(&opts).await.unwrap();
        sqlx::query("DROP INDEX parks_unclaimed_due")
            .execute(&mut conn)
            .await
            .unwrap();
        let mut old = Vec::new();
        for _ in 0..100 {
            let t = Instant::now();
            let due: Option<i64> = sqlx::query_scalar(OLD_NEXT_DUE)
                .fetch_one(&mut conn)
                .await
                .unwrap();
            old.push(t.elapsed());
            assert_eq!(due, Some(1_000_000));
        }
        println!(
            "before: the old next_due query, without the new index: p50 {:?}",
            p50(old)
        );
        conn.close().await.unwrap();
    }
}
