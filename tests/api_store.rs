//! `TenancyStore` on both backends: tenants, keys, quotas counts, schedule
//! rows and their fire journal, metric counts.

#[path = "common/backends.rs"]
mod backends;

use sutra::store::tenancy::{
    ApiKeyRecord, ScheduleEvent, ScheduleRecord, TenancyStore, TenantLimits, TenantRecord,
};
use sutra::store::{DeploymentState, NewDeployment, NewInstance, StepWrite, Store, StoreError};

async fn deployment<S: Store>(store: &S, id: &str) {
    deployment_of(store, id, "acme").await;
}

async fn deployment_of<S: Store>(store: &S, id: &str, tenant: &str) {
    store
        .insert_deployment(&NewDeployment {
            id: id.into(),
            tenant: tenant.into(),
            process_id: "p".into(),
            dialect: "bpmn".into(),
            source: "<x/>".into(),
            modules: Default::default(),
            reusable: Default::default(),
            created_at: 0,
        })
        .await
        .unwrap();
}

fn schedule(dep: &str, next_due: i64) -> ScheduleRecord {
    ScheduleRecord {
        deployment_id: dep.into(),
        start_node: "every".into(),
        tenant: "acme".into(),
        armed_at: 0,
        last_slot: None,
        next_due: Some(next_due),
        state: "ARMED".into(),
        fires: 0,
        skipped: 0,
        refused: 0,
    }
}

/// A new instance `id` of deployment `dep` of `tenant`, in `state` after its
/// first step (ended if it is not live).
async fn instance<S: Store>(store: &S, id: &str, tenant: &str, dep: &str, state: &str) {
    let inst = NewInstance {
        id: id.into(),
        tenant: tenant.into(),
        deployment_id: dep.into(),
        process_id: "p".into(),
        idempotency_key: None,
        idempotency_fingerprint: None,
        retry_of: None,
        started_at: 1,
        business_key: None,
    };
    store.create_instance(&inst, &step(state)).await.unwrap();
}

fn step(state: &str) -> StepWrite {
    let live = matches!(state, "RUNNING" | "WAITING");
    StepWrite {
        snapshot: "{}".into(),
        state: state.into(),
        updated_at: 2,
        ended_at: (!live).then_some(2),
        ..StepWrite::default()
    }
}

fn fired(slot: i64, skipped: i64, outcome: &str) -> ScheduleEvent {
    ScheduleEvent {
        at: 1,
        slot: Some(slot),
        skipped,
        outcome: outcome.into(),
        instance_id: None,
        code: None,
        message: None,
    }
}

