//! `TestApp`: a leasehold instance in this process on a free port, with one
//! helper per endpoint.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use leasehold::config::ServeArgs;
use leasehold::domain::ResourceDigest;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Which store an app runs on.
#[derive(Clone, Debug)]
pub enum Backend {
    /// The embedded store.
    Memory,
    /// A standalone Redis at this URL.
    Redis(String),
}

/// A running instance.
pub struct TestApp {
    pub addr: SocketAddr,
    pub base: String,
    pub http: reqwest::Client,
    pub namespace: String,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

/// An attempt as the HTTP API hands it out.
#[derive(Clone, Debug)]
pub struct TestAttempt {
    pub token: String,
    pub op: String,
}

/// One answer: status, headers, JSON body.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Reply {
    pub fn outcome(&self) -> &str {
        self.body["outcome"].as_str().unwrap_or("<none>")
    }
    pub fn content_type(&self) -> &str {
        self.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
    pub fn fencing_token(&self) -> u64 {
        self.body["lease"]["fencingToken"]
            .as_u64()
            .expect("fencingToken in lease")
    }
    pub fn remaining_ms(&self) -> u64 {
        self.body["lease"]["remainingMs"]
            .as_u64()
            .expect("remainingMs in lease")
    }
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A name unique in this test run (namespaces, operation ids, raw ids).
pub fn unique(prefix: &str) -> String {
    super::install_tls_provider();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut r = [0u8; 4];
    getrandom::fill(&mut r).expect("random");
    format!("{prefix}{}x{n}", u32::from_le_bytes(r))
}

/// A fresh resource digest.
pub fn digest() -> String {
    ResourceDigest::of_raw_id(&unique("resource-"))
        .as_str()
        .to_owned()
}

/// Default settings for tests (flags only; the environment is ignored but
/// for `LEASEHOLD_HTTP_FAST_PATHS`).
pub fn args(backend: &Backend, extra: &[&str]) -> ServeArgs {
    super::install_tls_provider();
    #[derive(clap::Parser)]
    struct Only {
        #[command(flatten)]
        args: ServeArgs,
    }
    // A generous command timeout: a loaded 2-core CI machine running debug
    // builds of many tests at once must not turn slowness into
    // `indeterminate`. Tests of the timeout itself pass their own.
    let mut argv: Vec<String> = vec!["leasehold".into()];
    if !extra.contains(&"--namespace") {
        argv.extend(["--namespace".to_owned(), unique("t")]);
    }
    if !extra.contains(&"--command-timeout-ms") {
        argv.extend(["--command-timeout-ms".to_owned(), "2000".to_owned()]);
    }
    // The one variable the harness honours: the suite runs with the
    // hand-written HTTP paths on and off (scripts/test.sh), and a test
    // that sets the flag itself keeps its own.
    if !extra.contains(&"--http-fast-paths") {
        if let Ok(on) = std::env::var("LEASEHOLD_HTTP_FAST_PATHS") {
            argv.extend(["--http-fast-paths".to_owned(), on]);
        }
    }
    if let Backend::Redis(url) = backend {
        argv.push("--redis-url".into());
        argv.push(url.clone());
    }
    argv.extend(extra.iter().map(|s| (*s).to_owned()));
    <Only as clap::Parser>::try_parse_from(argv)
        .expect("test args parse")
        .args
}

fn init_logs() {
    if std::env::var_os("TEST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter("info")
            .with_test_writer()
            .try_init();
    }
}

impl TestApp {
    /// Starts an instance on `backend` with default test settings.
    pub async fn spawn(backend: &Backend) -> TestApp {
        Self::spawn_with(args(backend, &[])).await
    }

    /// Starts an instance with these settings.
    pub async fn spawn_with(args: ServeArgs) -> TestApp {
        Self::spawn_inner(args, None).await
    }

    /// Starts an instance with these settings, and hands back the store
    /// it built (to read what the embedded store keeps: issue 39).
    pub async fn spawn_observed(args: ServeArgs) -> (TestApp, leasehold::store::Store) {
        let (tx, rx) = oneshot::channel();
        let app = Self::spawn_inner(args, Some(tx)).await;
        (app, rx.await.expect("the store was built"))
    }

    async fn spawn_inner(
        args: ServeArgs,
        observe: Option<oneshot::Sender<leasehold::store::Store>>,
    ) -> TestApp {
        super::install_tls_provider();
        init_logs();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = oneshot::channel::<()>();
        let namespace = args.store.namespace.clone();
        let config = args.validate().expect("valid test settings");
        let task = tokio::spawn(async move {
            let stop = async move {
                let _ = rx.await;
            };
            match observe {
                None => leasehold::run(listener, config, stop).await,
                Some(tx) => {
                    let observe = move |store: &leasehold::store::Store| {
                        let _ = tx.send(store.clone());
                    };
                    leasehold::run_observed(listener, None, config, observe, stop).await
                }
            }
            .expect("leasehold::run");
        });
        let app = TestApp {
            addr,
            base: format!("http://{addr}"),
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .build()
                .expect("client"),
            namespace,
            shutdown: Some(tx),
            task: Some(task),
        };
        // The listener is bound already; one request proves the router is up.
        let live = app
            .http
            .get(format!("{}/livez", app.base))
            .send()
            .await
            .expect("livez");
        assert_eq!(live.status(), StatusCode::OK);
        app
    }

    /// Sends SIGTERM-equivalent shutdown and waits for `run` to return.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("server task");
        }
    }

