//! A headless Chromium driven over W3C WebDriver (`chromedriver`), for the
//! console's browser tests: a small client over reqwest (the protocol is
//! JSON over HTTP), so no WebDriver crate is needed.
//!
//! Invariants:
//! - [`Browser::start`] answers `None` (after printing why) only when no
//!   chromium/chromedriver can be found and `SUTRA_REQUIRE_BROWSER` is
//!   unset; with it set, a missing browser fails the test;
//! - every wait is bounded and happens inside the browser (an async script
//!   polling the page, bounded by the script timeout): the test side never
//!   sleeps;
//! - chromedriver (and the browser it started) is killed on drop.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Set to make a missing browser a failure instead of a skip (`.ci/run` sets it).
pub const REQUIRE_VAR: &str = "SUTRA_REQUIRE_BROWSER";
/// The longest a wait for the page may take.
pub const WAIT_MS: u64 = 20_000;

fn find(candidates: &[&str], env: &str) -> Option<PathBuf> {
    if let Ok(p) = std::env::var(env) {
        return Some(PathBuf::from(p));
    }
    for c in candidates {
        let p = Path::new(c);
        if p.is_absolute() && p.exists() {
            return Some(p.to_path_buf());
        }
        if let Some(paths) = std::env::var_os("PATH") {
            for dir in std::env::split_paths(&paths) {
                let full = dir.join(c);
                if full.exists() {
                    return Some(full);
                }
            }
        }
    }
    None
}

pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::Client,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// A headless Chromium with a fresh profile, or `None` (skipped) when
    /// none is installed and `SUTRA_REQUIRE_BROWSER` is unset.
    pub async fn start() -> Option<Browser> {
        let chromium = find(
            &["chromium", "chromium-browser", "google-chrome"],
            "SUTRA_CHROMIUM",
        );
        let driver = find(&["chromedriver"], "SUTRA_CHROMEDRIVER");
        let (Some(chromium), Some(driver)) = (chromium, driver) else {
            let why = "no chromium and chromedriver found (Debian: apt-get install chromium chromium-driver; .ci/run installs them)";
            if std::env::var_os(REQUIRE_VAR).is_some() {
                panic!("{REQUIRE_VAR} is set but {why}");
            }
            eprintln!("skipped: {why}; set {REQUIRE_VAR}=1 to make this a failure");
            return None;
        };
        let mut child = Command::new(&driver)
            .arg("--port=0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", driver.display()));
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("started successfully on port ").nth(1) {
                    let _ = tx.send(rest.trim_end_matches('.').trim().to_string());
                }
            }
        });
        let port = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(p) => p,
            Err(_) => {
                let _ = child.kill();
                panic!("chromedriver did not say which port it listens on");
            }
        };
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let profile = tempfile::tempdir().unwrap();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium.display().to_string(),
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1400,1100", "--no-first-run", "--disable-extensions",
                    format!("--user-data-dir={}", profile.path().display())],
            },
            "timeouts": {"script": WAIT_MS + 5_000, "pageLoad": 60_000, "implicit": 0},
        }}});
        let mut browser = Browser {
            driver: child,
            base,
            session: String::new(),
            http,
            _profile: profile,
        };
        let v = browser.call("POST", "/session", Some(caps)).await;
        browser.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {v}"))
            .to_string();
        Some(browser)
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.base);
        let req = match method {
            "GET" => self.http.get(&url),
            "DELETE" => self.http.delete(&url),
            _ => self.http.post(&url).json(&body.unwrap_or(json!({}))),
        };
        let resp = req.send().await.expect("chromedriver answers");
        let status = resp.status();
        let v: Value = resp.json().await.expect("chromedriver answers JSON");
        assert!(
            status.is_success(),
            "WebDriver {method} {path}: {status} {}",
            v["value"]
        );
        v["value"].clone()
    }

    async fn session(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.call(method, &format!("/session/{}{path}", self.session), body)
            .await
    }

    pub async fn goto(&self, url: &str) {
        self.session("POST", "/url", Some(json!({"url": url})))
            .await;
    }

    /// Run a script in the page (`arguments[i]` are `args`); its return value.
    pub async fn js(&self, script: &str, args: Value) -> Value {
        self.session(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// Wait (inside the page, bounded) until `predicate` — a JS expression over
    /// `arguments[0]` — is truthy; answers its value. Panics with `what` on timeout.
    pub async fn wait_for(&self, what: &str, predicate: &str, arg: Value) -> Value {
        let script = format!(
            "const done = arguments[arguments.length - 1]; const arg = arguments[0];\n\
             const deadline = Date.now() + {WAIT_MS};\n\
             const test = () => {{ try {{ return ({predicate}); }} catch (e) {{ return null; }} }};\n\
             const tick = () => {{ const v = test(); if (v) done({{ok: v}}); \
               else if (Date.now() > deadline) done({{timeout: true, body: document.body.innerText.slice(0, 3000)}}); \
               else setTimeout(tick, 50); }};\n\
             tick();"
        );
        let v = self
            .session(
                "POST",
                "/execute/async",
                Some(json!({"script": script, "args": [arg]})),
            )
            .await;
        if v.get("timeout").is_some() {
            panic!(
                "timed out waiting for {what}; the page says:\n{}",
                v["body"].as_str().unwrap_or_default()
            );
        }
        v["ok"].clone()
    }

    /// Wait for an element matching `css`.
    pub async fn wait_css(&self, css: &str) {
        self.wait_for(css, "document.querySelector(arg)", json!(css))
            .await;
    }

    /// Wait for `css`, then click it.
    pub async fn click(&self, css: &str) {
        self.wait_css(css).await;
        self.js(
            "const el = document.querySelector(arguments[0]); el.scrollIntoView(); el.click(); return true;",
            json!([css]),
        )
        .await;
    }

    /// The WebDriver id of the first element matching `css` (waits for it).
    async fn element(&self, css: &str) -> String {
        self.wait_css(css).await;
        let el = self
            .session(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        el.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .expect("an element id")
            .to_string()
    }

    /// Type `text` into an input by CSS selector (after what it holds).
    pub async fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css).await;
        self.session(
            "POST",
            &format!("/element/{id}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    /// Empty an input or textarea by CSS selector.
    pub async fn clear(&self, css: &str) {
        let id = self.element(css).await;
        self.session("POST", &format!("/element/{id}/clear"), None)
            .await;
    }

    /// The text of the first element matching `css` (waits for it).
    pub async fn text(&self, css: &str) -> String {
        self.wait_css(css).await;
        self.js(
            "return document.querySelector(arguments[0]).textContent;",
            json!([css]),
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    /// Save a PNG screenshot of the page to `path`.
    pub async fn screenshot(&self, path: &Path) {
        use base64::Engine;
        let v = self.session("GET", "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or_default())
            .expect("a base64 screenshot");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Closing the session quits the browser; chromedriver goes with its kill.
        let url = format!("{}/session/{}", self.base, self.session);
        let _ = std::thread::spawn(move || blocking_delete(&url)).join();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// A DELETE on a thread of its own (drop may run inside the test's runtime), bounded.
fn blocking_delete(url: &str) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let _ = reqwest::Client::new()
            .delete(url)
            .timeout(Duration::from_secs(10))
            .send()
            .await;
    });
    Ok(())
}
