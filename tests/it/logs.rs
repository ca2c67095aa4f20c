//! Logs: the real binary, run as a subprocess with JSON (and text) logs on
//! stderr at debug level, through a lease cycle with failures (bad API keys,
//! bad input, contention, a Redis that dies, a wrong Redis password). No
//! owner token, API key or Redis password appears in what it wrote; request
//! ids do.

#[allow(unused_imports)]
use crate::common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::app::{digest, unique};
use common::redis::RedisServer;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A `leasehold serve` child process, stopped (SIGTERM, then kill) on drop.
struct Service {
    child: Child,
    log: PathBuf,
    base: String,
}

impl Service {
    fn start(dir: &Path, name: &str, envs: &[(&str, String)]) -> Service {
        let log = dir.join(format!("{name}.log"));
        let stderr = File::create(&log).expect("log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold"));
        cmd.arg("serve")
            .env_clear()
            .env("LEASEHOLD_LISTEN", "127.0.0.1:0")
            .env("LEASEHOLD_NAMESPACE", unique("logs"))
            .env("LEASEHOLD_COMMAND_TIMEOUT_MS", "1000")
            .env("LEASEHOLD_SHUTDOWN_GRACE_MS", "2000")
            .env("RUST_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr));
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn leasehold");
        let mut service = Service {
            child,
            log,
            base: String::new(),
        };
        // The listener's address is in the startup line.
        let deadline = Instant::now() + Duration::from_secs(15);
        let addr = loop {
            let text = service.logs();
            if let Some(addr) = text
                .lines()
                .find(|l| l.contains("leasehold listening"))
                .and_then(listening_addr)
            {
                break addr;
            }
            if let Ok(Some(status)) = service.child.try_wait() {
                panic!("leasehold exited ({status}) before listening:\n{text}");
            }
            assert!(
                Instant::now() < deadline,
                "leasehold did not start listening within 15 s:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        service.base = format!("http://{addr}");
        service
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then wait (bounded) for a clean exit; returns the logs.
    fn stop(mut self) -> String {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(sent.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                assert!(
                    status.success(),
                    "exit after SIGTERM: {status}\n{}",
                    self.logs()
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no exit within 10 s of SIGTERM:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.logs()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `127.0.0.1:4321` out of a startup line (JSON `"addr":"127.0.0.1:4321"`,
/// or text `addr=127.0.0.1:4321`).
fn listening_addr(line: &str) -> Option<String> {
    let start = line
        .find("\"addr\":\"")
        .map(|i| i + 8)
        .or_else(|| line.find("addr=").map(|i| i + 5))?;
    let rest = &line[start..];
    let len = rest
        .find(|c: char| c == '"' || c.is_whitespace())
        .unwrap_or(rest.len());
    Some(rest[..len].to_owned())
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(unique("leasehold-logs-"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn assert_no_secret(logs: &str, secrets: &[(&str, &str)]) {
    assert!(!logs.trim().is_empty(), "nothing was logged");
    for (what, secret) in secrets {
        assert!(secret.len() >= 8, "{what} is too short to search for");
        if let Some(line) = logs.lines().find(|l| l.contains(secret)) {
            panic!("{what} appears in the logs:\n{line}");
        }
    }
}

struct Cycle {
    tokens: Vec<String>,
    request_ids: Vec<String>,
}

/// Attempts, a contended acquire, renew, release, inspect, bad input carrying
/// a real token, and 401/403 with wrong keys.
async fn lease_cycle(base: &str, key: &str) -> Cycle {
    let http = reqwest::Client::new();
    let auth = format!("Bearer {key}");
    let mut cycle = Cycle {
        tokens: vec![],
        request_ids: vec![],
    };
    let attempt = || {
        let (http, auth) = (http.clone(), auth.clone());
        async move {
            let op = unique("logs-op-");
            let r = http
                .post(format!("{base}/attempts"))
                .header("authorization", &auth)
                .json(&json!({"operationId": op}))
                .send()
                .await
                .expect("attempt");
            assert_eq!(r.status(), StatusCode::CREATED);
            let body: Value = r.json().await.expect("json");
            (body["ownerToken"].as_str().expect("token").to_owned(), op)
        }
    };
    let (a, b) = (attempt().await, attempt().await);
    cycle.tokens.extend([a.0.clone(), b.0.clone()]);
    let url = format!("{base}/leases/invoice-export/{}", digest());
    let send = |rb: reqwest::RequestBuilder, who: &(String, String)| {
        rb.header("authorization", &auth)
            .header("Lease-Owner-Token", &who.0)
            .header("Lease-Operation-Id", &who.1)
    };
    let mut statuses = vec![];
    for (rb, who) in [
        (http.put(&url).json(&json!({"ttlMs": 30000})), &a),
        (http.put(&url).json(&json!({"ttlMs": 30000})), &b),
        (http.get(&url), &b),
        (http.patch(&url).json(&json!({"ttlMs": 30000})), &a),
        (http.patch(&url).json(&json!({"ttlMs": 1})), &a),
        (
            http.put(&url).json(&json!({"ttlMs": 30000, "owner": a.0})),
            &b,
        ),
        (http.delete(&url), &b),
        (http.delete(&url), &a),
    ] {
        let r = send(rb, who).send().await.expect("send");
        if let Some(id) = r.headers().get("x-request-id") {
            cycle
                .request_ids
                .push(id.to_str().expect("ascii").to_owned());
        }
        statuses.push(r.status().as_u16());
    }
    // A token sent where an operation id belongs, and as a malformed token.
    let r = http
        .get(&url)
        .header("authorization", &auth)
        .header("Lease-Owner-Token", format!("{}!", a.0))
        .header("Lease-Operation-Id", format!("{}:x", b.0))
        .send()
        .await
        .expect("send");
    statuses.push(r.status().as_u16());
    // Wrong key, and a key-shaped token as the key.
    for bad in [format!("Bearer {}", a.0), format!("Bearer {key}x")] {
        let r = http
            .get(&url)
            .header("authorization", bad)
            .send()
            .await
            .expect("send");
        statuses.push(r.status().as_u16());
    }
    cycle.request_ids.retain(|id| !id.is_empty());
    assert!(!cycle.request_ids.is_empty());
    eprintln!("statuses: {statuses:?}");
    cycle
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_never_carry_tokens_keys_or_redis_passwords() {
    let dir = temp_dir();
    let password = unique("redis-password-");
    let redis = RedisServer::start_with(&["--requirepass", &password]);
    std::fs::write(dir.join("redis-password"), format!("{password}\n")).expect("password file");
    let key = unique("api-key-0123456789-");
    std::fs::write(dir.join("api-keys"), format!("{key} invoice-export\n")).expect("keys file");
    let service = Service::start(
        &dir,
        "json",
        &[
            ("LEASEHOLD_LOG_FORMAT", "json".into()),
            // One worker: the binary's current-thread runtime (the text-log
            // test below runs the multi-thread one on a multi-core machine).
            ("LEASEHOLD_WORKER_THREADS", "1".into()),
            ("LEASEHOLD_REDIS_URL", redis.url()),
            (
                "LEASEHOLD_REDIS_PASSWORD_FILE",
                dir.join("redis-password").display().to_string(),
            ),
            (
                "LEASEHOLD_API_KEYS_FILE",
                dir.join("api-keys").display().to_string(),
            ),
        ],
    );
    let cycle = lease_cycle(&service.base, &key).await;

    // The store dies: unavailable answers, and their log lines.
    drop(redis);
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/attempts", service.base))
        .header("authorization", format!("Bearer {key}"))
        .json(&json!({"operationId": "after-redis"}))
        .send()
        .await
        .expect("attempt");
    let token = r.json::<Value>().await.expect("json")["ownerToken"]
        .as_str()
        .expect("token")
        .to_owned();
    let r = http
        .put(format!(
            "{}/leases/invoice-export/{}",
            service.base,
            digest()
        ))
        .header("authorization", format!("Bearer {key}"))
        .header("Lease-Owner-Token", &token)
        .header("Lease-Operation-Id", "after-redis")
        .json(&json!({"ttlMs": 30000}))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let r = http
        .get(format!("{}/readyz", service.base))
        .send()
        .await
        .expect("readyz");
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);

    let logs = service.stop();
    let mut secrets: Vec<(&str, &str)> = vec![
        ("the API key", &key),
        ("the Redis password", &password),
        ("an owner token", &token),
    ];
    secrets.extend(cycle.tokens.iter().map(|t| ("an owner token", t.as_str())));
    assert_no_secret(&logs, &secrets);

    // Every line is one JSON object; requests are logged with their ids.
    let lines: Vec<Value> = logs
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {l}"))
        })
        .collect();
    assert!(lines
        .iter()
        .all(|l| l["level"].is_string() && l["timestamp"].is_string()));
    for id in &cycle.request_ids {
        let answered = lines.iter().any(|l| {
            l["span"]["request_id"] == json!(id)
                && l["span"]["route"] == json!("/leases/{purpose}/{digest}")
        });
        assert!(answered, "no log line for request {id}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l["message"] == json!("store unavailable")),
        "the dead store is logged"
    );
    assert!(lines.iter().any(|l| l["message"]
        .as_str()
        .is_some_and(|m| m.contains("shutting down"))));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_of_a_wrong_redis_password_or_a_password_in_the_url_stay_secret() {
    let dir = temp_dir();
    let password = unique("right-password-");
    let redis = RedisServer::start_with(&["--requirepass", &password]);
    let wrong = unique("wrong-password-");
    std::fs::write(dir.join("wrong"), format!("{wrong}\n")).expect("password file");
    let key = unique("text-key-0123456789-");
    std::fs::write(dir.join("api-keys"), format!("{key} *\n")).expect("keys file");

    // A wrong password from the file: every store call is unavailable.
    let service = Service::start(
        &dir,
        "text-wrong",
        &[
            ("LEASEHOLD_LOG_FORMAT", "text".into()),
            ("NO_COLOR", "1".into()),
            ("LEASEHOLD_REDIS_URL", redis.url()),
            (
                "LEASEHOLD_REDIS_PASSWORD_FILE",
                dir.join("wrong").display().to_string(),
            ),
            (
                "LEASEHOLD_API_KEYS_FILE",
                dir.join("api-keys").display().to_string(),
            ),
        ],
    );
    let http = reqwest::Client::new();
    let r = http
        .get(format!("{}/readyz", service.base))
        .send()
        .await
        .expect("readyz");
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let r = http
        .get(format!(
            "{}/leases/invoice-export/{}",
            service.base,
            digest()
        ))
        .header("authorization", format!("Bearer {key}"))
        .send()
        .await
        .expect("inspect");
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let logs = service.stop();
    assert_no_secret(
        &logs,
        &[
            ("the wrong Redis password", &wrong),
            ("the Redis password", &password),
            ("the API key", &key),
        ],
    );

    // The password inside the URL's userinfo, right this time: a full cycle.
    let url = redis
        .url()
        .replacen("redis://", &format!("redis://:{password}@"), 1);
    let service = Service::start(
        &dir,
        "text-url",
        &[
            ("LEASEHOLD_LOG_FORMAT", "text".into()),
            ("NO_COLOR", "1".into()),
            ("LEASEHOLD_REDIS_URL", url),
            (
                "LEASEHOLD_API_KEYS_FILE",
                dir.join("api-keys").display().to_string(),
            ),
        ],
    );
    let cycle = lease_cycle(&service.base, &key).await;
    let logs = service.stop();
    let mut secrets: Vec<(&str, &str)> =
        vec![("the Redis password", &password), ("the API key", &key)];
    secrets.extend(cycle.tokens.iter().map(|t| ("an owner token", t.as_str())));
    assert_no_secret(&logs, &secrets);
    assert!(
        logs.contains(&cycle.request_ids[0]),
        "request ids are logged"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A first hour's rough edges: log lines written to a file carry no colour
/// codes and the start line names the address plainly; a bad value in a
/// `LEASEHOLD_*` variable is reported under the variable's name;
/// `leasehold openapi | head` ends quietly.
#[test]
fn plain_logs_named_variables_and_a_quiet_closed_pipe() {
    let dir = temp_dir();
    let service = Service::start(
        &dir,
        "plain",
        &[("LEASEHOLD_LOG_FORMAT", "text".to_owned())],
    );
    let logs = service.stop();
    assert!(
        !logs.contains('\u{1b}'),
        "colour codes in a log file:\n{logs}"
    );
    let line = logs
        .lines()
        .find(|l| l.contains("leasehold listening"))
        .expect("start line");
    assert!(line.contains("addr=127.0.0.1:"), "{line}");
    assert!(!line.contains("Some("), "{line}");

    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .env_clear()
        .env("LEASEHOLD_MAX_TTL_MS", "abc")
        .output()
        .expect("run leasehold");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("LEASEHOLD_MAX_TTL_MS=\"abc\""), "{err}");
    // On the command line, the flag is what the user typed: clap's words.
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .env_clear()
        .args(["serve", "--max-ttl-ms", "abc"])
        .output()
        .expect("run leasehold");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-ttl-ms"));

    let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("openapi")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run leasehold openapi");
    let mut head = [0u8; 16];
    std::io::Read::read_exact(child.stdout.as_mut().expect("stdout"), &mut head).expect("read");
    drop(child.stdout.take()); // the reader goes away, as `head` does
    let out = child.wait_with_output().expect("wait");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    let _ = std::fs::remove_dir_all(&dir);
}
