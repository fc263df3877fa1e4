//! Repeated activities over variables (BPMN multi-instance and standard
//! loops): a [`super::Fanout`] whose single branch runs once per element of a
//! collection, a CEL count of times, or while a condition holds.
//!
//! The fan-out machinery is the States-language `Map`'s (`engine::fanout`):
//! one branch token per running iteration, bounded concurrency, results in
//! input order. What differs is where an iteration reads and writes: a
//! multi-instance iteration has its own variables scope (its element and
//! `loopCounter`, and whatever its tasks write), a loop iteration reads and
//! writes the enclosing variables (its condition must see them change).

use super::Expr;
use serde::Serialize;

/// The concurrency of a parallel multi-instance body when the definition
/// sets none (`q:multiInstance maxConcurrency`).
pub const DEFAULT_MAX_CONCURRENCY: u32 = 100;

/// The iterations a standard loop with no `loopMaximum` may run before it
/// fails with `SUTRA.RUNTIME.LOOP.LIMIT` (a loop that runs away).
pub const LOOP_LIMIT: u64 = 10_000;

#[derive(Debug, Clone, Serialize)]
pub struct Repeat {
    pub over: Over,
    /// The variable each iteration's element is bound to (a collection only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub element: Option<String>,
    /// The variable the collected results are written to when the body
    /// completes (in the enclosing scope).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_collection: Option<String>,
    /// Evaluated over an iteration's variables when it completes: its entry
    /// in the results. `None`: the variables the iteration wrote (its scope
    /// without its element and `loopCounter`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_element: Option<Expr>,
    /// Evaluated after every completed iteration over the enclosing variables
    /// with `nrOfInstances`, `nrOfCompletedInstances`, `nrOfActiveInstances`
    /// (and the iteration's own variables): `true` ends the body, cancelling
    /// the iterations still running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion: Option<Expr>,
    /// Iterations running at once (1 = sequential).
    pub max_concurrency: u32,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "over", rename_all = "snake_case")]
pub enum Over {
    /// `loopCardinality`: a CEL expression yielding a non-negative integer.
    Cardinality(Expr),
    /// A CEL expression yielding an array: one iteration per element.
    Collection(Expr),
    /// A standard loop: iterations one after another while `condition`
    /// holds (`None` = always), at most `maximum` (`None` = [`LOOP_LIMIT`],
    /// exceeding which fails). `test_before`: the condition is tested before
    /// each iteration (while-do), else after (do-while: at least one).
    Loop {
        #[serde(skip_serializing_if = "Option::is_none")]
        condition: Option<Expr>,
        test_before: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        maximum: Option<u64>,
    },
}

impl Repeat {
    /// Every expression it evaluates.
    pub fn expressions(&self) -> Vec<&Expr> {
        let over = match &self.over {
            Over::Cardinality(e) | Over::Collection(e) => Some(e),
            Over::Loop { condition, .. } => condition.as_ref(),
        };
        over.into_iter()
            .chain(self.output_element.as_ref())
            .chain(self.completion.as_ref())
            .collect()
    }

    /// Whether iterations have their own variables scope (multi-instance) or
    /// work in the enclosing one (a loop).
    pub fn scoped(&self) -> bool {
        !matches!(self.over, Over::Loop { .. })
    }
}
