//! Dialect loaders: text in, `model::Definitions` + diagnostics out. No dialect
//! leaks past here.
pub mod bpmn;
