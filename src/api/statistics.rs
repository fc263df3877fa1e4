//! `GET /v1/deployments/{id}/statistics`: per node of a deployment, how many
//! of its instances are active there, failed there, completed it, and the
//! open incidents on it (issue 35 item 2: the overlay an operator reads on
//! the diagram). Computed by the store over the instances' snapshots and
//! the incidents (`TenancyStore::node_states`), never by loading instances
//! here; instances that retention deleted are not counted.

use super::auth::TenantCaller;
use super::deployments::own_deployment;
use super::error::ApiResult;
use super::types::ErrorBody;
use super::AppState;
use crate::store::tenancy::TenancyStore;
use axum::extract::{Path, State};
use axum::Json;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use utoipa::ToSchema;

/// One node's figures.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct NodeStatistics {
    /// Instances whose token is at the node now (READY or RUNNING there).
    pub active: i64,
    /// Instances for which the node failed (the last time it ran).
    pub failed: i64,
    /// Instances that completed the node (the last time it ran).
    pub completed: i64,
    /// Instances in which it was cancelled, skipped or compensated.
    pub other: i64,
    /// Its open incidents.
    pub incidents: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Statistics {
    /// By node id (the IR's, as the diagram's `sutra:node` names it).
    pub nodes: BTreeMap<String, NodeStatistics>,
}

/// Per-node figures of a deployment's instances.
#[utoipa::path(get, path = "/v1/deployments/{id}/statistics", tag = "deployments",
    params(("id" = String, Path, description = "the deployment")),
    responses((status = 200, body = Statistics), (status = 404, body = ErrorBody)))]
pub async fn statistics(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> ApiResult<Json<Statistics>> {
    own_deployment(&state, &tenant, &id).await?;
    let store = state.runtime.store();
    let mut nodes: BTreeMap<String, NodeStatistics> = BTreeMap::new();
    for (node, st, n) in store.node_states(&id).await? {
        let s = nodes.entry(node).or_default();
        match st.as_str() {
            "READY" | "RUNNING" => s.active += n,
            "FAILED" => s.failed += n,
            "SUCCEEDED" => s.completed += n,
            _ => s.other += n,
        }
    }
    for (node, n) in store.open_incidents_by_node(&id).await? {
        nodes.entry(node).or_default().incidents += n;
    }
    Ok(Json(Statistics { nodes }))
}
