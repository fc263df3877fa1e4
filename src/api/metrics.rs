//! `/metrics`: Prometheus text exposition of what the store knows —
//! instances by state, attempts by outcome and code, parks by kind,
//! timer lateness, schedules — plus this server's HTTP answers by status.
//!
//! Invariants:
//! - the route needs the admin key or the metrics token
//!   (`sutra.metrics.token`): counts say what tenants do;
//! - only aggregate counts are exposed (no ids, no tenant names, no
//!   variables), and every label value is one Sutra chose: a code label is
//!   one of Sutra's own codes (`codes.rs`) or `guest` for any code a guest
//!   chose, so a tenant can neither read another's codes nor grow the
//!   series without bound; a label value is at most [`MAX_LABEL_BYTES`].

use super::auth::MetricsCaller;
use super::error::ApiResult;
use super::AppState;
use crate::codes::Code;
use crate::store::tenancy::TenancyStore;
use crate::store::Store;
use crate::time::to_millis;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};

/// HTTP answers by status class, counted by the router's middleware.
#[derive(Default)]
pub struct HttpCounts {
    by_status: Mutex<BTreeMap<u16, u64>>,
}

impl HttpCounts {
    pub fn record(&self, status: u16) {
        if let Ok(mut m) = self.by_status.lock() {
            *m.entry(status).or_default() += 1;
        }
    }

    fn snapshot(&self) -> BTreeMap<u16, u64> {
        self.by_status.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

/// The longest label value written (longer ones are cut).
pub const MAX_LABEL_BYTES: usize = 64;

/// The `code` label of an attempt: Sutra's own code, else `guest`.
pub const GUEST_CODE_LABEL: &str = "guest";

/// A label value, cut to [`MAX_LABEL_BYTES`] and escaped for the text format.
fn label(v: &str) -> String {
    let mut end = v.len().min(MAX_LABEL_BYTES);
    while !v.is_char_boundary(end) {
        end -= 1;
    }
    v[..end]
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The code label of an attempt's code: ours as is, a guest's as `guest`.
fn code_label(code: &str) -> &str {
    match Code::parse(code) {
        Some(c) => c.as_str(),
        None if code.is_empty() => "",
        None => GUEST_CODE_LABEL,
    }
}

/// The exposition text.
pub async fn render(state: &AppState) -> ApiResult<String> {
    let store = state.runtime.store();
    let counts = store.metric_counts().await?;
    let parks = store.park_counts().await?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP sutra_instances Instances in the store by state.\n# TYPE sutra_instances gauge"
    );
    for (st, n) in &counts.instances {
        let _ = writeln!(out, "sutra_instances{{state=\"{}\"}} {n}", label(st));
    }
    let _ = writeln!(
        out,
        "# HELP sutra_attempts Task attempts recorded in the store, by outcome and code.\n# TYPE sutra_attempts gauge"
    );
    let mut attempts: BTreeMap<(String, &str), i64> = BTreeMap::new();
    for (outcome, code, n) in &counts.attempts {
        *attempts
            .entry((label(outcome), code_label(code)))
            .or_default() += n;
    }
    for ((outcome, code), n) in attempts {
        let _ = writeln!(
            out,
            "sutra_attempts{{outcome=\"{outcome}\",code=\"{code}\"}} {n}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP sutra_parks Parks (durable waits) by kind.\n# TYPE sutra_parks gauge"
    );
    for (kind, n) in &parks {
        let _ = writeln!(out, "sutra_parks{{kind=\"{}\"}} {n}", label(kind));
    }
    let now = to_millis(state.runtime.clock().now());
    let lateness = counts
        .earliest_due
        .map_or(0.0, |d| (now.saturating_sub(d)).max(0) as f64 / 1000.0);
    let _ = writeln!(
        out,
        "# HELP sutra_park_lateness_seconds How long the most overdue timed park has been due (0 when none is).\n\
         # TYPE sutra_park_lateness_seconds gauge\nsutra_park_lateness_seconds {lateness}"
    );
    let _ = writeln!(
        out,
        "# HELP sutra_schedules_armed Armed schedules (timer start events).\n# TYPE sutra_schedules_armed gauge\n\
         sutra_schedules_armed {}",
        counts.schedules_armed
    );
    let _ = writeln!(
        out,
        "# HELP sutra_schedule_refusals Schedule fires refused (e.g. over quota), all time.\n\
         # TYPE sutra_schedule_refusals gauge\nsutra_schedule_refusals {}",
        counts.schedule_refusals
    );
    channel_metrics(state, &mut out).await?;
    let _ = writeln!(
        out,
        "# HELP sutra_http_responses_total HTTP answers of this server by status.\n# TYPE sutra_http_responses_total counter"
    );
    for (status, n) in state.http.snapshot() {
        let _ = writeln!(out, "sutra_http_responses_total{{status=\"{status}\"}} {n}");
    }
    Ok(out)
}

/// Incidents and channel-call requests by state (issue 14).
async fn channel_metrics(state: &AppState, out: &mut String) -> ApiResult<()> {
    use crate::store::channels::{ChannelStore, INCIDENT_OPEN, INCIDENT_RESOLVED};
    let store = state.runtime.store();
    let incidents = store.incident_counts().await?;
    let _ = writeln!(
        out,
        "# HELP sutra_incidents Incidents (poisoned deliveries, external tasks out of retries) by state.\n# TYPE sutra_incidents gauge"
    );
    for st in [INCIDENT_OPEN, INCIDENT_RESOLVED] {
        let n = incidents
            .iter()
            .find(|(s, _)| s == st)
            .map_or(0, |(_, n)| *n);
        let _ = writeln!(out, "sutra_incidents{{state=\"{st}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "# HELP sutra_channel_requests Channel-call requests in the outbox by state.\n# TYPE sutra_channel_requests gauge"
    );
    for (st, n) in store.request_counts().await? {
        let _ = writeln!(
            out,
            "sutra_channel_requests{{state=\"{}\"}} {n}",
            label(&st)
        );
    }
    Ok(())
}

/// `GET /metrics` (the admin key or the metrics token).
pub async fn metrics(
    State(state): State<Arc<AppState>>,
    _caller: MetricsCaller,
) -> ApiResult<impl IntoResponse> {
    let text = render(&state).await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn labels_are_bounded() {
        assert_eq!(label(&"x".repeat(100_000)).len(), MAX_LABEL_BYTES);
        // Cut at a character boundary.
        let cut = label(&"é".repeat(100));
        assert!(cut.len() <= MAX_LABEL_BYTES && cut.chars().all(|c| c == 'é'));
    }

    #[test]
    fn guest_codes_are_not_labels() {
        assert_eq!(code_label("SUTRA.TASK.TRAP"), "SUTRA.TASK.TRAP");
        assert_eq!(code_label("SECRET_A_CODE"), GUEST_CODE_LABEL);
        assert_eq!(code_label(&"y".repeat(100_000)), GUEST_CODE_LABEL);
        assert_eq!(code_label(""), "");
    }
}
