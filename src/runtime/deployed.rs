//! Deployments: validating a definition and its modules, storing them, and
//! the in-memory cache of loaded processes and components.
//!
//! Invariant: a deployment is stored only after the definition and every module
//! it names passed validation (nothing is stored for a refused bundle); an
//! instance is always driven by the deployment it started on.

use super::{Runtime, RuntimeError, RuntimeResult};
use crate::codes::Code;
use crate::engine;
use crate::model::Process;
use crate::sandbox::LoadedComponent;
use crate::store::{DeploymentRecord, ModuleReuse, NewDeployment, Store};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// How long a start trusts the active deployment it read (see
/// [`Runtime::active_deployed`]).
const ACTIVE_TTL: std::time::Duration = std::time::Duration::from_secs(1);

/// A deployment ready to run: its process and its loaded components.
pub struct Deployed {
    pub record: DeploymentRecord,
    pub process: Arc<Process>,
    pub components: HashMap<String, LoadedComponent>,
    /// The process has a condition or correlation key that may loop over data
    /// (`Process::has_iterating_expressions`): its steps run off the executor.
    iterating: bool,
}

impl Deployed {
    fn new(
        record: DeploymentRecord,
        process: Arc<Process>,
        components: HashMap<String, LoadedComponent>,
    ) -> Deployed {
        Deployed {
            iterating: process.has_iterating_expressions(),
            record,
            process,
            components,
        }
    }

    /// `engine::start` on this deployment's process (see [`Deployed::offload`]).
    pub(crate) fn start(
        &self,
        new: engine::NewInstance<'_>,
        inputs: &engine::Inputs,
    ) -> Result<engine::Step, engine::EngineError> {
        self.offload(|| engine::start(&self.process, new, inputs))
    }

    /// `engine::apply` on this deployment's process (see [`Deployed::offload`]).
    pub(crate) fn apply(
        &self,
        snapshot: engine::Snapshot,
        event: engine::Event,
        inputs: &engine::Inputs,
    ) -> Result<engine::Step, engine::EngineError> {
        self.offload(|| engine::apply(&self.process, snapshot, event, inputs))
    }

    /// `engine::apply_keeping` on this deployment's process: no copy of the
    /// snapshot for an event the engine never refuses.
    #[allow(clippy::result_large_err)]
    pub(crate) fn apply_keeping(
        &self,
        snapshot: engine::Snapshot,
        event: engine::Event,
        inputs: &engine::Inputs,
    ) -> Result<engine::Step, (engine::EngineError, engine::Snapshot)> {
        self.offload(|| engine::apply_keeping(&self.process, snapshot, event, inputs))
    }

    /// Run an engine step. A step evaluates conditions and correlation keys;
    /// one that may loop over data can take up to its budget (tens of
    /// milliseconds, `model::CONDITION_BUDGET`), so for such a process the
    /// step runs under `block_in_place`: the executor hands this worker's
    /// other tasks to another thread while it evaluates, and no other
    /// instance, tenant or request waits behind it. Other processes step in
    /// place (a step is microseconds). On a current-thread runtime (tests,
    /// the CLI's one-shot `run`) there is no other thread to hand work to.
    fn offload<T>(&self, step: impl FnOnce() -> T) -> T {
        off_executor(self.iterating, step)
    }
}

