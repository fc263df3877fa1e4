//! A real `sutra serve` for API tests: a temp SQLite database (or, with
//! [`Server::start_on`], a fresh PostgreSQL schema), port 0 (the server
//! prints the address it bound), the manual virtual clock, an admin key; and
//! a small JSON client.
//!
//! Invariant: every wait is bounded — the address line within 60 s, then a
//! bounded poll of `/healthz`; a server that dies or never answers fails the
//! test with its stderr. The child is killed on drop, and a PostgreSQL
//! schema it ran on is dropped then too (also when the test failed).
#![allow(dead_code)]

use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const ADMIN_KEY: &str = "test-admin-key-0123456789";
/// Where virtual time starts in these tests.
pub const T0: &str = "2030-01-01T00:00:00Z";

/// Put `(SYSTEM_CLOCK, "1")` among a server's variables to run it on the
/// system clock (its poller, sweeper and schedules on their own) instead of
/// the manual clock; it is not passed to the server.
pub const SYSTEM_CLOCK: &str = "__SUTRA_TEST_SYSTEM_CLOCK";

/// The environment variable naming the PostgreSQL test server.
pub const PG_URL_VAR: &str = "SUTRA_TEST_POSTGRES_URL";

/// Which database a server runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Db {
    Sqlite,
    Postgres,
}

/// A PostgreSQL schema a server runs on: (server URL, schema).
type PgSchema = Option<(String, String)>;

pub struct Server {
    child: Child,
    pub url: String,
    pub db: String,
    pub dir: Arc<tempfile::TempDir>,
    stderr: Arc<Mutex<String>>,
    extra_env: Vec<(String, String)>,
    pg_schema: PgSchema,
    /// The thread copying stderr into `stderr` (joined by `final_log`).
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// A server on a fresh database of `db` with extra environment
    /// variables. PostgreSQL: a fresh schema of `SUTRA_TEST_POSTGRES_URL`
    /// (migrated, dropped with the server); `None`, after printing
    /// "skipped", when that variable is unset; set but unusable, it panics.
    pub async fn start_on(db: Db, env: &[(&str, &str)]) -> Option<Server> {
        if db == Db::Sqlite {
            return Some(Self::start_with(env).await);
        }
        let Ok(pg) = std::env::var(PG_URL_VAR) else {
            eprintln!("skipped: {PG_URL_VAR} not set");
            return None;
        };
        let schema = format!("sutra_api_{:016x}", rand::random::<u64>());
        match sutra::store::PgStore::open_in_schema(&pg, &schema).await {
            Ok(store) => store.close().await,
            Err(e) => panic!("{PG_URL_VAR}={pg} is set but PostgreSQL is unusable: {e}"),
        }
        let sep = if pg.contains('?') { '&' } else { '?' };
        let url = format!("{pg}{sep}options=-c%20search_path%3D{schema}");
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut server = Self::spawn(dir, url, T0, env).await;
        server.pg_schema = Some((pg, schema));
        Some(server)
    }

    /// A server on a fresh schema of `SUTRA_TEST_POSTGRES_URL` that reaches
    /// PostgreSQL at `via` (`host:port`, e.g. a test's proxy) instead of the
    /// URL's own address; `None` when the variable is unset.
    pub async fn start_on_pg_via(via: &str, env: &[(&str, &str)]) -> Option<Server> {
        let Ok(pg) = std::env::var(PG_URL_VAR) else {
            eprintln!("skipped: {PG_URL_VAR} not set");
            return None;
        };
        let schema = format!("sutra_api_{:016x}", rand::random::<u64>());
        match sutra::store::PgStore::open_in_schema(&pg, &schema).await {
            Ok(store) => store.close().await,
            Err(e) => panic!("{PG_URL_VAR}={pg} is set but PostgreSQL is unusable: {e}"),
        }
        let mut routed = reqwest::Url::parse(&pg).expect("a PostgreSQL URL");
        let (host, port) = via.rsplit_once(':').expect("host:port");
        routed.set_host(Some(host)).expect("a host");
        routed
            .set_port(Some(port.parse().expect("a port")))
            .expect("a port");
        let routed = routed.to_string();
        let sep = if routed.contains('?') { '&' } else { '?' };
        let url = format!("{routed}{sep}options=-c%20search_path%3D{schema}");
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut server = Self::spawn(dir, url, T0, env).await;
        server.pg_schema = Some((pg, schema));
        Some(server)
    }

    /// A fresh database, the manual clock at `T0`, the audit journal on.
    pub async fn start() -> Server {
        Self::start_with(&[]).await
    }

    /// With extra environment variables for the server.
    pub async fn start_with(env: &[(&str, &str)]) -> Server {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let db = format!("sqlite://{}", dir.path().join("api.db").display());
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Self::spawn(dir, db, T0, env).await
    }

    /// Kill -9 this server and start another on the same database with the clock at `clock_start`.
    pub async fn restart_at(mut self, clock_start: &str) -> Server {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dir = self.dir.clone();
        let db = self.db.clone();
        let env = std::mem::take(&mut self.extra_env);
        let pg_schema = self.pg_schema.take();
        drop(self);
        let mut server = Self::spawn(dir, db, clock_start, env).await;
        server.pg_schema = pg_schema;
        server
    }

    /// The server's exit status once its process ended on its own (e.g. a
    /// failpoint's abort); `None` while it runs.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Kill -9 (if still running) and start another on the same database
    /// with the clock at `clock_start`, with the environment variables `env`
    /// set (replacing those of the same names).
    pub async fn restart_with(mut self, env: &[(&str, &str)], clock_start: &str) -> Server {
        for (k, v) in env {
            self.extra_env.retain(|(name, _)| name != k);
            self.extra_env.push((k.to_string(), v.to_string()));
        }
        self.restart_at(clock_start).await
    }

