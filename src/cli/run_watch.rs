//! `sutra run` while its instance is under way: nothing looks hung, nothing is
//! lost silently.
//!
//! - On the real clock, once a second it looks at what the instance waits for
//!   and says so on stderr whenever that changes (a timer due at …, a retry, a
//!   message, a channel answer, a task still running), with the time left.
//! - A channel call's window is the outside world's to end: the run returns
//!   with the instance WAITING once its requests went out
//!   ([`Runtime::settle_local`]).
//! - Ctrl-C ends the run and says where the instance is kept: a temporary
//!   database is kept and named (with the commands that continue or show it),
//!   an in-memory one is said to be discarded.
//!
//! The look once a second is for a person; nothing waits on it.

use super::show::wait_text;
use crate::runtime::{Runtime, RuntimeResult, Settled};
use crate::store::AnyStore;
use std::time::Duration;

/// How the run ended.
pub(crate) enum Watched {
    Settled(Box<Settled>),
    /// Ctrl-C: the instance is left as it is.
    Interrupted,
}

/// Drives `id` until it is terminal or waits for the outside world; tells
/// what it waits for when `announce` (the real clock); stops on Ctrl-C.
pub(crate) async fn settle_watched(
    runtime: &Runtime<AnyStore>,
    id: &str,
    announce: bool,
) -> RuntimeResult<Watched> {
    let settle = runtime.settle_local(id);
    tokio::pin!(settle);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let period = Duration::from_secs(1);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut said = String::new();
    loop {
        tokio::select! {
            settled = &mut settle => return settled.map(|s| Watched::Settled(Box::new(s))),
            _ = &mut ctrl_c => return Ok(Watched::Interrupted),
            _ = tick.tick(), if announce => {
                let Ok(view) = runtime.inspect(id).await else { continue };
                let now = runtime.clock().now();
                let Ok(v) = serde_json::to_value(&view) else { continue };
                let lines: Vec<String> = v["waits"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|w| {
                        let left = w["due"]
                            .as_str()
                            .and_then(|d| chrono::DateTime::parse_from_rfc3339(d).ok())
                            .map(|d| d.with_timezone(&chrono::Utc) - now)
                            .filter(|d| *d > chrono::TimeDelta::zero())
                            .map(|d| format!(" (in {})", human(d)))
                            .unwrap_or_default();
                        format!("{}{left}", wait_text(w))
                    })
                    .collect();
                // The time left changes every second; say it again only when
                // what the instance waits for changed.
                let what: String = lines
                    .iter()
                    .map(|l| l.split(" (in ").next().unwrap_or(l))
                    .collect::<Vec<_>>()
                    .join("; ");
                if !what.is_empty() && what != said {
                    super::say(&format!("instance {id} {}  (Ctrl-C stops the run; the instance is kept)", lines.join("; ")));
                    said = what;
                }
            }
        }
    }
}

/// Where an interrupted run left its instance, for a person.
pub(crate) fn kept_note(id: &str, db: Option<&str>, temp: Option<tempfile::TempDir>) -> String {
    match (db, temp) {
        (_, Some(dir)) => {
            let path = dir.keep().join("sutra.db");
            let url = format!("sqlite://{}", path.display());
            format!(
                "interrupted: instance {id} is kept in the temporary database {}\n  \
                 continue it: sutra serve --db {url}\n  \
                 look at it:  sutra inspect --db {url} {id}",
                path.display()
            )
        }
        (Some(url), None) if url.contains(":memory:") || url.contains("mode=memory") => {
            format!("interrupted: instance {id} was in an in-memory database and is discarded")
        }
        (Some(url), None) => format!(
            "interrupted: instance {id} stays in {url} as it was\n  \
             continue it: sutra serve --db {url}"
        ),
        (None, None) => format!("interrupted: instance {id}"),
    }
}

/// `1h 59m`, `3m 2s`, `41s`.
fn human(d: chrono::TimeDelta) -> String {
    let s = d.num_seconds().max(0);
    let (h, m, sec) = (s / 3600, (s % 3600) / 60, s % 60);
    match (h, m) {
        (0, 0) => format!("{sec}s"),
        (0, _) => format!("{m}m {sec}s"),
        _ => format!("{h}h {m}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_reads_as_a_person_says_it() {
        assert_eq!(human(chrono::TimeDelta::seconds(41)), "41s");
        assert_eq!(human(chrono::TimeDelta::seconds(182)), "3m 2s");
        assert_eq!(human(chrono::TimeDelta::seconds(7140)), "1h 59m");
    }

    #[test]
    fn an_interrupted_run_says_where_its_instance_is() {
        let mem = kept_note("i1", Some("sqlite::memory:"), None);
        assert!(mem.contains("discarded"), "{mem}");
        let file = kept_note("i1", Some("sqlite://x.db"), None);
        assert!(file.contains("sutra serve --db sqlite://x.db"), "{file}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let temp = kept_note("i1", None, Some(dir));
        assert!(path.is_dir(), "the temporary directory is kept");
        assert!(
            temp.contains(&format!("sqlite://{}", path.join("sutra.db").display())),
            "{temp}"
        );
        std::fs::remove_dir_all(path).unwrap();
    }
}
