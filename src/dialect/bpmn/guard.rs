//! A panic guard around third-party parsers that are not panic-free.
//!
//! `cel-interpreter` 0.10 (its ANTLR visitor) panics on some syntax errors
//! such as `amount >`. A definition file is untrusted input, so the loader
//! parses conditions through [`parse_expr`]: a panic becomes an ordinary
//! [`ExprError`], and the panic message is kept off stderr (a chained panic
//! hook stays silent only on the thread, and only for the duration, of a
//! guarded call; every other panic is reported as before).
//!
//! Invariant: no panic escapes [`parse_expr`].

use crate::model::{Expr, ExprError};
use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

static HOOK: Once = Once::new();

fn install_hook() {
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info);
            }
        }));
    });
}

/// [`Expr::parse`], with a parser panic turned into an error.
pub fn parse_expr(text: &str) -> Result<Expr, ExprError> {
    install_hook();
    QUIET.with(|q| q.set(true));
    let result = panic::catch_unwind(AssertUnwindSafe(|| Expr::parse(text)));
    QUIET.with(|q| q.set(false));
    result.unwrap_or_else(|_| Err(ExprError("syntax error (the expression is incomplete or malformed)".into())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_panics_become_errors() {
        for bad in ["amount >", "order.id ==", "x == 1 &&", "a +"] {
            assert!(parse_expr(bad).is_err(), "{bad}");
        }
        assert!(parse_expr("amount > 1").is_ok());
    }
}
