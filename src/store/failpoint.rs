//! A crash at a chosen commit (test-only): with `SUTRA_CRASH_AT_COMMIT=k`
//! (or `k:before`, `k:after`) the process aborts right before (the default)
//! or right after the k-th instance commit it makes — counted over
//! [`Store::create_instance_owned`](super::Store::create_instance_owned)
//! (which `create_instance` goes through),
//! [`Store::commit_step`](super::Store::commit_step) and
//! [`Store::commit_steps`](super::Store::commit_steps), the one funnel of
//! every instance write on both backends. While the variable is set, each
//! commit prints `failpoint: commit <n>` to stderr. `tests/crash_points.rs` walks k
//! over every commit of an instance and proves a restart finishes it the
//! same way.
//!
//! Invariant: compiled only with `debug_assertions` (the binary cargo builds
//! for `cargo test` and `cargo run`); a release build has no failpoint and
//! never reads the variable: [`around`] is the future itself. "After" means
//! after the store answered `Ok` (the write is durable) and before the
//! caller saw it; a failed commit is not counted as reaching "after".

use std::future::Future;

/// Runs one instance commit under the failpoint.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub(super) async fn around<T, E>(commit: impl Future<Output = Result<T, E>>) -> Result<T, E> {
    commit.await
}

/// [`around`] for a commit that hands its request back beside its result.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub(super) async fn around_returning<T, E, R>(
    commit: impl Future<Output = (Result<T, E>, R)>,
) -> (Result<T, E>, R) {
    commit.await
}

/// Runs one instance commit under the failpoint.
#[cfg(debug_assertions)]
pub(super) async fn around<T, E>(commit: impl Future<Output = Result<T, E>>) -> Result<T, E> {
    counted(commit, Result::is_ok).await
}

/// [`around`] for a commit that hands its request back beside its result.
#[cfg(debug_assertions)]
pub(super) async fn around_returning<T, E, R>(
    commit: impl Future<Output = (Result<T, E>, R)>,
) -> (Result<T, E>, R) {
    counted(commit, |(done, _)| done.is_ok()).await
}

/// One commit counted, crashing before it or after it succeeded (`ok`) if
/// it is the planned one.
#[cfg(debug_assertions)]
async fn counted<O>(commit: impl Future<Output = O>, ok: impl Fn(&O) -> bool) -> O {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let Some((at, when)) = *plan() else {
        return commit.await;
    };
    let n = COUNT.fetch_add(1, Ordering::SeqCst) + 1;
    // The walk over every commit counts them in an uncrashed run.
    eprintln!("failpoint: commit {n}");
    if n == at && when == When::Before {
        crash(n, "before");
    }
    let done = commit.await;
    if n == at && when == When::After && ok(&done) {
        crash(n, "after");
    }
    done
}

/// The environment variable that sets the failpoint.
pub const VAR: &str = "SUTRA_CRASH_AT_COMMIT";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    Before,
    After,
}

/// `k`, `k:before` or `k:after` (k ≥ 1).
pub fn parse(text: &str) -> Result<(u64, When), String> {
    let (k, when) = match text.trim().split_once(':') {
        None => (text.trim(), When::Before),
        Some((k, "before")) => (k, When::Before),
        Some((k, "after")) => (k, When::After),
        Some((_, other)) => return Err(format!("{VAR}: {other:?} is not `before` or `after`")),
    };
    match k.parse::<u64>() {
        Ok(k) if k >= 1 => Ok((k, when)),
        _ => Err(format!("{VAR}: {k:?} is not a commit number ≥ 1")),
    }
}

/// The failpoint, read from the environment once.
#[cfg(debug_assertions)]
fn plan() -> &'static Option<(u64, When)> {
    static PLAN: std::sync::OnceLock<Option<(u64, When)>> = std::sync::OnceLock::new();
    PLAN.get_or_init(|| {
        let text = std::env::var(VAR).ok()?;
        match parse(&text) {
            Ok(plan) => Some(plan),
            Err(e) => {
                // A test asked for a crash it cannot have: fail it loudly.
                eprintln!("failpoint: {e}");
                std::process::abort();
            }
        }
    })
}

#[cfg(debug_assertions)]
fn crash(n: u64, when: &str) -> ! {
    eprintln!("failpoint: aborting {when} commit {n}");
    std::process::abort();
}

/// The environment variable of the write failpoint (issue 33 item 2): while
/// the file it names exists, every write of the store fails (as on a full
/// disk or a database that refuses writes): the SQLite writer's requests and
/// transactions, PostgreSQL's transactions. Reads go on. Debug builds only.
pub const FAIL_WRITES_VAR: &str = "SUTRA_FAIL_WRITES_WHILE";

/// `Err` while the write failpoint's file exists (debug builds with
/// [`FAIL_WRITES_VAR`] set); `Ok` otherwise, and always in a release build.
#[cfg(debug_assertions)]
pub(super) fn refuse_write() -> super::StoreResult<()> {
    static PATH: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let path = PATH.get_or_init(|| std::env::var_os(FAIL_WRITES_VAR).map(Into::into));
    match path {
        Some(p) if p.exists() => Err(super::StoreError::Other(format!(
            "failpoint: writes fail while {} exists",
            p.display()
        ))),
        _ => Ok(()),
    }
}

/// `Ok`: a release build has no write failpoint.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub(super) fn refuse_write() -> super::StoreResult<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_commit_and_the_side() {
        assert_eq!(parse("3"), Ok((3, When::Before)));
        assert_eq!(parse("3:before"), Ok((3, When::Before)));
        assert_eq!(parse("12:after"), Ok((12, When::After)));
        assert!(parse("0").is_err());
        assert!(parse("x").is_err());
        assert!(parse("2:during").is_err());
    }
}
