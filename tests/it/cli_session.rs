//! `leasehold session` as a real process against a real service (issue 42):
//! the command runs with every lease and the end frees them; a broken lease
//! stops it (SIGTERM, exit 75); a `session` killed with SIGKILL frees every
//! lease at once through its keep-alive stream; a resource held elsewhere
//! keeps the command from running and releases the others.
//!
//! Children are `sh -c` scripts that leave marker files; the tests wait for
//! those files, for process exits and for server-side waits, never for a
//! fixed time.

#[allow(unused_imports)]
use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::app::{unique, Backend, TestApp};
use common::cli::{finish, leasehold, run, temp_dir, until_file};
use leasehold::domain::ResourceDigest;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const P: &str = "shards";

/// Marks its start (with its pid); on SIGTERM marks it and exits 0.
fn looping_child(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "trap 'echo term > {d}/term; exit 0' TERM; echo $$ > {d}/started.tmp && mv {d}/started.tmp {d}/started; \
         while :; do sleep 0.05; done"
    )
}

fn digest(raw: &str) -> String {
    ResourceDigest::of_raw_id(raw).as_str().to_owned()
}

async fn held(app: &TestApp, raw: &str) -> bool {
    let r = app.inspect(P, &digest(raw), None).await;
    r.body["held"] == true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_runs_with_every_lease_and_the_end_frees_them() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let dir = temp_dir();
    let (a, b) = (unique("shard-"), unique("shard-"));
    let env_file = dir.join("env");
    let script = format!(
        "echo \"$LEASEHOLD_SESSION|$LEASEHOLD_PURPOSE|$LEASEHOLD_DIGESTS|$LEASEHOLD_FENCING_TOKENS\" > {}; exit 7",
        env_file.display()
    );
    let out = run(&[
        "session",
        "--url",
        &app.base,
        "--purpose",
        P,
        "--ttl",
        "5s",
        "--resource",
        &a,
        "--resource",
        &b,
        "--",
        "sh",
        "-c",
        &script,
    ])
    .await;
    assert_eq!(
        out.code(),
        7,
        "the command's status; stderr: {}",
        out.stderr
    );
    let seen = std::fs::read_to_string(&env_file).expect("the command ran");
    let fields: Vec<&str> = seen.trim().split('|').collect();
    assert_eq!(fields.len(), 4, "{seen:?}");
    assert!(
        fields[0].starts_with("s1.") && fields[0].len() == 35,
        "{seen:?}"
    );
    assert_eq!(fields[1], P);
    assert_eq!(fields[2], format!("{} {}", digest(&a), digest(&b)));
    let tokens: Vec<u64> = fields[3]
        .split(' ')
        .map(|t| t.parse().expect("a fencing token"))
        .collect();
    assert_eq!(tokens.len(), 2, "{seen:?}");
    assert!(tokens.iter().all(|t| *t > 0), "{seen:?}");
    // The session ended when the command exited: both free at once.
    assert!(!held(&app, &a).await && !held(&app, &b).await);
    let gone = app.get(&format!("/sessions/{}", fields[0])).await;
    assert_eq!(gone.status, 404, "{:?}", gone.body);
    // The same resource twice is a usage error.
    let twice = run(&[
        "session",
        "--url",
        &app.base,
        "--purpose",
        P,
        "--resource",
        &a,
        "--resource",
        &a,
        "--",
        "true",
    ])
    .await;
    assert_eq!(twice.code(), 64, "stderr: {}", twice.stderr);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_lease_stops_the_command_with_sigterm_and_exits_75() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let dir = temp_dir();
    let (a, b) = (unique("shard-"), unique("shard-"));
    let mut cli = leasehold(&[
        "session",
        "--url",
        &app.base,
        "--purpose",
        P,
        "--ttl",
        "3s",
        "--resource",
        &a,
        "--resource",
        &b,
        "--",
        "sh",
        "-c",
        &looping_child(&dir),
    ]);
    until_file(&dir.join("started"), &mut cli).await;
    let broken = app
        .http
        .post(format!("{}/leases/{P}/{}/break", app.base, digest(&b)))
        .json(&serde_json::json!({}))
        .send()
        .await
        .expect("break");
    assert_eq!(broken.status(), 200);
    // The keep-alive's next renewal says the lease is gone (revoked).
    let out = finish(cli).await;
    assert_eq!(out.code(), 75, "stderr: {}", out.stderr);
    assert!(dir.join("term").exists(), "the command got SIGTERM");
    assert!(out.stderr.contains("(revoked)"), "stderr: {}", out.stderr);
    // The rest was released with the session.
    assert!(!held(&app, &a).await);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_session_frees_every_lease_at_once() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let dir = temp_dir();
    let (a, b) = (unique("shard-"), unique("shard-"));
    let mut cli = leasehold(&[
        "session",
        "--url",
        &app.base,
        "--purpose",
        P,
        "--ttl",
        "30s",
        "--resource",
        &a,
        "--resource",
        &b,
        "--",
        "sh",
        "-c",
        &looping_child(&dir),
    ]);
    until_file(&dir.join("started"), &mut cli).await;
    let child: i32 = std::fs::read_to_string(dir.join("started"))
        .expect("pid")
        .trim()
        .parse()
        .expect("a pid");
    assert!(held(&app, &a).await && held(&app, &b).await);
    let killed = Instant::now();
    cli.start_kill().expect("SIGKILL leasehold session");
    let _ = cli.wait().await;
    // Waiters get both long before the 30 s TTL: the stream's close ended it.
    let waiter = app.attempt().await;
    for raw in [&a, &b] {
        let r = app
            .acquire_wait(P, &digest(raw), &waiter, 5000, 20_000)
            .await;
        assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
    }
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(10), "freed after {took:?}");
    let _ = kill(Pid::from_raw(child), Signal::SIGKILL);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_held_elsewhere_keeps_the_command_from_running() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let dir = temp_dir();
    let (a, b) = (unique("shard-"), unique("shard-"));
    let other = app.attempt().await;
    let r = app.acquire(P, &digest(&b), &other, 30_000).await;
    assert_eq!(r.outcome(), "acquired");
    let marker = dir.join("ran");
    let script = format!("touch {}", marker.display());
    let out = run(&[
        "session",
        "--url",
        &app.base,
        "--purpose",
        P,
        "--resource",
        &a,
        "--resource",
        &b,
        "--",
        "sh",
        "-c",
        &script,
    ])
    .await;
    assert_eq!(out.code(), 75, "stderr: {}", out.stderr);
    assert!(!marker.exists(), "the command did not run");
    assert!(
        out.stderr.contains("held by someone else"),
        "{}",
        out.stderr
    );
    // `a`, acquired first, was released with the session.
    assert!(!held(&app, &a).await);
    let _ = std::fs::remove_dir_all(dir);
}
