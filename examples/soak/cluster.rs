//! The `sutra serve` processes under test: one per replica, each on a port
//! of its own kept across restarts, stderr appended to `replica-<i>.log`.
//!
//! Invariant: every wait is bounded (a replica that does not answer
//! `/healthz` within 60 s is an error naming its log); `kill` is SIGKILL
//! (std's `Child::kill`), never a graceful stop; dropping the cluster kills
//! every replica.

use anyhow::{bail, Context, Result};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const ADMIN_KEY: &str = "soak-admin-key-0123456789";

pub struct Cluster {
    bin: PathBuf,
    db: String,
    dir: PathBuf,
    ports: Vec<u16>,
    children: Vec<Option<Child>>,
    env: Vec<(String, String)>,
}

impl Cluster {
    pub fn new(bin: PathBuf, db: String, dir: &Path, replicas: usize) -> Result<Cluster> {
        let mut ports = Vec::new();
        for _ in 0..replicas {
            // A free port, kept for the replica's lifetime (tokio binds with SO_REUSEADDR).
            let l = std::net::TcpListener::bind("127.0.0.1:0")?;
            ports.push(l.local_addr()?.port());
        }
        let env = [
            ("SUTRA_ADMIN_KEY", ADMIN_KEY),
            ("SUTRA_AUDIT_SQL", "true"),
            ("SUTRA_OUTBOX_ALLOWED_HOSTS", "loopback"),
            // A delivery cut by a kill is re-sent once its claim lapses
            // (connect + response + 5 s): keep that short.
            ("SUTRA_OUTBOX_CONNECT_TIMEOUT", "PT1S"),
            ("SUTRA_OUTBOX_RESPONSE_TIMEOUT", "PT2S"),
            ("SUTRA_OUTBOX_RETRY_INITIAL_DELAY", "PT0.2S"),
            ("SUTRA_OUTBOX_RETRY_MAX_DELAY", "PT1S"),
            // An attempt lost with its process is re-run after deadline + 5 s.
            ("SUTRA_SANDBOX_DEADLINE", "PT5S"),
            // HTTP tasks call the loopback counterpart (granted to the tenant).
            ("SUTRA_EGRESS_ALLOWED_CIDRS", "127.0.0.0/8"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        Ok(Cluster {
            bin,
            db,
            dir: dir.to_path_buf(),
            ports,
            children: (0..replicas).map(|_| None).collect(),
            env,
        })
    }

    pub fn replicas(&self) -> usize {
        self.ports.len()
    }

    pub fn url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.ports[i])
    }

    pub fn urls(&self) -> Vec<String> {
        (0..self.replicas()).map(|i| self.url(i)).collect()
    }

    pub fn log_path(&self, i: usize) -> PathBuf {
        self.dir.join(format!("replica-{i}.log"))
    }

    /// The last `n` lines of a replica's log.
    pub fn log_tail(&self, i: usize, n: usize) -> String {
        let text = std::fs::read_to_string(self.log_path(i)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Starts replica `i` and waits until it answers `/healthz`.
    pub async fn start(&mut self, i: usize) -> Result<()> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(i))?;
        let listen = format!("127.0.0.1:{}", self.ports[i]);
        let mut cmd = Command::new(&self.bin);
        cmd.args(["serve", "--db", &self.db, "--listen", &listen])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("spawn {}", self.bin.display()))?;
        self.children[i] = Some(child);
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(r) = http.get(format!("{}/healthz", self.url(i))).send().await {
                if r.status().is_success() {
                    return Ok(());
                }
            }
            if let Some(status) = self.children[i].as_mut().and_then(|c| c.try_wait().ok()?) {
                bail!(
                    "replica {i} exited ({status}) while starting:\n{}",
                    self.log_tail(i, 40)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "replica {i} did not answer /healthz in 60 s:\n{}",
                    self.log_tail(i, 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// kill -9 replica `i` and reap it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.children[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether a replica died on its own (a crash, not our kill): its status.
    pub fn exited(&mut self, i: usize) -> Option<std::process::ExitStatus> {
        self.children[i].as_mut().and_then(|c| c.try_wait().ok()?)
    }

    pub fn kill_all(&mut self) {
        for i in 0..self.replicas() {
            self.kill(i);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_all();
    }
}
