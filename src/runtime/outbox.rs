//! The outbox sender: push deliveries of channel-call requests.
//!
//! A request is POSTed as JSON (`requestId`, `correlation`, `channel`,
//! `instance`, `task`, `attempt`, `variables`) with an `Idempotency-Key`
//! header (the request id: fresh per call attempt, the same for every
//! delivery of one request) and a `Sutra-Signature` header
//! (`t=<unix ms>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`, [`sign`]).
//! A 2xx answer is a delivery; anything else (an error status, a refused
//! or timed-out connection, a host the policy does not allow) is a failed
//! delivery, retried after `initial-delay × 2^(n−1)`, capped at
//! `max-delay` — forever, unless `sutra.outbox.retry.max-attempts` is set:
//! the delivery that reaches it is POISONED (kept with its last error, never
//! retried, one incident opened in the same transaction) and the call hears
//! `SUTRA.OUTBOUND.DELIVERY_ATTEMPTS_EXHAUSTED` at once.
//!
//! Invariants:
//! - at least once, de-duplicable: a request is marked DELIVERED only after
//!   its 2xx, or by the step of an answer that came while its POST was open
//!   (channel.rs: the answer proves it arrived; one commit for both); a sender that dies before that leaves its claim to lapse
//!   (`delivery_lease_ms`), and the next claim re-sends it with the same
//!   idempotency key;
//! - every POST is bounded: connect timeout, whole-response timeout, at
//!   most `max-response-bytes` of the answer read, no redirect followed,
//!   no proxy, names resolved through the host policy (hosts.rs).

use super::driver::ms;
use super::hosts::literal_ip;
use super::{Runtime, RuntimeResult};
use crate::engine::{self, Event};
use crate::store::channels::{DeliveryOutcome, RequestRecord, Transport};
use crate::store::Store;
use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;
use std::time::Duration;

/// Push deliveries claimed per pass.
const CLAIM_BATCH: i64 = 64;
/// A claim outlives the POST's own timeouts by this much.
const CLAIM_MARGIN: Duration = Duration::from_secs(5);
/// The part of an error answer's body kept in the request's last error.
const ERROR_SNIPPET: usize = 200;

/// The header carrying the request signature.
pub const SIGNATURE_HEADER: &str = "Sutra-Signature";

/// `t=<t>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`: the signature of a
/// push request sent at `t` (Unix milliseconds).
pub fn sign(secret: &str, t: i64, body: &str) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// The body POSTed for a request.
pub fn request_body(req: &RequestRecord) -> String {
    let variables: serde_json::Value =
        serde_json::from_str(&req.payload).unwrap_or(serde_json::Value::Null);
    json!({
        "requestId": req.id,
        "correlation": req.correlation,
        "channel": req.channel,
        "instance": req.instance_id,
        "task": req.node,
        "attempt": req.call_attempt,
        "variables": variables,
    })
    .to_string()
}

impl<S: Store> Runtime<S> {
    /// How long a sender's claim on a delivery lasts.
    pub(crate) fn delivery_lease_ms(&self) -> i64 {
        let o = &self.inner.config.outbox;
        let lease = o.connect_timeout.as_std() + o.response_timeout.as_std() + CLAIM_MARGIN;
        i64::try_from(lease.as_millis()).unwrap_or(i64::MAX)
    }

    /// The wait before delivery `n + 1` after `n` failed ones.
    fn delivery_delay(&self, failed: i64) -> Duration {
        let o = &self.inner.config.outbox;
        let exp = u32::try_from(failed.saturating_sub(1).clamp(0, 62)).unwrap_or(62);
        o.initial_delay
            .as_std()
            .checked_mul(2u32.saturating_pow(exp.min(31)))
            .unwrap_or(Duration::MAX)
            .min(o.max_delay.as_std())
    }

    /// Claims every push delivery due now (cancelling requests whose call
    /// no longer waits) and sends them. Returns how many were sent.
    pub async fn deliver_due(&self) -> RuntimeResult<usize> {
        let mut sent = 0;
        loop {
            let now = ms(self.inner.clock.now());
            let due = self
                .inner
                .store
                .claim_deliveries(
                    now,
                    CLAIM_BATCH,
                    &self.inner.owner,
                    self.delivery_lease_ms(),
                )
                .await?;
            if due.is_empty() {
                return Ok(sent);
            }
            sent += due.len();
            let mut set = tokio::task::JoinSet::new();
            for req in due {
                let rt = self.clone();
                set.spawn(async move { rt.deliver(req).await });
            }
            while set.join_next().await.is_some() {}
        }
    }