    /// Kill -9 (if still running) and start another on the same database
    /// with the clock at `clock_start`, without the environment variable `var`.
    pub async fn restart_without(mut self, var: &str, clock_start: &str) -> Server {
        self.extra_env.retain(|(k, _)| k != var);
        self.restart_at(clock_start).await
    }

    async fn spawn(
        dir: Arc<tempfile::TempDir>,
        db: String,
        clock_start: &str,
        env: Vec<(String, String)>,
    ) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sutra"));
        cmd.args(["serve", "--db", &db, "--listen", "127.0.0.1:0"]);
        // The system clock when asked (the server's own loops drive time).
        if !env.iter().any(|(k, _)| k == SYSTEM_CLOCK) {
            cmd.args(["--manual-clock", "--clock-start", clock_start]);
        }
        cmd.env("SUTRA_ADMIN_KEY", ADMIN_KEY)
            .env("SUTRA_AUDIT_SQL", "true")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env.iter().filter(|(k, _)| k != SYSTEM_CLOCK) {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn sutra serve");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let _ = tx.send(
                        rest.split_whitespace()
                            .next()
                            .unwrap_or_default()
                            .to_string(),
                    );
                }
                sink.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        let url = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(u) => u,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "sutra serve did not print its address; stderr:\n{}",
                    log.lock().unwrap()
                );
            }
        };
        let server = Server {
            child,
            url,
            db,
            dir,
            stderr: log,
            extra_env: env,
            pg_schema: None,
            reader: Some(reader),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = reqwest::get(format!("{}/healthz", server.url)).await {
                if r.status().is_success() {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "/healthz never answered; stderr:\n{}",
                server.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server
    }

    /// The server's process id (e.g. to read its `/proc/<pid>/status`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Kill -9 (if still running), then the whole of its stderr: every
    /// line it wrote, none still in the pipe.
    pub fn final_log(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.log()
    }

    /// A client with the admin key.
    pub fn admin(&self) -> Api {
        Api {
            base: self.url.clone(),
            token: Some(ADMIN_KEY.to_string()),
            http: reqwest::Client::new(),
        }
    }

    /// A client without a key.
    pub fn anonymous(&self) -> Api {
        Api {
            base: self.url.clone(),
            token: None,
            http: reqwest::Client::new(),
        }
    }

    /// Create a tenant over the admin API; a client with its key.
    pub async fn tenant(&self, name: &str, limits: Value) -> Api {
        let (status, body) = self
            .admin()
            .call(
                Method::POST,
                "/v1/admin/tenants",
                Some(serde_json::json!({ "name": name, "limits": limits })),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        Api {
            base: self.url.clone(),
            token: Some(body["key"].as_str().unwrap().to_string()),
            http: reqwest::Client::new(),
        }
    }

    /// Advance the manual clock by an ISO duration (everything due on the way runs).
    pub async fn advance(&self, by: &str) -> Value {
        let (status, body) = self
            .admin()
            .call(
                Method::POST,
                "/v1/admin/clock/advance",
                Some(serde_json::json!({ "by": by })),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some((url, schema)) = self.pg_schema.take() {
            drop_schema(url, schema);
        }
    }
}

/// Drops a test schema on a thread of its own (drop may run inside the
/// test's runtime); a failure is only reported.
fn drop_schema(url: String, schema: String) {
    let done = std::thread::spawn(move || {
        use sqlx::{ConnectOptions, Connection};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            let opts: sqlx::postgres::PgConnectOptions = url.parse()?;
            let mut conn = opts.connect().await?;
            sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                .execute(&mut conn)
                .await?;
            conn.close().await
        })
        .map_err(std::io::Error::other)
    })
    .join();
    if !matches!(done, Ok(Ok(()))) {
        eprintln!("warning: could not drop a test schema: {done:?}");
    }
}

/// A JSON client with one bearer key.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub token: Option<String>,
    pub http: reqwest::Client,
}

impl Api {
    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let mut r = self.http.request(method, format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            r = r.bearer_auth(t);
        }
        r
    }

    pub async fn send(&self, req: reqwest::RequestBuilder) -> (StatusCode, Value) {
        let resp = req.send().await.expect("request");
        let status = resp.status();
        let text = resp.text().await.unwrap();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self.request(method, path);
        if let Some(b) = body {
            req = req.json(&b);
        }
        self.send(req).await
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, None).await
    }

    /// Configures pull channel `name` for this tenant (workers fetch its
    /// requests); panics unless it is created.
    pub async fn pull_channel(&self, name: &str) {
        let (status, body) = self
            .call(
                Method::PUT,
                &format!("/v1/channels/{name}"),
                Some(serde_json::json!({"transport": "pull"})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, Some(body)).await
    }

    /// Deploy a definition with modules (name → bytes).
    pub async fn deploy(
        &self,
        definition: &str,
        modules: &[(&str, Vec<u8>)],
    ) -> (StatusCode, Value) {
        let mut form = reqwest::multipart::Form::new().text("definition", definition.to_string());
        for (name, bytes) in modules {
            form = form.part(
                name.to_string(),
                reqwest::multipart::Part::bytes(bytes.clone()).file_name("m.wasm"),
            );
        }
        self.send(
            self.request(Method::POST, "/v1/deployments")
                .multipart(form),
        )
        .await
    }

    /// Start `process` with `variables`; answers the instance view.
    pub async fn start(&self, process: &str, variables: Value) -> (StatusCode, Value) {
        self.post(
            &format!("/v1/processes/{process}/instances"),
            serde_json::json!({ "variables": variables }),
        )
        .await
    }
}

/// The path of a guest, for the CLI.
pub fn guest_path(name: &str) -> PathBuf {
    crate::common::guest(name)
}
