//! The SQLite writer thread's connection with its statements held: each
//! statement it runs is prepared once and kept for the connection's life,
//! found again by the address of its text.
//!
//! Why not `rusqlite`'s own cache (`Connection::prepare_cached`): it finds a
//! statement by hashing its whole text (a few hundred bytes each), moves it
//! out of and back into an LRU list, and clears its bindings on every return
//! — a quarter of a microsecond a statement, several statements a step, on
//! the thread every write waits for (benches/README "Session 23").
//!
//! Invariants:
//! - the writer's statements are `&'static str` constants, so a text's
//!   address and length name it: the same text at two addresses (a `const`
//!   may be a copy at each use) is only two prepared copies of one
//!   statement, never a wrong one, and the copies are bounded by the call
//!   sites;
//! - a statement is taken out of the list while it runs and put back after,
//!   so a use inside another's closure prepares its own copy instead of
//!   borrowing one in use (nothing here can panic on a double borrow);
//! - every use binds all of a statement's parameters (rusqlite checks the
//!   count), so the values a kept statement still holds are never read;
//! - the connection's other callers (the outbox, signals and counts
//!   helpers, which take a `&Connection`) keep `prepare_cached`.

use rusqlite::{Connection, Statement};
use std::cell::RefCell;
use std::ops::Deref;

/// A statement's text, by address and length.
type Key = (usize, usize);

/// The writer's connection and the statements it has prepared.
pub(super) struct Held<'c> {
    conn: &'c Connection,
    statements: RefCell<Vec<(Key, Option<Statement<'c>>)>>,
}

impl<'c> Held<'c> {
    pub(super) fn new(conn: &'c Connection) -> Held<'c> {
        Held {
            conn,
            statements: RefCell::new(Vec::new()),
        }
    }

    /// Runs `f` on the statement of `sql`, prepared on its first use.
    pub(super) fn with<T>(
        &self,
        sql: &'static str,
        f: impl FnOnce(&mut Statement<'c>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        let key = (sql.as_ptr() as usize, sql.len());
        // A text's slot never moves: the list only grows. Its statement is
        // taken out while it runs.
        let (slot, kept) = {
            let mut statements = self.statements.borrow_mut();
            let slot = match statements.iter().position(|(k, _)| *k == key) {
                Some(slot) => slot,
                None => {
                    statements.push((key, None));
                    statements.len() - 1
                }
            };
            (slot, statements[slot].1.take())
        };
        let mut statement = match kept {
            Some(s) => s,
            None => self.conn.prepare(sql)?,
        };
        let out = f(&mut statement);
        let held = &mut self.statements.borrow_mut()[slot].1;
        // (A copy prepared while the kept one was in use is dropped.)
        if held.is_none() {
            *held = Some(statement);
        }
        out
    }

    /// How many statements are held (tests).
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.statements
            .borrow()
            .iter()
            .filter(|(_, s)| s.is_some())
            .count()
    }
}

impl Deref for Held<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

#[cfg(test)]
mod tests {
    use super::Held;
    use rusqlite::{params, Connection};

    // Statics, so that every use reads one address (a `const` may be a
    // separate copy at each use: then each use holds its own statement).
    static INSERT: &str = "INSERT INTO t (a, b) VALUES ($1, $2)";
    static COUNT: &str = "SELECT COUNT(*) FROM t WHERE a = $1";

    fn table() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (a INTEGER, b TEXT)")
            .unwrap();
        conn
    }

    #[test]
    fn a_statement_is_prepared_once_and_runs_with_each_uses_values() {
        let conn = table();
        let held = Held::new(&conn);
        for a in 0..3 {
            held.with(INSERT, |s| s.execute(params![a, "x"])).unwrap();
        }
        held.with(INSERT, |s| s.execute(params![1, "y"])).unwrap();
        assert_eq!(held.held(), 1);
        let ones: i64 = held
            .with(COUNT, |s| s.query_row(params![1], |r| r.get(0)))
            .unwrap();
        assert_eq!(ones, 2);
        let twos: i64 = held
            .with(COUNT, |s| s.query_row(params![2], |r| r.get(0)))
            .unwrap();
        assert_eq!(twos, 1);
        assert_eq!(held.held(), 2);
    }

    #[test]
    fn a_statement_used_inside_its_own_use_gets_its_own_copy() {
        let conn = table();
        let held = Held::new(&conn);
        held.with(INSERT, |outer| {
            held.with(INSERT, |inner| inner.execute(params![1, "inner"]))?;
            outer.execute(params![2, "outer"])
        })
        .unwrap();
        assert_eq!(held.held(), 1);
        let rows: i64 = conn
            .query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 2);
    }

    #[test]
    fn a_failing_statement_is_kept_and_answers_its_error() {
        let conn = table();
        conn.execute_batch("CREATE UNIQUE INDEX t_a ON t (a)")
            .unwrap();
        let held = Held::new(&conn);
        held.with(INSERT, |s| s.execute(params![1, "x"])).unwrap();
        let again = held.with(INSERT, |s| s.execute(params![1, "x"]));
        assert!(again.is_err(), "a duplicate must fail: {again:?}");
        held.with(INSERT, |s| s.execute(params![2, "x"])).unwrap();
        assert_eq!(held.held(), 1);
    }

    #[test]
    fn a_text_that_does_not_prepare_answers_its_error_and_holds_nothing() {
        let conn = table();
        let held = Held::new(&conn);
        let bad = held.with("SELECT nothing FROM nowhere", |s| s.execute([]));
        assert!(bad.is_err());
        assert_eq!(held.held(), 0);
    }
}
