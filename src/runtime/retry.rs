//! Retrying a terminal instance as a new one linked by `retry_of` (the API's
//! `POST /v1/instances/{id}/retry` and the batches of issue 35 item 4 share
//! this): `full` replays its original input from its start; `from-failure`
//! resumes a FAILED one at its failed node with its recorded variables.
//!
//! Invariants: only a terminal instance of the caller's tenant is retried
//! (another tenant's is not found); the retry keeps the business key.

use super::answer::Answered;
use super::{Runtime, RuntimeError, RuntimeResult, StartRequest};
use crate::codes::Code;
use crate::engine::{InstanceState, Snapshot};
use crate::store::Store;

/// How an instance is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryMode {
    /// From its start, with the input it started with.
    Full,
    /// A FAILED instance from its failed node, with its variables then.
    FromFailure,
}

impl RetryMode {
    /// `full` or `from-failure` (the API's and the CLI's spelling).
    pub fn parse(s: &str) -> Option<RetryMode> {
        match s {
            "full" => Some(RetryMode::Full),
            "from-failure" => Some(RetryMode::FromFailure),
            _ => None,
        }
    }
}

impl<S: Store> Runtime<S> {
    /// Retry instance `id` of `tenant` as a new instance; answers the new
    /// one (or, deleted at its end, its final view). With `key`, a second
    /// call with the same key answers the instance the first one made.
    pub async fn retry(
        &self,
        tenant: &str,
        id: &str,
        mode: RetryMode,
        key: Option<String>,
    ) -> RuntimeResult<Answered> {
        let rec = self
            .inner
            .store
            .load_instance(id)
            .await?
            .filter(|r| r.tenant == tenant)
            .ok_or_else(|| {
                RuntimeError::new(Code::InstanceNotFound, format!("no instance {id}"))
            })?;
        if !InstanceState::parse(&rec.state).is_some_and(InstanceState::is_terminal) {
            return Err(RuntimeError::new(
                Code::InstanceState,
                format!(
                    "instance {id} is {}: only a terminal instance can be retried (cancel it first)",
                    rec.state
                ),
            ));
        }
        let snap = Snapshot::from_json(&rec.snapshot)
            .map_err(|e| RuntimeError::new(Code::SnapshotVersion, e))?;
        match mode {
            RetryMode::FromFailure => {
                if snap.state != InstanceState::Failed {
                    return Err(RuntimeError::new(
                        Code::InstanceState,
                        format!(
                            "instance {id} is {}: from-failure retries a FAILED instance",
                            rec.state
                        ),
                    ));
                }
                let id = self
                    .resume_failed_keyed(&snap, tenant, rec.business_key, key)
                    .await?;
                Ok(Answered { id, deleted: None })
            }
            RetryMode::Full => {
                self.start_answered(
                    StartRequest {
                        tenant: tenant.to_string(),
                        process_id: rec.process_id.clone(),
                        variables: snap.input.clone(),
                        retry_of: Some(id.to_string()),
                        business_key: rec.business_key,
                        idempotency_key: key,
                        ..StartRequest::default()
                    },
                    false,
                )
                .await
            }
        }
    }
}
