//! The HTTP API of `sutra serve`: axum routes under `/v1`, `/healthz`,
//! `/metrics`, and `/v1/openapi.json`.
//!
//! Invariants:
//! - thin: handlers parse, authorise, call the runtime or the store, render;
//!   every behaviour lives in the runtime;
//! - every answer that is not 2xx is `{"code", "message", "details"}` with a
//!   stable code ([`error::ApiError`]): unknown routes and methods, malformed
//!   bodies and queries, bodies over their caps, and a handler panic (caught
//!   and answered 500 `SUTRA.API.INTERNAL`, its message only in the log);
//!   an extractor's plain-text rejection and hyper's own answers to requests
//!   it cannot parse (414, 431, 400) are rewritten into it ([`shape`]);
//! - tenant isolation: every tenant route takes a [`auth::TenantCaller`]
//!   and filters by it; another tenant's id answers like a missing one.

pub mod admin;
pub mod auth;
pub mod batches;
pub mod channels;
pub mod conn_timeouts;
pub mod conns;
pub mod console;
pub mod deployments;
pub mod diagram;
pub mod egress;
// Connections of HTTP tasks (issue 31); `conns` is the TCP connection caps.
pub mod error;
pub mod events;
pub mod external;
pub mod extract;
pub mod http_connections;
pub mod incidents;
pub mod instances;
pub mod metrics;
pub mod migrate;
pub mod openapi;
pub mod seed_routes;
pub mod shape;
pub mod signals;
pub mod statistics;
pub mod types;
pub mod variables;
pub mod whoami;

use crate::runtime::Runtime;
use crate::store::AnyStore;
use crate::time::VirtualClock;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::{Json, Router};
use std::sync::Arc;

/// Default cap of a JSON body.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// Default cap of a deployment bundle.
pub const DEFAULT_MAX_BUNDLE_BYTES: usize = 64 * 1024 * 1024;

/// How the API is configured.
#[derive(Clone)]
pub struct ApiConfig {
    /// The admin key (`SUTRA_ADMIN_KEY`); `None` disables the admin routes.
    pub admin_key: Option<String>,
    /// A bearer token that may read `/metrics` and nothing else
    /// (`sutra.metrics.token`); the admin key may read it too.
    pub metrics_token: Option<String>,
    pub max_body_bytes: usize,
    pub max_bundle_bytes: usize,
    /// Set with `--manual-clock`: enables `POST /v1/admin/clock/advance`.
    pub manual_clock: Option<Arc<VirtualClock>>,
    /// How many connections the server holds (`conns`).
    pub conn_limits: conns::ConnLimits,
    /// When it closes a connection that sends no request (`conn_timeouts`).
    pub conn_timeouts: conn_timeouts::ConnTimeouts,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            admin_key: None,
            metrics_token: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_bundle_bytes: DEFAULT_MAX_BUNDLE_BYTES,
            manual_clock: None,
            conn_limits: conns::ConnLimits::defaults(),
            conn_timeouts: conn_timeouts::ConnTimeouts::default(),
        }
    }
}

/// What every handler shares.
pub struct AppState {
    pub runtime: Runtime<AnyStore>,
    pub config: ApiConfig,
    /// One clock advance at a time.
    pub clock_lock: tokio::sync::Mutex<()>,
    pub http: metrics::HttpCounts,
}

async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

/// How long readiness waits for the store before it says the store is not there.
const READY_STORE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Readiness: the store answers a read within [`READY_STORE_TIMEOUT`]
/// (`/healthz` stays liveness: the process serves). A store that errs or is
/// slower is 503 `SUTRA.RUNTIME.STORE`, so a load balancer takes the replica
/// out while its database is away.
async fn readyz(
    State(state): State<Arc<AppState>>,
) -> Result<Json<serde_json::Value>, error::ApiError> {
    use crate::store::Store;
    let read = tokio::time::timeout(READY_STORE_TIMEOUT, state.runtime.store().next_due()).await;
    match read {
        Ok(Ok(_)) => Ok(Json(
            serde_json::json!({ "status": "ready", "store": "ok" }),
        )),
        Ok(Err(e)) => {
            // The cause goes to the log, never to the answer (as for every 5xx).
            tracing::error!(error = %e, "readiness: the store failed a read");
            Err(error::ApiError::new(
                crate::codes::Code::StoreFailed,
                "not ready: the store is unavailable (a read failed; see the server's log)",
            ))
        }
        Err(_) => Err(error::ApiError::new(
            crate::codes::Code::StoreFailed,
            format!(
                "not ready: the store did not answer a read within {} s",
                READY_STORE_TIMEOUT.as_secs()
            ),
        )),
    }
}

async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(openapi::document())
}

/// Runs the handler in its own task so a panic is caught and answered as a
/// coded 500; counts answers by status.
async fn guard(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let response = match tokio::spawn(next.run(req)).await {
        Ok(r) => shape::json_errors(r).await,
        Err(e) => error::ApiError::internal(format!("handler panicked: {e}")).into_response(),
    };
    state.http.record(response.status().as_u16());
    response
}

