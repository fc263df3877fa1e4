//! The record of an attempt's outbound calls: one entry per request made or
//! denied, bounded like the log tails, stored with the attempt's row.
//!
//! Invariant: an entry holds no query string and no body, so no secret
//! value can reach it (a path holds the placeholder the guest wrote, never a
//! substituted value, and no query); a guest's call records no header; an
//! HTTP task's call (issue 31) records its request headers with the
//! connection's and every `{{secret:..}}` one redacted, and a bounded
//! excerpt of the response body; at most [`MAX_CALLS`] entries are kept per
//! attempt (the first ones), then a count of the others.

use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};

/// The most calls one attempt's record keeps.
pub const MAX_CALLS: usize = 32;
/// The most bytes of a path kept in a record.
const MAX_PATH: usize = 256;

/// One outbound request of an attempt.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Call {
    pub method: String,
    pub scheme: String,
    pub host: String,
    pub port: u16,
    /// The path, without the query.
    pub path: String,
    /// The response status, when a response came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Body bytes sent.
    pub bytes_out: u64,
    /// Body bytes received (up to the cut).
    pub bytes_in: u64,
    /// From the request to the response's end (or its failure), in microseconds.
    pub duration_us: u64,
    /// `SUTRA.TASK.EGRESS_DENIED` when the host refused to send it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Why it was denied, or how it failed (connect, timeout, a cut body).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// An HTTP task's request headers (lowercase names), the connection's
    /// and any holding a secret placeholder as `[redacted]`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub request_headers: std::collections::BTreeMap<String, String>,
    /// An HTTP task's response body, its first bytes (see `runtime::http_task`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_excerpt: Option<String>,
}

/// The calls of one attempt, bounded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CallRecord {
    pub calls: Vec<Call>,
    /// Calls made past [`MAX_CALLS`], not kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl CallRecord {
    /// Whether a call was denied by the policy.
    pub fn any_denied(&self) -> bool {
        self.calls.iter().any(|c| c.code.is_some())
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty() && self.dropped == 0
    }
}

/// A shared handle on an attempt's record (the session writes, the sandbox reads).
#[derive(Debug, Clone, Default)]
pub struct CallLog {
    inner: Arc<Mutex<(CallRecord, bool)>>,
}

/// Where one call sits in the log (`None` when it was not kept).
#[derive(Debug, Clone, Copy)]
pub struct Slot(Option<usize>);

impl CallLog {
    pub fn push(&self, mut call: Call) -> Slot {
        let Ok(mut g) = self.inner.lock() else {
            return Slot(None);
        };
        let (rec, denied) = &mut *g;
        *denied |= call.code.is_some();
        if rec.calls.len() >= MAX_CALLS {
            rec.dropped = rec.dropped.saturating_add(1);
            return Slot(None);
        }
        if call.path.len() > MAX_PATH {
            let mut end = MAX_PATH;
            while !call.path.is_char_boundary(end) {
                end -= 1;
            }
            call.path.truncate(end);
            call.path.push_str("[cut]");
        }
        rec.calls.push(call);
        Slot(Some(rec.calls.len() - 1))
    }

    /// Change a kept call in place.
    pub fn update(&self, slot: Slot, f: impl FnOnce(&mut Call)) {
        let Slot(Some(i)) = slot else { return };
        if let Ok(mut g) = self.inner.lock() {
            if let Some(c) = g.0.calls.get_mut(i) {
                f(c);
            }
        }
    }

    /// Whether any call was denied (also one past the kept ones).
    pub fn denied(&self) -> bool {
        self.inner.lock().is_ok_and(|g| g.1)
    }

    pub fn snapshot(&self) -> CallRecord {
        self.inner.lock().map(|g| g.0.clone()).unwrap_or_default()
    }
}
