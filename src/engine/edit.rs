//! An operator's edit of an instance's variables (issue 35 item 6: fix the
//! data, then retry): `Event::EditVariables`.
//!
//! Invariants:
//! - only a FAILED instance (its variables are what a retry from the
//!   failure resumes with) or a WAITING one (what runs next reads them) is
//!   edited; any other state is `SUTRA.RUNTIME.INSTANCE_STATE`, nothing changed;
//! - a waiting instance whose data are documents (a States-language
//!   execution: each state reads its own input, not the variables) is
//!   refused the same way: an edit there would change nothing it reads;
//! - an edit is one step: the variables set and unset, and one journal entry
//!   `variables_edited` naming who asked, the names set and unset, and the
//!   values set (the journal says when).

use super::machine::Machine;
use super::snapshot::InstanceState;
use super::EngineError;
use crate::codes::Code;
use serde_json::{json, Map, Value};

impl Machine<'_> {
    pub(super) fn edit_variables(
        &mut self,
        set: Map<String, Value>,
        unset: Vec<String>,
        by: Option<String>,
    ) -> Result<(), EngineError> {
        let state = self.snap.state;
        if !matches!(state, InstanceState::Failed | InstanceState::Waiting) {
            return Err(EngineError::new(
                Code::InstanceState,
                format!(
                    "instance is {}: variables are edited only on a FAILED instance (before a retry from its failure) or a WAITING one",
                    state.as_str()
                ),
            ));
        }
        if state == InstanceState::Waiting && self.process.nodes.iter().any(|n| n.data.is_some()) {
            return Err(EngineError::new(
                Code::InstanceState,
                "a waiting execution of this process reads each state's input, not the variables: edit its variables once it FAILED, then retry from the failure",
            ));
        }
        if let Some(name) = unset.iter().find(|n| set.contains_key(*n)) {
            return Err(EngineError::new(
                Code::InstanceInputInvalid,
                format!("variable `{name}` is both set and unset"),
            ));
        }
        journal!(
            self,
            "variables_edited",
            None,
            json!({ "by": by, "set": set, "unset": unset }),
        );
        for name in &unset {
            self.snap.variables.remove(name);
        }
        for (k, v) in set {
            self.snap.variables.insert(k, v);
        }
        Ok(())
    }
}