backends::store_tests! {
    async fn tenants_and_keys(db) {
        let limits = TenantLimits { max_instances: Some(3), deadline_ms: Some(500), ..TenantLimits::default() };
        let t = TenantRecord { name: "acme".into(), created_at: 7, limits: limits.clone() };
        db.create_tenant(&t).await.unwrap();
        assert!(matches!(db.create_tenant(&t).await, Err(StoreError::Duplicate(_))));
        assert_eq!(db.get_tenant("acme").await.unwrap(), Some(t.clone()));
        assert_eq!(db.get_tenant("other").await.unwrap(), None);
        let more = TenantLimits { max_instances: None, fuel: Some(10), ..limits };
        db.set_tenant_limits("acme", &more).await.unwrap();
        assert_eq!(db.list_tenants().await.unwrap()[0].limits, more);
        assert!(matches!(db.set_tenant_limits("other", &more).await, Err(StoreError::NotFound(_))));
        let key = ApiKeyRecord { key_id: "k1".into(), tenant: "acme".into(), key_hash: "h".into(), created_at: 1 };
        db.insert_api_key(&key).await.unwrap();
        assert_eq!(db.get_api_key("k1").await.unwrap(), Some(key));
        assert_eq!(db.get_api_key("k2").await.unwrap(), None);
        assert_eq!(db.live_instance_count("acme").await.unwrap(), 0);
    }

    async fn the_quota_counts_a_tenants_running_and_waiting_instances(db) {
        deployment(&db.store, "d1").await;
        deployment_of(&db.store, "g1", "globex").await;
        for (id, state) in [
            ("i1", "RUNNING"), ("i2", "WAITING"), ("i3", "COMPLETED"),
            ("i4", "FAILED"), ("i5", "TERMINATED"), ("i6", "COMPENSATED"),
        ] {
            instance(&db.store, id, "acme", "d1", state).await;
        }
        instance(&db.store, "g-i1", "globex", "g1", "WAITING").await;
        assert_eq!(db.live_instance_count("acme").await.unwrap(), 2);
        assert_eq!(db.live_instance_count("globex").await.unwrap(), 1);
        assert_eq!(db.live_instance_count("nobody").await.unwrap(), 0);
        // Live to live stays counted; an instance that ends leaves the count.
        db.commit_step("i1", 1, &step("WAITING")).await.unwrap();
        assert_eq!(db.live_instance_count("acme").await.unwrap(), 2);
        db.commit_step("i2", 1, &step("COMPLETED")).await.unwrap();
        db.commit_step("i1", 2, &step("FAILED")).await.unwrap();
        assert_eq!(db.live_instance_count("acme").await.unwrap(), 0);
        assert_eq!(db.live_instance_count("globex").await.unwrap(), 1);
    }

    async fn keys_are_listed_revoked_and_replaced_per_tenant(db) {
        for name in ["acme", "globex"] {
            db.create_tenant(&TenantRecord { name: name.into(), created_at: 1, limits: TenantLimits::default() }).await.unwrap();
        }
        let key = |id: &str, tenant: &str, at: i64| ApiKeyRecord {
            key_id: id.into(), tenant: tenant.into(), key_hash: format!("h-{id}"), created_at: at,
        };
        for k in [key("a2", "acme", 2), key("a1", "acme", 1), key("g1", "globex", 1)] {
            db.insert_api_key(&k).await.unwrap();
        }
        let ids = |keys: Vec<ApiKeyRecord>| keys.into_iter().map(|k| k.key_id).collect::<Vec<_>>();
        assert_eq!(ids(db.api_keys_of("acme").await.unwrap()), ["a1", "a2"], "oldest first");
        assert!(db.api_keys_of("nobody").await.unwrap().is_empty());

        // Revocation is per tenant: another tenant's key id revokes nothing.
        assert!(!db.delete_api_key("acme", "g1").await.unwrap());
        assert!(db.get_api_key("g1").await.unwrap().is_some());
        assert!(db.delete_api_key("acme", "a1").await.unwrap());
        assert_eq!(db.get_api_key("a1").await.unwrap(), None);
        assert!(!db.delete_api_key("acme", "a1").await.unwrap(), "revoked already");

        // Rotation: the new key in, every other key of the tenant out, at once.
        let revoked = db.replace_api_keys(&key("a3", "acme", 3)).await.unwrap();
        assert_eq!(revoked, ["a2"]);
        assert_eq!(ids(db.api_keys_of("acme").await.unwrap()), ["a3"]);
        assert_eq!(ids(db.api_keys_of("globex").await.unwrap()), ["g1"]);
        // A colliding id is refused and nothing changes.
        assert!(matches!(db.replace_api_keys(&key("g1", "acme", 4)).await, Err(StoreError::Duplicate(_))));
        assert_eq!(ids(db.api_keys_of("acme").await.unwrap()), ["a3"]);
    }

    async fn schedules_move_and_journal_their_fires(db) {
        deployment(&db.store, "d1").await;
        db.arm_schedule(&schedule("d1", 100)).await.unwrap();
        db.arm_schedule(&schedule("d1", 999)).await.unwrap(); // already armed: a no-op
        assert_eq!(db.next_schedule_due().await.unwrap(), Some(100));
        assert!(db.due_schedules(99, 10).await.unwrap().is_empty());
        assert_eq!(db.due_schedules(100, 10).await.unwrap().len(), 1);

        assert!(db.record_fire("d1", "every", Some(300), &fired(2, 2, "fired")).await.unwrap());
        assert!(db.record_fire("d1", "every", None, &fired(3, 0, "refused")).await.unwrap());
        let s = &db.schedules_of("d1").await.unwrap()[0];
        assert_eq!((s.state.as_str(), s.fires, s.refused, s.skipped, s.last_slot, s.next_due), ("EXHAUSTED", 1, 1, 2, Some(3), None));
        assert!(!db.record_fire("d1", "every", Some(5), &fired(4, 0, "fired")).await.unwrap(), "an exhausted schedule does not move");
        let events = db.schedule_events("d1").await.unwrap();
        assert_eq!(events.iter().map(|e| e.outcome.as_str()).collect::<Vec<_>>(), ["fired", "refused"]);
        let m = db.metric_counts().await.unwrap();
        assert_eq!((m.schedules_armed, m.schedule_refusals), (0, 1));
    }

    async fn schedules_of_inactive_deployments_resolve(db) {
        deployment(&db.store, "d1").await;
        db.arm_schedule(&schedule("d1", 100)).await.unwrap();
        assert_eq!(db.resolve_inactive_schedules().await.unwrap(), 0, "d1 is active");
        db.set_deployment_state("d1", DeploymentState::Draining).await.unwrap();
        assert_eq!(db.resolve_inactive_schedules().await.unwrap(), 1);
        assert_eq!(db.schedules_of("d1").await.unwrap()[0].state, "RESOLVED");
        assert_eq!(db.next_schedule_due().await.unwrap(), None);
    }
}
