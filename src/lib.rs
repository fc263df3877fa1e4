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