    /// POST one claimed request and record what came of it.
    pub(crate) async fn deliver(&self, req: RequestRecord) {
        // Claimed, so stored sent: an answer may come before the POST ends.
        self.sending_begins(&req.id);
        let result = self.post(&req).await;
        if self.sending_ends(&req.id) {
            // The answer's step recorded it DELIVERED: its call is over.
            tracing::debug!(request = %req.id, "delivery recorded by its answer");
            return;
        }
        let now = ms(self.inner.clock.now());
        let failed = req.deliveries + 1;
        let outcome = match result {
            Ok(()) => DeliveryOutcome::Delivered,
            Err(error) => match self.inner.config.outbox.max_attempts {
                Some(max) if failed >= i64::from(max) => DeliveryOutcome::Poisoned {
                    error: format!("{failed} deliveries failed; the last: {error}"),
                    incident_id: super::new_id(now),
                },
                _ => {
                    let delay = self.delivery_delay(failed);
                    let due_at =
                        now.saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
                    DeliveryOutcome::Retry { due_at, error }
                }
            },
        };
        tracing::debug!(request = %req.id, outcome = ?outcome, "delivery");
        match self
            .inner
            .store
            .record_delivery(&req.id, &self.inner.owner, now, &outcome)
            .await
        {
            Ok(true) => {}
            // The claim lapsed and another sender has it: its verdict stands.
            Ok(false) => return,
            Err(e) => {
                tracing::error!(request = %req.id, error = %e, "cannot record a delivery; its claim will lapse and it is sent again");
                return;
            }
        }
        if let DeliveryOutcome::Poisoned { error, .. } = outcome {
            tracing::warn!(request = %req.id, channel = %req.channel, error = %error, "delivery poisoned");
            let Some((_, token)) = engine::parse_correlation(&req.correlation) else {
                return;
            };
            let event = Event::DeliveryFailed {
                token,
                request: req.id.clone(),
                message: error,
            };
            if let Err(e) = self.drive(req.instance_id.clone(), event).await {
                tracing::error!(instance = %req.instance_id, error = %e, "cannot tell the call its delivery was poisoned");
            }
        } else if matches!(outcome, DeliveryOutcome::Retry { .. }) {
            // A poller sleeping past the retry must look again.
            self.inner.wake.notify_one();
        }
    }

    /// One POST of a request: `Ok` on a 2xx.
    async fn post(&self, req: &RequestRecord) -> Result<(), String> {
        let channel = self
            .channel(&req.tenant, &req.channel)
            .await
            .map_err(|e| format!("cannot read channel {}: {e}", req.channel))?
            .ok_or_else(|| format!("channel {} is not configured", req.channel))?;
        let url = match (channel.transport, &channel.url) {
            (Transport::Push, Some(url)) => url.clone(),
            _ => return Err(format!("channel {} is not a push channel", req.channel)),
        };
        let parsed = reqwest::Url::parse(&url).map_err(|e| format!("bad URL {url}: {e}"))?;
        if let Some(ip) = literal_ip(&parsed) {
            if !self.inner.hosts.allows(&ip.to_string(), ip) {
                return Err(format!(
                    "{ip} is not among the addresses the server may call (sutra.outbox.allowed-hosts)"
                ));
            }
        }
        let body = request_body(req);
        let t = ms(self.inner.clock.now());
        let response = self
            .inner
            .http
            .post(parsed)
            .header("content-type", "application/json")
            .header("idempotency-key", &req.id)
            .header(SIGNATURE_HEADER, sign(&channel.secret, t, &body))
            .body(body)
            .send()
            .await
            .map_err(describe)?;
        let status = response.status();
        let head = read_capped(response, self.inner.config.outbox.max_response_bytes).await;
        if status.is_success() {
            Ok(())
        } else {
            let snippet: String = String::from_utf8_lossy(&head)
                .chars()
                .take(ERROR_SNIPPET)
                .collect();
            Err(format!("HTTP {}: {}", status.as_u16(), snippet.trim()))
        }
    }
}

/// A send error, with its causes (reqwest's own text is terse).
fn describe(e: reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// At most `cap` bytes of an answer's body (the rest is never read).
async fn read_capped(mut response: reqwest::Response, cap: u64) -> Vec<u8> {
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let mut out = Vec::new();
    while out.len() < cap {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = cap - out.len();
                out.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_an_hmac_of_the_instant_and_the_body() {
        // Known answer: HMAC-SHA256("key", "1.{}").
        let s = sign("key", 1, "{}");
        assert!(s.starts_with("t=1,v1="), "{s}");
        assert_eq!(s.len(), "t=1,v1=".len() + 64);
        assert_ne!(sign("key", 1, "{}"), sign("key", 2, "{}"));
        assert_ne!(sign("key", 1, "{}"), sign("other", 1, "{}"));
    }
}
