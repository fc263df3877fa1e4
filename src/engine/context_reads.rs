//! Whether a node can read the execution input (`$$.Execution.Input`,
//! JSONata's `$states.context.Execution.Input`) through the context object.
//!
//! The context (`docflow::context_of`) is built for every node entry with a
//! data flow; with the execution input in it, that is a copy of the whole
//! start document per entry — a `Map` over 10,000 items of its input copied
//! its 10,000 items for each of them (issue 33 item 1). It is put in only
//! for a node that may read it, decided from what the node and its outgoing
//! flows (a Choice's rules) hold as written:
//!
//! - every `$$` in any of its strings (paths, intrinsic arguments, literals)
//!   must be followed by `.Map`, `.State`, `.StateMachine`, `.Task` or
//!   `.Execution.` + one of `Id`, `Name`, `StartTime`, `RoleArn`,
//!   `RedriveCount`, each a whole segment; anything else (`$$` alone, a
//!   wildcard, a bracket, `$$.Execution`, `$$.Execution.Input`) may read it;
//! - every `$states` in a string must be `$states.input`, `$states.result`
//!   or `$states.errorOutput` (a whole name): the context is reachable in
//!   JSONata only through `$states`.
//!
//! The test is conservative: a false "may read" only costs the copy.

use crate::model::{Node, Process};
use serde_json::Value;

impl super::machine::Machine<'_> {
    /// Whether `node` may read the execution input (cached for the step).
    pub(super) fn reads_execution_input(&self, node: &Node) -> bool {
        if let Some(&known) = self.input_readers.borrow().get(&node.ix) {
            return known;
        }
        let reads = may_read_input(self.process, node);
        self.input_readers.borrow_mut().insert(node.ix, reads);
        reads
    }
}

fn may_read_input(process: &Process, node: &Node) -> bool {
    // What does not serialise (never: the model is plain data) is taken as
    // reading it.
    let reads = |v: Result<Value, serde_json::Error>| match v {
        Ok(v) => any_string(&v, &mut |s| reads_in(s)),
        Err(_) => true,
    };
    reads(serde_json::to_value(node))
        || node
            .outgoing
            .iter()
            .any(|&f| reads(serde_json::to_value(process.flow(f))))
}

fn any_string(v: &Value, f: &mut impl FnMut(&str) -> bool) -> bool {
    match v {
        Value::String(s) => f(s),
        Value::Array(a) => a.iter().any(|x| any_string(x, f)),
        Value::Object(m) => m.iter().any(|(k, x)| f(k) || any_string(x, f)),
        _ => false,
    }
}

const CONTEXT_SAFE: [&str; 4] = ["Map", "State", "StateMachine", "Task"];
const EXECUTION_SAFE: [&str; 5] = ["Id", "Name", "StartTime", "RoleArn", "RedriveCount"];
const STATES_SAFE: [&str; 3] = ["input", "result", "errorOutput"];

/// Whether text `s` may reach the execution input.
fn reads_in(s: &str) -> bool {
    occurrences(s, "$$").any(|rest| !context_safe(rest))
        || occurrences(s, "$states").any(|rest| !states_safe(rest))
}

/// What follows each occurrence of `pat` in `s`.
fn occurrences<'s>(s: &'s str, pat: &'s str) -> impl Iterator<Item = &'s str> + 's {
    s.match_indices(pat).map(move |(i, _)| &s[i + pat.len()..])
}

/// The segment `.name` at the start of `rest` (a name up to `.`, `[`, a
/// non-name character or the end), and what follows it.
fn segment(rest: &str) -> Option<(&str, &str)> {
    let rest = rest.strip_prefix('.')?;
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    Some((&rest[..end], &rest[end..]))
}

fn context_safe(rest: &str) -> bool {
    match segment(rest) {
        Some(("Execution", after)) => {
            matches!(segment(after), Some((name, _)) if EXECUTION_SAFE.contains(&name))
        }
        Some((name, _)) => CONTEXT_SAFE.contains(&name),
        None => false,
    }
}

fn states_safe(rest: &str) -> bool {
    // `$statesX` is another variable.
    if rest.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
        return true;
    }
    matches!(segment(rest), Some((name, _)) if STATES_SAFE.contains(&name))
}

#[cfg(test)]
mod tests {
    use super::reads_in;

    #[test]
    fn only_named_parts_of_the_context_are_taken_as_not_reading_the_input() {
        for safe in [
            "$$.Map.Item.Value",
            "$$.Map.Item.Index",
            "$.x",
            "$$.State.Name",
            "$$.Execution.Id",
            "$$.Execution.StartTime",
            "{% $states.input.a & $states.result.b %}",
            "{% $statesx %}",
            "States.Format('{}', $$.Map.Item.Value)",
        ] {
            assert!(!reads_in(safe), "{safe}");
        }
        for reads in [
            "$$",
            "$$.Execution",
            "$$.Execution.Input",
            "$$.Execution.Input.xs",
            "$$.*",
            "$$..xs",
            "$$['Execution']",
            "$$.Execution.*",
            "$$.Execution.InputX",
            "$$.MapX",
            "{% $states.context.Execution.Input %}",
            "{% $states %}",
            "{% $keys($states) %}",
            "{% $lookup($states, 'con' & 'text') %}",
            "States.Format('{}', $$.Execution.Input)",
        ] {
            assert!(reads_in(reads), "{reads}");
        }
    }
}
