//! Retriers and catchers (`Retry`, `Catch`) of Task, Parallel, Map and
//! InvokeFlow states: ordered, `ErrorEquals` checked (`States.ALL` alone
//! and last), `MaxAttempts` converted from retries to attempts.

use super::json::J;
use super::states::St;
use crate::codes::Code;
use crate::model::{Backoff, DataFlow, Jitter, NodeIx, ResultPath, RetryPolicy};
use crate::time::IsoDuration;

use super::build::Pending;

impl St<'_, '_, '_> {
    /// `ErrorEquals`: `None` = `States.ALL`.
    fn error_equals(&mut self, item: &J, last: bool, what: &str) -> Option<Option<Vec<String>>> {
        let Some(e) = item.get("ErrorEquals") else {
            self.err(
                Code::StatesMissingField,
                item.pos,
                format!("a {what} needs `ErrorEquals`"),
            );
            return None;
        };
        let Some(list) = e.as_arr().filter(|a| !a.is_empty()) else {
            self.err(
                Code::StatesInvalidErrorEquals,
                e.pos,
                "`ErrorEquals` must be a non-empty array of error names",
            );
            return None;
        };
        let mut names = Vec::new();
        for n in list {
            match n.as_str() {
                Some(s) if !s.is_empty() => names.push(s.to_string()),
                _ => {
                    self.err(
                        Code::StatesInvalidField,
                        n.pos,
                        format!("an error name must be a string, not {}", n.kind()),
                    );
                    return None;
                }
            }
        }
        if names.iter().any(|n| n == Code::StatesAll.as_str()) {
            if names.len() > 1 || !last {
                self.err(
                    Code::StatesInvalidErrorEquals,
                    e.pos,
                    format!("`States.ALL` must stand alone in the last {what}"),
                );
                return None;
            }
            return Some(None);
        }
        Some(Some(names))
    }

    pub(super) fn retriers(&mut self) -> Vec<RetryPolicy> {
        let Some(r) = self.get("Retry").cloned() else {
            return Vec::new();
        };
        let Some(items) = r.as_arr() else {
            self.err(
                Code::StatesInvalidField,
                r.pos,
                "`Retry` must be an array of retriers",
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let Some(obj) = item.as_obj() else {
                self.err(
                    Code::StatesInvalidField,
                    item.pos,
                    "a retrier must be an object",
                );
                continue;
            };
            for (k, _) in obj {
                if !matches!(
                    k.name.as_str(),
                    "ErrorEquals"
                        | "IntervalSeconds"
                        | "MaxAttempts"
                        | "BackoffRate"
                        | "MaxDelaySeconds"
                        | "JitterStrategy"
                        | "Comment"
                ) {
                    self.err(
                        Code::StatesUnknownField,
                        k.pos,
                        format!("a retrier has no field `{}`", k.name),
                    );
                }
            }
            let codes = self.error_equals(item, i + 1 == items.len(), "retrier");
            let interval = item
                .get("IntervalSeconds")
                .map(|v| self.positive_int(v, "IntervalSeconds"));
            let attempts = item
                .get("MaxAttempts")
                .map(|v| self.non_negative_int(v, "MaxAttempts"));
            let rate = match item.get("BackoffRate") {
                None => Some(2.0),
                Some(v) => match v.to_value().as_f64() {
                    Some(x) if (1.0..=1000.0).contains(&x) => Some(x),
                    _ => {
                        self.err(
                            Code::StatesInvalidField,
                            v.pos,
                            "`BackoffRate` must be a number of at least 1.0",
                        );
                        None
                    }
                },
            };
            let max_delay = item
                .get("MaxDelaySeconds")
                .map(|v| self.positive_int(v, "MaxDelaySeconds"));
            let jitter = match item.get("JitterStrategy") {
                None => Some(Jitter::None),
                Some(v) => match v.as_str() {
                    Some("FULL") => Some(Jitter::Full),
                    Some("NONE") => Some(Jitter::None),
                    _ => {
                        self.err(
                            Code::StatesInvalidField,
                            v.pos,
                            "`JitterStrategy` is FULL or NONE",
                        );
                        None
                    }
                },
            };
            let (Some(codes), Some(rate), Some(jitter)) = (codes, rate, jitter) else {
                continue;
            };
            let (Some(interval), Some(attempts), Some(max_delay)) = (
                interval.unwrap_or(Some(1)),
                attempts.unwrap_or(Some(3)),
                max_delay.map_or(Some(None), |d| d.map(Some)),
            ) else {
                continue;
            };
            out.push(RetryPolicy {
                error_equals: codes,
                // MaxAttempts counts retries; the core counts attempts.
                max_attempts: u32::try_from(attempts.saturating_add(1)).unwrap_or(u32::MAX),
                initial_delay: IsoDuration::from_secs(interval),
                backoff: Backoff::Exponential { coefficient: rate },
                max_delay: max_delay.map(IsoDuration::from_secs),
                jitter,
                non_retryable_codes: Vec::new(),
                retry_on: None,
            });
        }
        out
    }

    pub(super) fn catchers(&mut self, activity: NodeIx) {
        let Some(c) = self.get("Catch").cloned() else {
            return;
        };
        let Some(items) = c.as_arr() else {
            self.err(
                Code::StatesInvalidField,
                c.pos,
                "`Catch` must be an array of catchers",
            );
            return;
        };
        for (i, item) in items.iter().enumerate() {
            let Some(obj) = item.as_obj() else {
                self.err(
                    Code::StatesInvalidField,
                    item.pos,
                    "a catcher must be an object",
                );
                continue;
            };
            for (k, _) in obj {
                match k.name.as_str() {
                    "ErrorEquals" | "Next" | "ResultPath" | "Comment" | "Assign" => {}
                    "Output" if self.jsonata => {}
                    other => self.err(
                        Code::StatesUnknownField,
                        k.pos,
                        format!("a catcher has no field `{other}`"),
                    ),
                }
            }
            let codes = self.error_equals(item, i + 1 == items.len(), "catcher");
            let result_path = self.result_path(item.get("ResultPath"), ResultPath::Replace);
            let next = match item.get("Next") {
                Some(n) => match n.as_str() {
                    Some(t) => Some((t.to_string(), n.pos)),
                    None => {
                        self.err(
                            Code::StatesInvalidField,
                            n.pos,
                            "`Next` must be a state name",
                        );
                        None
                    }
                },
                None => {
                    self.err(Code::StatesMissingField, item.pos, "a catcher needs `Next`");
                    None
                }
            };
            let (Some(codes), Some((target, pos))) = (codes, next) else {
                continue;
            };
            let mut data = DataFlow {
                result_path,
                jsonata: self.jsonata,
                ..DataFlow::default()
            };
            if self.jsonata {
                data.output_template = item.get("Output").map(super::jsonata::template);
            }
            if let Some(a) = item.get("Assign") {
                data.assign = self.assign(a);
            }
            let id = format!("{}#catch{}", self.name, i + 1);
            let b = self.b.catcher(activity, id, item.pos, codes, data);
            self.transitions.push(Pending {
                from: b,
                target,
                pos,
                condition: None,
                default: false,
            });
        }
    }
}
