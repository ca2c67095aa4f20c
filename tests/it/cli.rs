//! `leasehold lock`, `inspect` and `list` as real processes against a
//! real service (a `TestApp` on a real `redis-server`). HTTPS: cli_tls.rs.
//!
//! Children are `sh -c` scripts that leave marker files; the tests wait for
//! those files and for process exits, never for a fixed time.

#[allow(unused_imports)]
use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::app::{args, unique, Backend, TestApp};
use common::cli::{finish, leasehold, run, temp_dir, until_file};
use common::redis::RedisServer;
use leasehold::domain::ResourceDigest;
use serde_json::Value;
use tokio::net::TcpListener;

/// A service on a fresh Redis (kept alive by the returned server).
async fn service() -> (RedisServer, TestApp) {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&Backend::Redis(redis.url())).await;
    (redis, app)
}

/// A script that marks its start, and on SIGTERM marks it and (if `exits`)
/// exits 0; otherwise it runs until killed.
fn looping_child(dir: &Path, exits: bool) -> String {
    // `started` appears by rename, with the pid in it: a reader that saw
    // the file before `echo` wrote it once read it empty (a CI failure).
    let d = dir.display();
    let on_term = if exits { "; exit 0" } else { "" };
    format!(
        "trap 'echo term > {d}/term{on_term}' TERM; echo $$ > {d}/started.tmp && mv {d}/started.tmp {d}/started; \
         while :; do sleep 0.05; done"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_runs_with_the_lease_and_its_status_comes_back() {
    let (_redis, app) = service().await;
    let dir = temp_dir();
    let raw = unique("order-");
    let env_file = dir.join("env");
    let script = format!(
        "echo \"$LEASEHOLD_FENCING_TOKEN $LEASEHOLD_PURPOSE $LEASEHOLD_DIGEST\" > {}; exit 7",
        env_file.display()
    );
    let out = run(&[
        "lock", "--url", &app.base, "--ttl", "5s", "export", &raw, "--", "sh", "-c", &script,
    ])
    .await;
    assert_eq!(
        out.code(),
        7,
        "the command's status; stderr: {}",
        out.stderr
    );
    let seen = std::fs::read_to_string(&env_file).expect("the command ran");
    let fields: Vec<&str> = seen.split_whitespace().collect();
    let digest = ResourceDigest::of_raw_id(&raw);
    assert_eq!(fields.len(), 3, "{seen:?}");
    assert!(fields[0].parse::<u64>().is_ok_and(|t| t > 0), "{seen:?}");
    assert_eq!(fields[1], "export");
    assert_eq!(fields[2], digest.as_str());
    // Released when the command exited: free at once for anyone.
    let r = app.inspect("export", digest.as_str(), None).await;
    assert_eq!(r.body["held"], false, "{:?}", r.body);
    assert!(
        !out.stderr.contains("lock-"),
        "no operation id or token printed"
    );

    // A command killed by a signal: 128 + the signal, as shells say.
    let out = run(&[
        "lock",
        "--url",
        &app.base,
        "export",
        &raw,
        "--",
        "sh",
        "-c",
        "kill -9 $$",
    ])
    .await;
    assert_eq!(out.code(), 128 + 9, "stderr: {}", out.stderr);
    // A command that does not exist: 127, and the lease is released.
    let out = run(&[
        "lock",
        "--url",
        &app.base,
        "export",
        &raw,
        "--",
        "/nonexistent/leasehold-test",
    ])
    .await;
    assert_eq!(out.code(), 127, "stderr: {}", out.stderr);
    let r = app.inspect("export", digest.as_str(), None).await;
    assert_eq!(r.body["held"], false, "{:?}", r.body);
    let _ = std::fs::remove_dir_all(dir);
}

/// `--holder` is sent: the command, while it holds the lease, inspects it
/// and sees its own label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holder_label_is_sent_and_shown() {
    let (_redis, app) = service().await;
    let dir = temp_dir();
    let raw = unique("order-");
    let seen_file = dir.join("seen.json");
    let script = format!(
        "{} inspect --json export {raw} > {}",
        env!("CARGO_BIN_EXE_leasehold"),
        seen_file.display()
    );
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "lock",
            "--holder",
            "pod-9 (batch)",
            "--ttl",
            "5s",
            "export",
            &raw,
            "--",
            "sh",
            "-c",
            &script,
        ])
        .env("LEASEHOLD_URL", &app.base)
        .output()
        .await
        .expect("run leasehold");
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&seen_file).expect("the command ran"))
            .expect("inspect --json");
    assert_eq!(seen["held"], true, "{seen}");
    assert_eq!(seen["holder"], "pod-9 (batch)", "{seen}");
    let bad = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["lock", "--holder", "a\tb", "export", &raw, "--", "true"])
        .env("LEASEHOLD_URL", &app.base)
        .output()
        .await
        .expect("run leasehold");
    assert_eq!(
        bad.status.code(),
        Some(64),
        "a label with a control character is a usage error"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_deleted_under_the_command_stops_it_with_sigterm_and_exits_75() {
    lease_deleted_under_the_command(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_redis_stops_the_command_with_sigterm_and_exits_75() {
    lease_deleted_under_the_command(true).await;
}

/// Deletes the lease key alone, or flushes everything, under a running
/// command.
async fn lease_deleted_under_the_command(flush: bool) {
    let (redis, app) = service().await;
    let dir = temp_dir();
    let raw = unique("order-");
    // Renewed about every 2 s; the local validity would last 6 s, so a
    // slow renew on a loaded machine still sees `lost` before it expires.
    let mut cli = leasehold(&[
        "lock",
        "--url",
        &app.base,
        "--ttl",
        "6s",
        "export",
        &raw,
        "--",
        "sh",
        "-c",
        &looping_child(&dir, true),
    ]);
    until_file(&dir.join("started"), &mut cli).await;
    let deleted = Instant::now();
    if flush {
        assert_eq!(redis.cli(&["FLUSHALL"]).trim(), "OK");
    } else {
        let pattern = format!("{}:lease:*", app.namespace);
        let keys = redis.cli(&["KEYS", &pattern]);
        let key = keys.trim();
        assert_eq!(key.lines().count(), 1, "one lease key: {keys:?}");
        assert_eq!(redis.cli(&["DEL", key]).trim(), "1");
    }
    let out = finish(cli).await;
    let took = deleted.elapsed();
    assert_eq!(out.code(), 75, "stderr: {}", out.stderr);
    assert!(dir.join("term").exists(), "the command got SIGTERM");
    // Seen by the next renew (`lost`), not by running out of validity.
    assert!(out.stderr.contains("(lost)"), "stderr: {}", out.stderr);
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert!(!out.stderr.contains("SIGKILL"), "stderr: {}", out.stderr);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_ignoring_sigterm_is_killed_after_the_grace() {
    let (redis, app) = service().await;
    let dir = temp_dir();
    let raw = unique("order-");
    let mut cli = leasehold(&[
        "lock",
        "--url",
        &app.base,
        "--ttl",
        "3s",
        "--kill-grace",
        "1s",
        "export",
        &raw,
        "--",
        "sh",
        "-c",
        &looping_child(&dir, false),
    ]);
    until_file(&dir.join("started"), &mut cli).await;
    let pid: i32 = std::fs::read_to_string(dir.join("started"))
        .expect("pid")
        .trim()
        .parse()
        .expect("pid number");
    assert_eq!(redis.cli(&["FLUSHALL"]).trim(), "OK");
    let out = finish(cli).await;
    assert_eq!(out.code(), 75, "stderr: {}", out.stderr);
    assert!(dir.join("term").exists(), "SIGTERM came first");
    assert!(out.stderr.contains("SIGKILL"), "stderr: {}", out.stderr);
    // Reaped by leasehold before it exited: the pid is gone.
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the command (pid {pid}) still runs"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lease_exits_75_without_running_the_command() {
    let (_redis, app) = service().await;
    let dir = temp_dir();
    let raw = unique("order-");
    let digest = ResourceDigest::of_raw_id(&raw);
    let holder = app.attempt().await;
    let r = app
        .acquire("export", digest.as_str(), &holder, 30_000)
        .await;
    assert_eq!(r.outcome(), "acquired");
    let ran = dir.join("ran");
    let script = format!("touch {}", ran.display());
    for wait in ["0s", "300ms"] {
        let out = run(&[
            "lock", "--url", &app.base, "--wait", wait, "export", &raw, "--", "sh", "-c", &script,
        ])
        .await;
        assert_eq!(out.code(), 75, "--wait {wait}; stderr: {}", out.stderr);
        assert!(
            out.stderr.contains("held by someone else"),
            "{}",
            out.stderr
        );
        assert!(!ran.exists(), "the command ran without the lease");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_is_down_exits_69_and_bad_usage_64() {
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        l.local_addr().expect("addr")
    };
    let dir = temp_dir();
    let ran = dir.join("ran");
    let script = format!("touch {}", ran.display());
    let url = format!("http://{closed}");
    let out = run(&[
        "lock", "--url", &url, "export", "x", "--", "sh", "-c", &script,
    ])
    .await;
    assert_eq!(out.code(), 69, "stderr: {}", out.stderr);
    assert!(!ran.exists());
    let out = run(&["inspect", "--url", &url, "export", "x"]).await;
    assert_eq!(out.code(), 69, "stderr: {}", out.stderr);

    for bad in [
        vec!["lock", "export", "x"],
        vec!["lock", "--ttl", "30", "export", "x", "--", "true"],
        vec!["lock", "Not-A-Purpose", "x", "--", "true"],
        vec!["lock", "--url", "ftp://x", "export", "x", "--", "true"],
        vec![
            "lock",
            "--client-cert",
            "c.pem",
            "export",
            "x",
            "--",
            "true",
        ],
        vec!["inspect", "export"],
    ] {
        let out = run(&bad).await;
        assert_eq!(out.code(), 64, "{bad:?}; stderr: {}", out.stderr);
        assert!(!out.stderr.is_empty(), "{bad:?} says why");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_the_lease_as_json_and_as_a_table() {
    let (_redis, app) = service().await;
    let raw = unique("order-");
    let digest = ResourceDigest::of_raw_id(&raw);
    // The URL from LEASEHOLD_URL when --url is absent.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["inspect", "--json", "export", &raw])
        .env("LEASEHOLD_URL", &app.base)
        .output()
        .await
        .expect("run leasehold");
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["held"], false, "{v}");

    let holder = app.attempt().await;
    let r = app
        .acquire("export", digest.as_str(), &holder, 30_000)
        .await;
    assert_eq!(r.outcome(), "acquired");
    let out = run(&["inspect", "--url", &app.base, "--json", "export", &raw]).await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(v["outcome"], "inspected");
    assert_eq!(v["held"], true);
    assert_eq!(v["fencingToken"].as_u64(), Some(r.fencing_token()));
    assert!(v["remainingMs"].as_u64().is_some_and(|ms| ms <= 30_000));
    assert_eq!(v["purpose"], "export");
    assert_eq!(v["digest"], digest.as_str());
    assert!(!out.stdout.contains(&holder.token), "never the owner token");

    let out = run(&["inspect", "--url", &app.base, "export", &raw]).await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    assert!(out.stdout.contains("held          yes"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains(&format!("fencing token {}", r.fencing_token())),
        "{}",
        out.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_come_from_a_file_and_a_refused_key_exits_77() {
    let dir = temp_dir();
    let keys = dir.join("keys");
    std::fs::write(
        &keys,
        "cli-test-key-0123456789 export\ncli-read-key-0123456789 export read\n",
    )
    .expect("keys");
    let app = TestApp::spawn_with(args(
        &Backend::Memory,
        &["--api-keys-file", keys.to_str().expect("utf-8 path")],
    ))
    .await;
    let good = dir.join("good");
    std::fs::write(&good, "cli-test-key-0123456789\n").expect("key");
    let wrong = dir.join("wrong");
    std::fs::write(&wrong, "not-the-key-0123456789\n").expect("key");
    let good_arg = good.to_str().expect("utf-8 path");
    let out = run(&[
        "lock",
        "--url",
        &app.base,
        "--api-key-file",
        good_arg,
        "export",
        "x",
        "--",
        "true",
    ])
    .await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    let out = run(&[
        "inspect",
        "--url",
        &app.base,
        "--api-key-file",
        wrong.to_str().expect("utf-8 path"),
        "export",
        "x",
    ])
    .await;
    assert_eq!(out.code(), 77, "stderr: {}", out.stderr);
    assert!(
        !out.stderr.contains("not-the-key"),
        "the key is never printed"
    );
    let out = run(&[
        "inspect",
        "--url",
        &app.base,
        "--api-key-file",
        "/nonexistent/key",
        "export",
        "x",
    ])
    .await;
    assert_eq!(out.code(), 64, "stderr: {}", out.stderr);
    // A read-only key inspects, and may not lock: 77, naming the scope.
    let reader = dir.join("reader");
    std::fs::write(&reader, "cli-read-key-0123456789\n").expect("key");
    let reader_arg = reader.to_str().expect("utf-8 path");
    let out = run(&[
        "inspect",
        "--url",
        &app.base,
        "--api-key-file",
        reader_arg,
        "export",
        "x",
    ])
    .await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    let out = run(&[
        "lock",
        "--url",
        &app.base,
        "--api-key-file",
        reader_arg,
        "export",
        "x",
        "--",
        "true",
    ])
    .await;
    assert_eq!(out.code(), 77, "stderr: {}", out.stderr);
    assert!(
        out.stderr.contains("403 forbidden")
            && out
                .stderr
                .contains("lacks the 'write' scope for purpose 'export'"),
        "stderr: {}",
        out.stderr
    );
    assert!(
        !out.stderr.contains("cli-read-key"),
        "the key is never printed"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_is_forwarded_and_the_lease_released_when_the_command_exits() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;

    let (_redis, app) = service().await;
    let dir = temp_dir();
    let raw = unique("order-");
    let mut cli = leasehold(&[
        "lock",
        "--url",
        &app.base,
        "export",
        &raw,
        "--",
        "sh",
        "-c",
        &looping_child(&dir, true),
    ]);
    until_file(&dir.join("started"), &mut cli).await;
    let pid = cli.id().and_then(|id| i32::try_from(id).ok()).expect("pid");
    kill(Pid::from_raw(pid), Signal::SIGTERM).expect("signal leasehold");
    let out = finish(cli).await;
    // The command trapped it and exited 0: so does leasehold.
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    assert!(dir.join("term").exists(), "SIGTERM reached the command");
    let digest = ResourceDigest::of_raw_id(&raw);
    let r = app.inspect("export", digest.as_str(), None).await;
    assert_eq!(r.body["held"], false, "released: {:?}", r.body);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_waits_for_a_holder_that_goes_away() {
    let (_redis, app) = service().await;
    let dir = temp_dir();
    let raw = unique("order-");
    let digest = ResourceDigest::of_raw_id(&raw);
    let holder = app.attempt().await;
    let r = app.acquire("export", digest.as_str(), &holder, 3_000).await;
    assert_eq!(r.outcome(), "acquired");
    let ran = dir.join("ran");
    let script = format!("echo $LEASEHOLD_FENCING_TOKEN > {}", ran.display());
    // The holder's lease expires within 3 s; the waiting lock then runs.
    let out = run(&[
        "lock", "--url", &app.base, "--wait", "25s", "export", &raw, "--", "sh", "-c", &script,
    ])
    .await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    let token: u64 = std::fs::read_to_string(&ran)
        .expect("the command ran")
        .trim()
        .parse()
        .expect("a fencing token");
    assert!(token > r.fencing_token(), "a newer fencing token");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_prints_every_lease_of_a_purpose_once() {
    let (_redis, app) = service().await;
    let purpose = unique("listed-");
    let mut held = std::collections::BTreeSet::new();
    for i in 0..5 {
        let (raw, a) = (unique("order-"), app.attempt().await);
        let d = ResourceDigest::of_raw_id(&raw);
        let body = if i == 0 {
            serde_json::json!({"ttlMs": 30_000, "holder": "pod-7"})
        } else {
            serde_json::json!({"ttlMs": 30_000})
        };
        let r = app.acquire_body(&purpose, d.as_str(), &a, &body).await;
        assert_eq!(r.outcome(), "acquired");
        held.insert(d.as_str().to_owned());
    }
    // Pages of 2: the CLI follows every cursor.
    let out = run(&[
        "list",
        "--url",
        &app.base,
        "--json",
        "--page-size",
        "2",
        &purpose,
    ])
    .await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    let listed: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    let digests: std::collections::BTreeSet<String> = listed
        .iter()
        .map(|v| v["digest"].as_str().expect("digest").to_owned())
        .collect();
    assert_eq!(listed.len(), 5, "{}", out.stdout);
    assert_eq!(digests, held);
    assert!(listed.iter().all(|v| v["fencingToken"].as_u64().is_some()));
    assert_eq!(listed.iter().filter(|v| v["holder"] == "pod-7").count(), 1);

    let out = run(&["list", "--url", &app.base, &purpose]).await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    assert_eq!(out.stdout.lines().count(), 6, "{}", out.stdout);
    assert!(out.stdout.starts_with("DIGEST"), "{}", out.stdout);

    let out = run(&["list", "--url", &app.base, "--page-size", "0", &purpose]).await;
    assert_eq!(out.code(), 64, "stderr: {}", out.stderr);
    let out = run(&["list", "--url", &app.base, "Not-A-Purpose"]).await;
    assert_eq!(out.code(), 64, "stderr: {}", out.stderr);
}

/// `leasehold watch` prints the lease as it is, then a line per change, and
/// exits 0 after `--count` lines; `--json` prints the service's answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_a_line_per_change_and_stops_at_the_count() {
    use tokio::io::{AsyncBufReadExt, BufReader};

    let (_redis, app) = service().await;
    let raw = unique("order-");
    let d = ResourceDigest::of_raw_id(&raw);
    let mut child = leasehold(&[
        "watch", "--url", &app.base, "--count", "3", "--poll", "2s", "export", &raw,
    ]);
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    async fn next_line(
        lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    ) -> String {
        tokio::time::timeout(common::cli::PATIENCE, lines.next_line())
            .await
            .expect("a line in time")
            .expect("read stdout")
            .expect("a line before the end")
    }
    let first = next_line(&mut lines).await;
    assert!(
        first.starts_with(&format!("export {d} version=")),
        "{first}"
    );
    assert!(first.ends_with(" free"), "{first}");

    let a = app.attempt().await;
    let body = serde_json::json!({"ttlMs": 30_000, "holder": "pod-7"});
    let got = app.acquire_body("export", d.as_str(), &a, &body).await;
    assert_eq!(got.outcome(), "acquired");
    let second = next_line(&mut lines).await;
    assert!(
        second.contains(&format!(
            " held holders=1 fencing-token={} holder=pod-7 ",
            got.fencing_token()
        )),
        "{second}"
    );

    assert_eq!(
        app.release("export", d.as_str(), &a).await.outcome(),
        "released"
    );
    let third = next_line(&mut lines).await;
    assert!(third.ends_with(" free"), "{third}");
    drop(lines);
    let out = finish(child).await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);

    // --json: the service's answer with the resource, one per line.
    let out = run(&[
        "watch", "--url", &app.base, "--json", "--count", "1", "export", &raw,
    ])
    .await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    let seen: Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
    assert_eq!(seen["outcome"], "inspected");
    assert_eq!(seen["held"], false);
    assert_eq!(seen["digest"], d.as_str());

    // A poll longer than the service allows is refused as bad usage (64).
    let out = run(&[
        "watch", "--url", &app.base, "--poll", "1h", "--count", "2", "export", &raw,
    ])
    .await;
    assert_eq!(
        out.code(),
        64,
        "stdout: {} stderr: {}",
        out.stdout,
        out.stderr
    );
}

/// `leasehold acquire | renew | release` hold a lease across shell steps
/// through a state file (mode 0600), with `lock`'s exit codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_renew_release_span_steps_through_a_state_file() {
    use std::os::unix::fs::PermissionsExt;

    let (_redis, app) = service().await;
    let dir = temp_dir();
    let (state, other) = (dir.join("lease.json"), dir.join("other.json"));
    let (state_s, other_s) = (state.display().to_string(), other.display().to_string());
    let raw = unique("job-");
    let d = ResourceDigest::of_raw_id(&raw);
    let url = app.base.as_str();

    let out = run(&[
        "acquire", "--url", url, "--state", &state_s, "--ttl", "30s", "ci", &raw,
    ])
    .await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    let token: u64 = out.stdout.trim().parse().expect("the fencing token");
    let mode = std::fs::metadata(&state)
        .expect("state file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the state file holds the owner token");
    let seen = app.inspect("ci", d.as_str(), None).await;
    assert_eq!(seen.body["fencingToken"], token, "{:?}", seen.body);

    // Someone else's step: held, exit 75, and no state file left behind.
    let out = run(&["acquire", "--url", url, "--state", &other_s, "ci", &raw]).await;
    assert_eq!(out.code(), 75, "stderr: {}", out.stderr);
    assert!(!other.exists());

    // The same step run again (say after a timeout) replays: same token.
    let out = run(&["acquire", "--url", url, "--state", &state_s, "ci", &raw]).await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    assert_eq!(out.stdout.trim(), token.to_string());

    let out = run(&["renew", "--url", url, "--state", &state_s, "--ttl", "60s"]).await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    assert_eq!(out.stdout.trim(), token.to_string());
    let seen = app.inspect("ci", d.as_str(), None).await;
    assert_eq!(seen.body["ttlMs"], 60_000, "{:?}", seen.body);

    let out = run(&["release", "--url", url, "--state", &state_s]).await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    assert!(!state.exists(), "a released lease's state file is removed");
    assert_eq!(
        app.inspect("ci", d.as_str(), None).await.body["held"],
        false
    );
    let out = run(&["renew", "--url", url, "--state", &state_s]).await;
    assert_eq!(out.code(), 64, "no state file: bad usage; {}", out.stderr);

    // A lease that ran out: renew says lost (75) and forgets the state.
    let out = run(&[
        "acquire", "--url", url, "--state", &state_s, "--ttl", "300ms", "ci", &raw,
    ])
    .await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    while app.inspect("ci", d.as_str(), None).await.body["held"] == true {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let out = run(&["renew", "--url", url, "--state", &state_s]).await;
    assert_eq!(out.code(), 75, "stderr: {}", out.stderr);
    assert!(out.stderr.contains("lost"), "{}", out.stderr);
    assert!(!state.exists());
    // Nothing secret on the terminal.
    assert!(!out.stderr.contains("ownerToken"), "{}", out.stderr);

    // A state file of another resource is refused, not overwritten.
    let out = run(&["acquire", "--url", url, "--state", &state_s, "ci", &raw]).await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
    let out = run(&[
        "acquire", "--url", url, "--state", &state_s, "ci", "another",
    ])
    .await;
    assert_eq!(out.code(), 64, "stderr: {}", out.stderr);
    let out = run(&["release", "--url", url, "--state", &state_s]).await;
    assert_eq!(out.code(), 0, "stderr: {}", out.stderr);
}