/// The router.
pub fn router(state: Arc<AppState>) -> Router {
    let bundle_cap = DefaultBodyLimit::max(state.config.max_bundle_bytes);
    let body_cap = DefaultBodyLimit::max(state.config.max_body_bytes);
    let deploy = Router::new()
        .route(
            "/v1/deployments",
            post(deployments::deploy).get(deployments::list),
        )
        .layer(bundle_cap);
    let v1 = Router::new()
        .route(
            "/v1/deployments/{id}",
            get(deployments::get).delete(deployments::undeploy),
        )
        .route(
            "/v1/deployments/{id}/schedules",
            get(deployments::schedules),
        )
        .route("/v1/processes/{process}/instances", post(instances::start))
        .route("/v1/instances", get(instances::list))
        .route("/v1/instances/{id}", get(instances::inspect))
        .route("/v1/instances/{id}/history", get(instances::history))
        .route("/v1/instances/{id}/cancel", post(instances::cancel))
        .route("/v1/instances/{id}/retry", post(instances::retry))
        .route("/v1/instances/{id}/close", post(instances::close))
        .route("/v1/instances/{id}/variables", post(variables::edit))
        .route("/v1/batches", post(batches::create).get(batches::list))
        .route("/v1/batches/{id}", get(batches::get))
        .route("/v1/batches/{id}/items", get(batches::items))
        .route("/v1/batches/{id}/cancel", post(batches::cancel))
        .merge(seed_routes::routes())
        .route("/v1/instances/{id}/events/{name}", post(events::resume))
        .route("/v1/messages", post(instances::message))
        .route("/v1/signals", post(signals::signal))
        .merge(channel_routes())
        .merge(console_routes())
        .route("/v1/admin/tenants", post(admin::create).get(admin::list))
        .route("/v1/admin/tenants/{name}", get(admin::get))
        .route("/v1/admin/tenants/{name}/limits", put(admin::set_limits))
        .route(
            "/v1/admin/tenants/{name}/keys",
            post(admin::new_key).get(admin::list_keys),
        )
        .route("/v1/admin/tenants/{name}/keys/rotate", post(admin::rotate))
        .route(
            "/v1/admin/tenants/{name}/keys/{key_id}",
            delete(admin::revoke_key),
        )
        .route("/v1/admin/clock/advance", post(admin::advance))
        .route("/v1/openapi.json", get(openapi_json))
        .route("/v1/whoami", get(whoami::whoami))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics::metrics))
        .layer(body_cap);
    deploy
        .merge(v1)
        .fallback(extract::not_found)
        .method_not_allowed_fallback(extract::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// The web console's files and the routes it reads (issue 15).
fn console_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(console::to_console))
        .route("/ui", get(console::to_console))
        .route("/ui/", get(console::index))
        .route("/ui/{*path}", get(console::file))
        .route("/v1/deployments/{id}/diagram", get(diagram::diagram))
        .route(
            "/v1/deployments/{id}/statistics",
            get(statistics::statistics),
        )
        .route("/v1/deployments/{id}/modules", get(diagram::modules))
        .route("/v1/instances/counts", get(diagram::counts))
        .route("/v1/instances/{id}/attempts", get(diagram::attempts))
}

/// Channels, external tasks, incidents, migration (issue 14).
fn channel_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/channels", get(channels::list))
        .route(
            "/v1/channels/{name}",
            put(channels::put)
                .get(channels::get)
                .delete(channels::delete),
        )
        .route("/v1/channels/{name}/responses", post(channels::respond))
        .route(
            "/v1/external-tasks/fetch-and-lock",
            post(external::fetch_and_lock),
        )
        .route("/v1/external-tasks/{id}/complete", post(external::complete))
        .route("/v1/external-tasks/{id}/failure", post(external::failure))
        .route(
            "/v1/external-tasks/{id}/bpmn-error",
            post(external::bpmn_error),
        )
        .route(
            "/v1/external-tasks/{id}/extend-lock",
            post(external::extend_lock),
        )
        .route("/v1/external-tasks/{id}/unlock", post(external::unlock))
        .route("/v1/incidents", get(incidents::list))
        .route("/v1/incidents/{id}/resolve", post(incidents::resolve))
        .route("/v1/instances/{id}/migrate", post(migrate::migrate))
        .route("/v1/egress", get(egress::list_grants))
        .route(
            "/v1/egress/{module}",
            put(egress::put_grant)
                .get(egress::get_grant)
                .delete(egress::delete_grant),
        )
        .route("/v1/secrets", get(egress::list_secrets))
        .route(
            "/v1/secrets/{name}",
            put(egress::put_secret).delete(egress::delete_secret),
        )
        .route("/v1/connections", get(http_connections::list_connections))
        .route(
            "/v1/connections/{name}",
            put(http_connections::put_connection)
                .get(http_connections::get_connection)
                .delete(http_connections::delete_connection),
        )
}

/// Serve `router` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = state.config.conn_limits;
    let timeouts = state.config.conn_timeouts;
    // Every request marks itself in flight on its connection (its timeouts
    // never close a connection whose request runs).
    let app = router(state).layer(axum::middleware::from_fn(conn_timeouts::track));
    axum::serve(
        conns::LimitedListener::new(listener, limits, timeouts),
        app.into_make_service_with_connect_info::<conn_timeouts::ConnActivity>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}
