//! Sutra: a durable workflow engine whose registered tasks are WebAssembly
//! components. See ARCHITECTURE.md for the bird's-eye view and the code map.

pub mod alloc;
pub mod api;
pub mod cli;
pub mod codes;
pub mod config;
pub mod diag;
pub mod diagram;
pub mod dialect;
// Outbound HTTP of tasks: grants, the address check, limits, call records, secrets (issue 30).
pub mod egress;
pub mod engine;
pub mod model;
pub mod runtime;
pub mod sandbox;
pub mod store;
pub mod time;

pub use codes::{Code, ErrorClass};

/// Every binary built on this library (`sutra`, its tests and benches)
/// allocates through [`alloc::SutraAlloc`]: mimalloc (feature `mimalloc`,
/// default), or the system's allocator under `SUTRA_ALLOCATOR=system`.
#[global_allocator]
static GLOBAL: alloc::SutraAlloc = alloc::SutraAlloc;
