//! The Map state: its items, item selector, concurrency (`MaxConcurrency`,
//! `MaxConcurrencyPath`), failure tolerance (`FailOnPartial`,
//! `ToleratedFailureCount[Path]`, `ToleratedFailurePercentage[Path]`) and
//! item processor, into a fan-out node.
//!
//! A Map that names neither `FailOnPartial` nor a tolerated-failure field
//! keeps seed 004's default (failed items are recorded, the flow goes on) and
//! gets a warning saying how that differs from Step Functions.

use super::json::{Jv, J};
use super::states::{exclusive_in, St};
use crate::codes::Code;
use crate::diag::Diagnostic;
use crate::model::{Bound, DataFlow, Fanout, Items, NodeIx, NodeKind, ResultPath};

impl St<'_, '_, '_> {
    pub(super) fn map(&mut self) -> (NodeIx, bool) {
        // `Parameters` is the item selector here (the older name), not an input template.
        let rp = self.get("ResultPath").cloned();
        let mut data = DataFlow {
            input: self.selection("InputPath"),
            result_selector: self.template("ResultSelector"),
            result_path: self.result_path(rp.as_ref(), ResultPath::Replace),
            output: self.selection("OutputPath"),
            ..DataFlow::default()
        };
        self.extras(&mut data);
        self.exclusive(&["Items", "ItemsPath"]);
        let selector_field = self
            .exclusive(&["ItemSelector", "Parameters"])
            .map(|(f, _)| f);
        // `$$.Map` exists in the item selector and the item processor.
        let outer = std::mem::replace(&mut self.b.cx.in_map, true);
        let selector = match selector_field {
            Some(f) if self.jsonata => self.get(f).map(super::jsonata::template),
            Some(f) => self.template(f),
            None => None,
        };
        self.b.cx.in_map = outer;
        if let Some(rc) = self
            .get("ItemReader")
            .and_then(|r| r.get("ReaderConfig"))
            .cloned()
        {
            exclusive_in(self.b.cx, self.name, &rc, &["MaxItems", "MaxItemsPath"]);
        }
        let path = self.selection("ItemsPath");
        let max_concurrency = match self.get("MaxConcurrency").cloned() {
            Some(v) if self.literal_only(&v, "MaxConcurrency") => {
                self.non_negative_int(&v, "MaxConcurrency").unwrap_or(0)
            }
            _ => 0,
        };
        let expr = match self.get("Items").cloned() {
            Some(v) if self.jsonata => match &v.v {
                Jv::Arr(_) => Some(super::jsonata::template(&v)),
                Jv::Str(s) if super::jsonata::is_expression(s) => {
                    Some(super::jsonata::template(&v))
                }
                _ => {
                    self.err(
                        Code::StatesInvalidField,
                        v.pos,
                        "`Items` is an array or a JSONata expression `{% ... %}`",
                    );
                    None
                }
            },
            _ => None,
        };
        let max_concurrency_path = match self.exclusive(&["MaxConcurrency", "MaxConcurrencyPath"]) {
            Some(("MaxConcurrencyPath", v)) if !self.jsonata => {
                self.b.cx.path_field(&v, self.name, "MaxConcurrencyPath")
            }
            _ => None,
        };
        let fail_on_partial = match self.get("FailOnPartial").map(|v| v.v.clone()) {
            None => false,
            Some(Jv::Bool(b)) => b,
            Some(_) => {
                let pos = self.get("FailOnPartial").map(|v| v.pos).unwrap_or_default();
                self.err(
                    Code::StatesInvalidField,
                    pos,
                    "`FailOnPartial` must be true or false",
                );
                false
            }
        };
        let tolerated_count = self.bound("ToleratedFailureCount", 4_294_967_295.0, true);
        let tolerated_percentage = self.bound("ToleratedFailurePercentage", 100.0, false);
        let decided = [
            "FailOnPartial",
            "ToleratedFailureCount",
            "ToleratedFailureCountPath",
        ]
        .iter()
        .chain(&[
            "ToleratedFailurePercentage",
            "ToleratedFailurePercentagePath",
        ])
        .any(|f| self.get(f).is_some());
        if !decided {
            let d = Diagnostic::warning(
                Code::StatesMapPartialDefault,
                "this Map names neither `FailOnPartial` nor a tolerated-failure field: Sutra \
                 follows seed 004 (a failed item's {Error, Cause} takes its place in the results \
                 and the flow goes on), where Step Functions fails the Map on the first failed \
                 item; set `\"FailOnPartial\": true` (or `\"ToleratedFailureCount\": 0`) for \
                 Step Functions' behaviour, or `\"FailOnPartial\": false` to keep this one",
            )
            .at(self.j.pos)
            .element(self.name);
            self.b.cx.diags.push(d);
        }
        let retries = self.retriers();
        let items = Items {
            path,
            expr,
            selector,
            max_concurrency: u32::try_from(max_concurrency).unwrap_or(u32::MAX),
            max_concurrency_path: max_concurrency_path.map(Box::new),
            fail_on_partial,
            tolerated_count: tolerated_count.map(Box::new),
            tolerated_percentage: tolerated_percentage.map(Box::new),
        };
        let node = self.node(
            NodeKind::Fanout(Fanout {
                branches: Vec::new(),
                items: Some(items),
                retries,
                repeat: None,
            }),
            Some(data),
        );
        let processor = self.exclusive(&["ItemProcessor", "Iterator"]);
        match processor {
            None => self.err(
                Code::StatesMissingField,
                self.j.pos,
                "a Map needs `ItemProcessor` (or `Iterator`)",
            ),
            Some((_, pj)) => {
                if let Some(cfg) = pj.get("ProcessorConfig") {
                    self.processor_config(cfg);
                }
                let owner = format!("{}#iteration", self.name);
                let scope = self.b.node(
                    owner.clone(),
                    pj.pos,
                    Some(node),
                    NodeKind::SubProcess,
                    None,
                );
                let outer = std::mem::replace(&mut self.b.cx.in_map, true);
                self.b.machine(
                    &pj,
                    Some(scope),
                    &owner,
                    &["ProcessorConfig", "QueryLanguage"],
                );
                self.b.cx.in_map = outer;
                if let NodeKind::Fanout(f) = &mut self.b.nodes[node.0 as usize].kind {
                    f.branches = vec![scope];
                }
            }
        }
        self.catchers(node);
        (node, self.next_or_end(node))
    }

    fn processor_config(&mut self, cfg: &J) {
        let Some(obj) = cfg.as_obj() else {
            self.err(
                Code::StatesInvalidField,
                cfg.pos,
                "`ProcessorConfig` must be an object",
            );
            return;
        };
        for (k, v) in obj {
            match (k.name.as_str(), v.as_str()) {
                ("Mode", Some("INLINE")) => {}
                ("Mode", Some("DISTRIBUTED")) => {
                    self.b
                        .cx
                        .unsupported(v.pos, self.name, "distributed Map (`Mode` DISTRIBUTED)")
                }
                ("ExecutionType", Some("STANDARD" | "EXPRESS")) => {
                    self.b
                        .cx
                        .unsupported(v.pos, self.name, "distributed Map `ExecutionType`")
                }
                ("Mode" | "ExecutionType", _) => self.err(
                    Code::StatesInvalidField,
                    v.pos,
                    format!("`{}` has an unknown value", k.name),
                ),
                (other, _) => self.err(
                    Code::StatesUnknownField,
                    k.pos,
                    format!("`ProcessorConfig` has no field `{other}`"),
                ),
            }
        }
    }

    /// `Field` (a number from 0 to `max`, an integer when `integer`) or
    /// `FieldPath` (a path read when the Map starts), at most one.
    fn bound(&mut self, field: &'static str, max: f64, integer: bool) -> Option<Bound> {
        let path_field: &'static str = match field {
            "ToleratedFailureCount" => "ToleratedFailureCountPath",
            _ => "ToleratedFailurePercentagePath",
        };
        match self.exclusive(&[field, path_field])? {
            (_, v) if !self.literal_only(&v, field) => None,
            (f, v) if f == path_field => self
                .b
                .cx
                .path_field(&v, self.name, path_field)
                .map(Bound::Path),
            (_, v) => {
                let n = v
                    .to_value()
                    .as_f64()
                    .filter(|n| (0.0..=max).contains(n) && (!integer || n.fract() == 0.0));
                if n.is_none() {
                    self.err(
                        Code::StatesInvalidField,
                        v.pos,
                        if integer {
                            format!("`{field}` is a non-negative integer")
                        } else {
                            format!("`{field}` is a number from 0 to {max}")
                        },
                    );
                }
                n.map(Bound::Fixed)
            }
        }
    }
}
