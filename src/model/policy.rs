//! The one retry-policy and timeout types every dialect fills.
use crate::codes::ErrorClass;
use crate::time::IsoDuration;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Backoff {
    /// `initial_delay × coefficient^(n−2)` before attempt n (n ≥ 2).
    Exponential { coefficient: f64 },
    /// `initial_delay` before every retry.
    Fixed,
    /// `initial_delay × (n−1)` before attempt n.
    Linear,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Jitter {
    None,
    /// Uniform in `[0, delay]`.
    Full,
}

/// One retrier. Dialects convert their own counting into `max_attempts`
/// (total attempts, the first included).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetryPolicy {
    /// Error codes this retrier applies to (ASL `ErrorEquals`); `None` = every failure.
    /// `States.ALL` is stored as `None`.
    pub error_equals: Option<Vec<String>>,
    /// Total attempts allowed, the first included (≥ 1).
    pub max_attempts: u32,
    pub initial_delay: IsoDuration,
    pub backoff: Backoff,
    pub max_delay: Option<IsoDuration>,
    pub jitter: Jitter,
    /// Failures with one of these codes are never retried (BPMN `nonRetryableCodes`).
    pub non_retryable_codes: Vec<String>,
    /// Only failures of these classes are retried (HX `retryOn`); `None` = any class.
    pub retry_on: Option<Vec<ErrorClass>>,
}

impl RetryPolicy {
    /// The un-jittered delay before attempt `n` (n ≥ 2), capped at `max_delay`.
    pub fn base_delay(&self, n: u32) -> std::time::Duration {
        let initial = self.initial_delay.as_std().as_secs_f64();
        let k = n.saturating_sub(2);
        let secs = match self.backoff {
            Backoff::Exponential { coefficient } => {
                initial * coefficient.powi(k.min(i32::MAX as u32) as i32)
            }
            Backoff::Fixed => initial,
            Backoff::Linear => initial * f64::from(n.saturating_sub(1)),
        };
        let max = self
            .max_delay
            .map(|d| d.as_std().as_secs_f64())
            .unwrap_or(f64::MAX);
        let secs = if secs.is_finite() { secs.min(max) } else { max };
        // Saturate rather than panic on absurd policies (a century is "forever" here).
        std::time::Duration::try_from_secs_f64(secs.clamp(0.0, 3.2e9))
            .unwrap_or(std::time::Duration::ZERO)
    }

    /// The delay before attempt `n`, jittered with `draw` ∈ [0, 1) when jitter is on.
    pub fn delay(&self, n: u32, draw: f64) -> std::time::Duration {
        let base = self.base_delay(n);
        match self.jitter {
            Jitter::None => base,
            Jitter::Full => base.mul_f64(draw.clamp(0.0, 1.0)),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnTimeout {
    /// A failed attempt of class `timeout` (the retry policy judges it).
    Retry,
    /// Fails the node at once.
    Fail,
    /// The node ends SKIPPED with no output; the flow continues.
    Skip,
    /// A modelled error (BPMN `q:timeout` without `q:retry`): the expiry is a
    /// business error with the timeout's code, which an error boundary
    /// naming that code (or a catch-all one) catches; uncaught, the instance
    /// fails with it.
    Error,
}

/// A bound on one attempt (HX `<timeout>`) or on a channel call's window (BPMN `q:timeout`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskTimeout {
    pub duration: IsoDuration,
    pub on_timeout: OnTimeout,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(backoff: Backoff, max: Option<u64>) -> RetryPolicy {
        RetryPolicy {
            error_equals: None,
            max_attempts: 10,
            initial_delay: IsoDuration::from_millis(1000),
            backoff,
            max_delay: max.map(IsoDuration::from_millis),
            jitter: Jitter::None,
            non_retryable_codes: vec![],
            retry_on: None,
        }
    }

    #[test]
    fn exponential_doubles_from_the_initial_delay() {
        let p = policy(Backoff::Exponential { coefficient: 2.0 }, None);
        let d: Vec<u128> = (2..=4).map(|n| p.base_delay(n).as_millis()).collect();
        assert_eq!(d, vec![1000, 2000, 4000]);
    }

    #[test]
    fn max_delay_caps() {
        let p = policy(Backoff::Exponential { coefficient: 2.0 }, Some(2500));
        assert_eq!(p.base_delay(4).as_millis(), 2500);
        assert_eq!(p.base_delay(1000).as_millis(), 2500);
    }

    #[test]
    fn linear_and_fixed() {
        assert_eq!(
            policy(Backoff::Linear, None).base_delay(4).as_millis(),
            3000
        );
        assert_eq!(policy(Backoff::Fixed, None).base_delay(4).as_millis(), 1000);
    }

    #[test]
    fn full_jitter_stays_within_the_delay() {
        let mut p = policy(Backoff::Exponential { coefficient: 2.0 }, None);
        p.jitter = Jitter::Full;
        assert_eq!(p.delay(3, 0.5).as_millis(), 1000);
        assert_eq!(p.delay(3, 0.0).as_millis(), 0);
    }
}