/// Run `work` under `block_in_place` when it is `heavy` (the executor hands
/// this worker's other tasks to another thread meanwhile), in place
/// otherwise or on a current-thread runtime. Heavy: a step that may
/// evaluate data-looping expressions ([`Deployed::offload`]), and the step
/// and serialisation of a snapshot holding a wide fan-out
/// (`Snapshot::is_wide`: milliseconds per commit, which would hold up every
/// other tenant's task queued on this worker).
pub(crate) fn off_executor<T>(heavy: bool, work: impl FnOnce() -> T) -> T {
    let multi_thread = || {
        matches!(
            tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()),
            Ok(tokio::runtime::RuntimeFlavor::MultiThread)
        )
    };
    if heavy && multi_thread() {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

pub fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Load a definition's text into the IR (every dialect Sutra knows).
pub fn load_definition(source: &str) -> RuntimeResult<crate::model::Definitions> {
    let loaded = crate::dialect::load(source);
    if !loaded.ok() {
        let first = loaded
            .diagnostics
            .iter()
            .find(|d| d.is_error())
            .map(|d| d.to_string())
            .unwrap_or_default();
        return Err(RuntimeError {
            code: loaded
                .diagnostics
                .iter()
                .find(|d| d.is_error())
                .map(|d| d.code)
                .unwrap_or(Code::BpmnNoProcess),
            message: format!("the definition is invalid: {first}"),
            diagnostics: loaded.diagnostics,
        });
    }
    Ok(loaded.definitions)
}

impl<S: Store> Runtime<S> {
    /// Deploy a definition with the modules its registered tasks name
    /// (`name → component bytes`). Every executable process in the file becomes
    /// a deployment (a new ACTIVE version; the previous one DRAINS).
    pub async fn deploy(
        &self,
        tenant: &str,
        source: &str,
        modules: &BTreeMap<String, Vec<u8>>,
    ) -> RuntimeResult<Vec<DeploymentRecord>> {
        self.deploy_reusable(tenant, source, modules, &BTreeMap::new())
            .await
    }

    /// [`Runtime::deploy`] with some modules marked reusable: their attempts
    /// may run on warm instances of the same tenant and module
    /// (`sandbox::Reuse`). Each name must be one of `modules`.
    pub async fn deploy_reusable(
        &self,
        tenant: &str,
        source: &str,
        modules: &BTreeMap<String, Vec<u8>>,
        reusable: &BTreeMap<String, ModuleReuse>,
    ) -> RuntimeResult<Vec<DeploymentRecord>> {
        if let Some(name) = reusable.keys().find(|n| !modules.contains_key(*n)) {
            return Err(RuntimeError::new(
                Code::TaskNotRegistered,
                format!("module `{name}`: marked reusable but the bundle has no such module"),
            ));
        }
        let defs = load_definition(source)?;
        let executable: Vec<&Process> = defs.processes.iter().filter(|p| p.executable).collect();
        if executable.is_empty() {
            return Err(RuntimeError::new(
                Code::BpmnNoProcess,
                "the definition has no executable process",
            ));
        }
        // Tenant quotas: module size, deadline ceiling (tenancy.rs).
        self.check_bundle_quota(tenant, &executable, modules)
            .await?;
        // Every channel a process calls must be configured (channel.rs).
        self.check_channels(tenant, &executable).await?;
        // Validate everything before storing anything; compiles are bounded
        // by the compile limits and queue per tenant (sandbox::compile).
        let compile_limits = self.compile_limits(tenant).await?;
        let mut loaded: HashMap<String, (String, LoadedComponent)> = HashMap::new();
        for p in &executable {
            for name in p.registered_tasks() {
                if loaded.contains_key(name) {
                    continue;
                }
                let bytes = modules.get(name).ok_or_else(|| {
                    RuntimeError::new(
                        p.missing_module_code(name),
                        format!(
                            "process `{}` calls registered:{name} but no module `{name}` was given",
                            p.id
                        ),
                    )
                })?;
                let component = self
                    .inner
                    .sandbox
                    .load_for(tenant, bytes, &compile_limits)
                    .await
                    .map_err(|e| {
                        RuntimeError::new(e.code, format!("module `{name}`: {}", e.message))
                    })?;
                loaded.insert(name.to_string(), (digest(bytes), component));
            }
        }
        // A module that calls out needs its tenant's grant (egress.rs).
        self.check_egress_grants(tenant, loaded.iter().map(|(n, (_, c))| (n, c)))
            .await?;
        for (name, (d, _)) in &loaded {
            if let Some(bytes) = modules.get(name) {
                self.inner.store.put_module(tenant, d, bytes).await?;
            }
        }
        let now = self.inner.clock.now().timestamp_millis();
        let mut records = Vec::new();
        for p in executable {
            let mods: BTreeMap<String, String> = p
                .registered_tasks()
                .into_iter()
                .filter_map(|n| loaded.get(n).map(|(d, _)| (n.to_string(), d.clone())))
                .collect();
            let record = self
                .inner
                .store
                .insert_deployment(&NewDeployment {
                    id: super::new_id(now),
                    tenant: tenant.to_string(),
                    process_id: p.id.clone(),
                    dialect: p.dialect.as_str().into(),
                    source: source.to_string(),
                    modules: mods.clone(),
                    reusable: reusable
                        .iter()
                        .filter(|(n, _)| mods.contains_key(*n))
                        .map(|(n, r)| (n.clone(), *r))
                        .collect(),
                    created_at: now,
                })
                .await?;
            let components = mods
                .keys()
                .filter_map(|n| loaded.get(n).map(|(_, c)| (n.clone(), c.clone())))
                .collect();
            let deployed = Arc::new(Deployed::new(
                record.clone(),
                Arc::new((*p).clone()),
                components,
            ));
            self.cache(deployed);
            records.push(record);
        }
        // The new versions are the active ones (the replaced ones drain).
        self.forget_active();
        if let Ok(mut m) = self.inner.active.lock() {
            for r in &records {
                m.insert(
                    (r.tenant.clone(), r.process_id.clone()),
                    (std::time::Instant::now(), r.id.clone()),
                );
            }
        }
        // Arm schedules, resolve the replaced versions' ones, retire what drained (lifecycle.rs).
        if let Err(e) = self.activated(&records).await {
            tracing::warn!(error = %e, "deployed, but arming schedules or retiring old versions failed; the serve loop retries");
        }
        Ok(records)
    }

    /// The ACTIVE deployment of `process_id`, loaded. The id read from the
    /// store is trusted for [`ACTIVE_TTL`]: a deploy or undeploy through this
    /// runtime forgets it at once; one made by another process is seen within
    /// the TTL.
    pub(crate) async fn active_deployed(
        &self,
        tenant: &str,
        process_id: &str,
    ) -> RuntimeResult<Option<Arc<Deployed>>> {
        // The usual case answers from memory; the reads are in a boxed future
        // of their own, so every start's future (moved whole by whoever
        // spawns it) does not carry a store read's state.
        let key = (tenant.to_string(), process_id.to_string());
        let known = self.inner.active.lock().ok().and_then(|m| {
            m.get(&key)
                .filter(|(at, _)| at.elapsed() < ACTIVE_TTL)
                .map(|(_, id)| id.clone())
        });
        if let Some(loaded) = known.as_deref().and_then(|id| self.loaded(id)) {
            return Ok(Some(loaded));
        }
        Box::pin(self.read_active_deployed(key, known)).await
    }

    /// [`Self::active_deployed`] past the memory: the deployment known
    /// active loaded, or the active one read from the store.
    async fn read_active_deployed(
        &self,
        key: (String, String),
        known: Option<String>,
    ) -> RuntimeResult<Option<Arc<Deployed>>> {
        let (tenant, process_id) = (key.0.as_str(), key.1.as_str());
        if let Some(id) = known {
            return self.deployed(&id).await.map(Some);
        }
        // One reader at a time: a burst of starts after the TTL passed reads
        // the store once, the others find the fresh entry.
        let _refresh = self.inner.active_refresh.lock().await;
        let known = self.inner.active.lock().ok().and_then(|m| {
            m.get(&key)
                .filter(|(at, _)| at.elapsed() < ACTIVE_TTL)
                .map(|(_, id)| id.clone())
        });
        if let Some(id) = known {
            return self.deployed(&id).await.map(Some);
        }
        let Some(dep) = self
            .inner
            .store
            .active_deployment(tenant, process_id)
            .await?
        else {
            return Ok(None);
        };
        let deployed = self.deployed(&dep.id).await?;
        self.note_active(&dep);
        Ok(Some(deployed))
    }

    /// Remember that `dep` was read as ACTIVE just now (trusted for [`ACTIVE_TTL`]).
    pub(crate) fn note_active(&self, dep: &DeploymentRecord) {
        if let Ok(mut m) = self.inner.active.lock() {
            if m.len() > 10_000 {
                m.clear();
            }
            m.insert(
                (dep.tenant.clone(), dep.process_id.clone()),
                (std::time::Instant::now(), dep.id.clone()),
            );
        }
    }

    /// Whether `deployment_id` was read as ACTIVE within the TTL.
    pub(crate) fn known_active(&self, deployment_id: &str) -> bool {
        self.inner.active.lock().is_ok_and(|m| {
            m.values()
                .any(|(at, id)| id == deployment_id && at.elapsed() < ACTIVE_TTL)
        })
    }

    /// Forget every cached active deployment (a deployment changed state).
    pub(crate) fn forget_active(&self) {
        if let Ok(mut m) = self.inner.active.lock() {
            m.clear();
        }
    }

    fn cache(&self, d: Arc<Deployed>) {
        if let Ok(mut m) = self.inner.deployed.lock() {
            m.insert(d.record.id.clone(), d);
        }
    }

    /// The process of a deployment, for a view: the loaded one when this
    /// runtime has it, else parsed from the stored definition (no module is
    /// loaded); `None` if the deployment is gone or no longer loads. A store
    /// error is the caller's.
    pub(crate) async fn process_of(
        &self,
        deployment_id: &str,
    ) -> RuntimeResult<Option<Arc<Process>>> {
        let cached = self
            .inner
            .deployed
            .lock()
            .ok()
            .and_then(|m| m.get(deployment_id).map(|d| Arc::clone(&d.process)));
        if cached.is_some() {
            return Ok(cached);
        }
        let Some(record) = self.inner.store.get_deployment(deployment_id).await? else {
            return Ok(None);
        };
        Ok(load_definition(&record.source).ok().and_then(|d| {
            d.processes
                .into_iter()
                .find(|p| p.id == record.process_id)
                .map(Arc::new)
        }))
    }

    /// The loaded deployment (from the cache, else rebuilt from the store).
    pub async fn deployed(&self, deployment_id: &str) -> RuntimeResult<Arc<Deployed>> {
        if let Some(d) = self.loaded(deployment_id) {
            return Ok(d);
        }
        Box::pin(self.load_deployed(deployment_id)).await
    }

    /// A deployment already loaded by this runtime.
    fn loaded(&self, deployment_id: &str) -> Option<Arc<Deployed>> {
        self.inner
            .deployed
            .lock()
            .ok()
            .and_then(|m| m.get(deployment_id).cloned())
    }

    /// [`Self::deployed`] from the store: read, translated, its modules loaded.
    async fn load_deployed(&self, deployment_id: &str) -> RuntimeResult<Arc<Deployed>> {
        let record = self
            .inner
            .store
            .get_deployment(deployment_id)
            .await?
            .ok_or_else(|| {
                RuntimeError::new(
                    Code::InstanceNotFound,
                    format!("no deployment {deployment_id}"),
                )
            })?;
        let defs = load_definition(&record.source)?;
        let process = defs
            .processes
            .into_iter()
            .find(|p| p.id == record.process_id)
            .ok_or_else(|| {
                RuntimeError::new(
                    Code::BpmnNoProcess,
                    format!(
                        "deployment {deployment_id} lost process {}",
                        record.process_id
                    ),
                )
            })?;
        let mut components = HashMap::new();
        let compile_limits = self.compile_limits(&record.tenant).await?;
        for (name, d) in &record.modules {
            let bytes = self
                .inner
                .store
                .get_module(&record.tenant, d)
                .await?
                .ok_or_else(|| {
                    RuntimeError::new(
                        Code::TaskNotRegistered,
                        format!("module {name} ({d}) is missing from the store"),
                    )
                })?;
            let c = self
                .inner
                .sandbox
                .load_for(&record.tenant, &bytes, &compile_limits)
                .await
                .map_err(|e| {
                    RuntimeError::new(e.code, format!("module `{name}`: {}", e.message))
                })?;
            components.insert(name.clone(), c);
        }
        let deployed = Arc::new(Deployed::new(record, Arc::new(process), components));
        self.cache(deployed.clone());
        Ok(deployed)
    }
}
