//! Sutra: a durable workflow engine whose registered tasks are WebAssembly
//! components. See ARCHITECTURE.md for the bird's-eye view and the code map.

pub mod api;
pub mod cli;
pub mod codes;
pub mod config;
pub mod diag;
pub mod diagram;
pub mod dialect;
pub mod engine;
pub mod model;
pub mod runtime;
pub mod sandbox;
pub mod store;
pub mod time;

pub use codes::{Code, ErrorClass};

/// Every binary built on this library (`sutra`, its tests and benches)
/// allocates with mimalloc: steps allocate on tokio's workers and are freed
/// on SQLite's writer thread, the cross-thread pattern glibc's malloc is
/// slowest at (benches/README "Session 8"). Feature `mimalloc` (default).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
