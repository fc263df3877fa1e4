//! Per-attempt limits and the memory limiter that enforces them.
//!
//! Invariant: every attempt runs under a [`Limits`]; the [`MemoryLimiter`]
//! refuses any growth that would take the sum of the attempt's linear memories
//! over `memory_bytes`, and remembers that it did, so a trap that follows is
//! reported as `SUTRA.TASK.MEMORY_LIMIT` rather than as a generic trap.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What one attempt may consume.
///
/// The defaults suit a short request/response task:
///
/// | field | default | what happens past it |
/// | --- | --- | --- |
/// | `fuel` | 10 000 000 000 units (roughly one unit per wasm instruction) | `SUTRA.TASK.FUEL_EXHAUSTED` |
/// | `deadline` | 30 s of wall-clock time, instantiation included | `SUTRA.TASK.DEADLINE_EXCEEDED` |
/// | `memory_bytes` | 64 MiB over all linear memories of the instance | `SUTRA.TASK.MEMORY_LIMIT` |
/// | `output_bytes` | 1 MiB of `ok` JSON text (also caps error messages and details) | `SUTRA.TASK.OUTPUT_INVALID` |
/// | `capture_bytes` | 16 KiB of guest stderr (the tail is kept) and 16 KiB of log lines | older bytes / later lines are dropped |
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Fuel units the attempt may burn.
    pub fuel: u64,
    /// Wall-clock time the attempt may take, from instantiation to return.
    pub deadline: Duration,
    /// Total bytes of linear memory the instance may hold.
    pub memory_bytes: u64,
    /// Maximum size of the `ok` output (JSON text) in bytes.
    pub output_bytes: usize,
    /// Bytes of guest stderr kept (the tail), and bytes of log lines kept.
    pub capture_bytes: usize,
}

impl Limits {
    /// Default fuel: 10^10 units.
    pub const DEFAULT_FUEL: u64 = 10_000_000_000;
    /// Default deadline: 30 s.
    pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(30);
    /// Default memory cap: 64 MiB.
    pub const DEFAULT_MEMORY_BYTES: u64 = 64 * 1024 * 1024;
    /// Default output cap: 1 MiB.
    pub const DEFAULT_OUTPUT_BYTES: usize = 1024 * 1024;
    /// Default capture cap: 16 KiB.
    pub const DEFAULT_CAPTURE_BYTES: usize = 16 * 1024;
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fuel: Self::DEFAULT_FUEL,
            deadline: Self::DEFAULT_DEADLINE,
            memory_bytes: Self::DEFAULT_MEMORY_BYTES,
            output_bytes: Self::DEFAULT_OUTPUT_BYTES,
            capture_bytes: Self::DEFAULT_CAPTURE_BYTES,
        }
    }
}

/// Caps the linear memory of one store (one attempt) and records a refusal.
#[derive(Debug)]
pub(crate) struct MemoryLimiter {
    cap: u64,
    max_table_elements: usize,
    /// Bytes currently held by all memories of the store.
    held: u64,
    /// Set when a growth was refused because of `cap`.
    hit: bool,
}

impl MemoryLimiter {
    pub(crate) fn new(cap: u64, max_table_elements: usize) -> Self {
        MemoryLimiter {
            cap,
            max_table_elements,
            held: 0,
            hit: false,
        }
    }

    /// Bytes of linear memory the store's memories hold.
    pub(crate) fn held(&self) -> u64 {
        self.held
    }

    /// A new attempt on a warm instance: its own cap, no refusal recorded;
    /// what the instance already holds stays counted (the memory limit is
    /// the instance's).
    pub(crate) fn renew(&mut self, cap: u64) {
        self.cap = cap;
        self.hit = false;
    }

    /// Whether a growth was refused because it would have gone over the cap.
    pub(crate) fn hit(&self) -> bool {
        self.hit
    }
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let grow_by = (desired as u64).saturating_sub(current as u64);
        let total = self.held.saturating_add(grow_by);
        if total > self.cap {
            self.hit = true;
            return Ok(false);
        }
        if maximum.is_some_and(|max| desired > max) {
            // The memory's own type forbids it: a guest matter, not our cap.
            return Ok(false);
        }
        self.held = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_table_elements {
            self.hit = true;
            return Ok(false);
        }
        Ok(maximum.is_none_or(|max| desired <= max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::ResourceLimiter;

    #[test]
    fn refusing_growth_over_the_cap_is_recorded() {
        let mut l = MemoryLimiter::new(1000, 10);
        assert!(l.memory_growing(0, 600, None).unwrap());
        assert!(!l.hit());
        // A second memory counts towards the same cap.
        assert!(!l.memory_growing(0, 600, None).unwrap());
        assert!(l.hit());
    }

    #[test]
    fn growth_within_the_cap_is_allowed_and_accumulates() {
        let mut l = MemoryLimiter::new(1000, 10);
        assert!(l.memory_growing(0, 400, None).unwrap());
        assert!(l.memory_growing(400, 1000, None).unwrap());
        assert!(!l.memory_growing(1000, 1001, None).unwrap());
        assert!(l.hit());
    }

    #[test]
    fn a_type_maximum_is_not_our_cap() {
        let mut l = MemoryLimiter::new(1000, 10);
        assert!(!l.memory_growing(0, 500, Some(100)).unwrap());
        assert!(!l.hit());
    }

    #[test]
    fn tables_are_capped_by_element_count() {
        let mut l = MemoryLimiter::new(1000, 10);
        assert!(l.table_growing(0, 10, None).unwrap());
        assert!(!l.table_growing(10, 11, None).unwrap());
        assert!(l.hit());
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let d = Limits::default();
        assert_eq!(d.memory_bytes, 64 << 20);
        assert_eq!(d.deadline, Duration::from_secs(30));
        assert_eq!(d.output_bytes, 1 << 20);
        assert_eq!(d.capture_bytes, 16 << 10);
    }
}