    /// Triggers shutdown without waiting.
    pub fn begin_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    /// Waits for a shutdown begun with `begin_shutdown`.
    pub async fn finished(mut self) {
        if let Some(task) = self.task.take() {
            task.await.expect("server task");
        }
    }

    pub async fn reply(resp: reqwest::Response) -> Reply {
        let status = resp.status();
        let headers = resp.headers().clone();
        let text = resp.text().await.expect("body");
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Reply {
            status,
            headers,
            body,
        }
    }

    pub async fn attempt(&self) -> TestAttempt {
        let op = unique("op-");
        let r = self.post_attempt(&json!({ "operationId": op })).await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        TestAttempt {
            token: r.body["ownerToken"].as_str().expect("token").to_owned(),
            op,
        }
    }

    /// Another operation of the same owner.
    pub fn other_operation(a: &TestAttempt) -> TestAttempt {
        TestAttempt {
            token: a.token.clone(),
            op: unique("op-"),
        }
    }

    pub async fn post_attempt(&self, body: &Value) -> Reply {
        Self::reply(
            self.http
                .post(format!("{}/attempts", self.base))
                .json(body)
                .send()
                .await
                .expect("send"),
        )
        .await
    }

    fn lease_url(&self, purpose: &str, digest: &str) -> String {
        format!("{}/leases/{purpose}/{digest}", self.base)
    }

    fn with_attempt(rb: reqwest::RequestBuilder, a: &TestAttempt) -> reqwest::RequestBuilder {
        rb.header("Lease-Owner-Token", &a.token)
            .header("Lease-Operation-Id", &a.op)
    }

    pub async fn acquire(
        &self,
        purpose: &str,
        digest: &str,
        a: &TestAttempt,
        ttl_ms: u64,
    ) -> Reply {
        self.acquire_body(purpose, digest, a, &json!({ "ttlMs": ttl_ms }))
            .await
    }

    pub async fn acquire_wait(
        &self,
        purpose: &str,
        digest: &str,
        a: &TestAttempt,
        ttl_ms: u64,
        wait_ms: u64,
    ) -> Reply {
        self.acquire_body(
            purpose,
            digest,
            a,
            &json!({ "ttlMs": ttl_ms, "waitMs": wait_ms }),
        )
        .await
    }

    pub async fn acquire_body(
        &self,
        purpose: &str,
        digest: &str,
        a: &TestAttempt,
        body: &Value,
    ) -> Reply {
        let rb = Self::with_attempt(self.http.put(self.lease_url(purpose, digest)), a).json(body);
        Self::reply(rb.send().await.expect("send")).await
    }

    pub async fn renew(&self, purpose: &str, digest: &str, a: &TestAttempt, ttl_ms: u64) -> Reply {
        let rb = Self::with_attempt(self.http.patch(self.lease_url(purpose, digest)), a)
            .json(&json!({ "ttlMs": ttl_ms }));
        Self::reply(rb.send().await.expect("send")).await
    }

    /// A renew with its whole body (e.g. a new `holder`).
    pub async fn renew_body(
        &self,
        purpose: &str,
        digest: &str,
        a: &TestAttempt,
        body: &Value,
    ) -> Reply {
        let rb = Self::with_attempt(self.http.patch(self.lease_url(purpose, digest)), a).json(body);
        Self::reply(rb.send().await.expect("send")).await
    }

    pub async fn release(&self, purpose: &str, digest: &str, a: &TestAttempt) -> Reply {
        let rb = Self::with_attempt(self.http.delete(self.lease_url(purpose, digest)), a);
        Self::reply(rb.send().await.expect("send")).await
    }

    pub async fn inspect(&self, purpose: &str, digest: &str, a: Option<&TestAttempt>) -> Reply {
        let mut rb = self.http.get(self.lease_url(purpose, digest));
        if let Some(a) = a {
            rb = Self::with_attempt(rb, a);
        }
        Self::reply(rb.send().await.expect("send")).await
    }

    pub async fn get(&self, path: &str) -> Reply {
        Self::reply(
            self.http
                .get(format!("{}{path}", self.base))
                .send()
                .await
                .expect("send"),
        )
        .await
    }

    /// Waits currently registered on this instance (from /readyz).
    pub async fn waiters(&self) -> u64 {
        self.get("/readyz").await.body["waiters"]
            .as_u64()
            .expect("waiters in /readyz")
    }

    /// Polls /readyz until this instance has `n` waiters (bounded: panics
    /// after 10 s). The wait is on a server-side event, not a fixed sleep.
    pub async fn until_waiters(&self, n: u64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let now = self.waiters().await;
            if now == n {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "waiters stuck at {now}, wanted {n}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    pub async fn metrics_text(&self) -> String {
        self.http
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .expect("send")
            .text()
            .await
            .expect("text")
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}
