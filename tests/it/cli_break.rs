//! `leasehold break` as a real process against a real service (on a real
//! `redis-server`), with its exit codes, and what `leasehold lock` does
//! when its lease is broken under its command (exit 75, `revoked`).

use crate::common::app::TestApp;
use crate::common::app::{args, unique, Backend};
use crate::common::cli::{finish, leasehold, run, temp_dir, until_file};
use crate::common::redis::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn break_stops_a_lock_with_75_revoked_and_exits_by_outcome() {
    let redis = RedisServer::start();
    let dir = temp_dir();
    let keys = dir.join("keys");
    std::fs::write(
        &keys,
        "cli-admin-key-0123456789 export admin name=oncall\n\
         cli-write-key-0123456789 export write\n",
    )
    .expect("keys");
    let app = TestApp::spawn_with(args(
        &Backend::Redis(redis.url()),
        &["--api-keys-file", keys.to_str().expect("utf-8 path")],
    ))
    .await;
    let (admin, writer) = (dir.join("admin"), dir.join("writer"));
    std::fs::write(&admin, "cli-admin-key-0123456789\n").expect("key");
    std::fs::write(&writer, "cli-write-key-0123456789\n").expect("key");
    let (admin, writer) = (
        admin.to_str().expect("utf-8 path"),
        writer.to_str().expect("utf-8 path"),
    );
    let raw = unique("order-");
    let d = dir.display();
    let mut lock = leasehold(&[
        "lock", "--url", &app.base, "--api-key-file", writer, "--ttl", "6s", "export", &raw,
        "--", "sh", "-c",
        &format!("trap 'echo term > {d}/term; exit 0' TERM; echo $$ > {d}/started; while :; do sleep 0.05; done"),
    ]);
    until_file(&dir.join("started"), &mut lock).await;

    // A write key may not break: 77, naming the scope.
    let refused = run(&[
        "break",
        "--url",
        &app.base,
        "--api-key-file",
        writer,
        "export",
        &raw,
    ])
    .await;
    assert_eq!(refused.code(), 77, "stderr: {}", refused.stderr);
    assert!(
        refused.stderr.contains("admin"),
        "stderr: {}",
        refused.stderr
    );
    // A bad reason never reaches the service: 64.
    let bad = run(&[
        "break",
        "--url",
        &app.base,
        "--api-key-file",
        admin,
        "--reason",
        "",
        "export",
        &raw,
    ])
    .await;
    assert_eq!(bad.code(), 64, "stderr: {}", bad.stderr);

    let broke = run(&[
        "break",
        "--url",
        &app.base,
        "--api-key-file",
        admin,
        "--reason",
        "stuck",
        "export",
        &raw,
    ])
    .await;
    assert_eq!(broke.code(), 0, "stderr: {}", broke.stderr);
    assert_eq!(broke.stdout.trim(), "broken: 1 permit(s) removed");

    // The lock's next renew hears `lost`/`revoked`: SIGTERM, exit 75.
    let out = finish(lock).await;
    assert_eq!(out.code(), 75, "stderr: {}", out.stderr);
    assert!(out.stderr.contains("(revoked)"), "stderr: {}", out.stderr);
    assert!(dir.join("term").exists(), "the command got SIGTERM");

    // Nothing left to break: 1; a token nobody holds: 1.
    let again = run(&[
        "break",
        "--url",
        &app.base,
        "--api-key-file",
        admin,
        "export",
        &raw,
    ])
    .await;
    assert_eq!(again.code(), 1, "stderr: {}", again.stderr);
    assert!(
        again.stderr.contains("nothing to break"),
        "stderr: {}",
        again.stderr
    );
    let token = run(&[
        "break",
        "--url",
        &app.base,
        "--api-key-file",
        admin,
        "--fencing-token",
        "7",
        "export",
        &raw,
    ])
    .await;
    assert_eq!(token.code(), 1, "stderr: {}", token.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `leasehold lock --max-hold`: the watchdog renews up to the bound and no
/// further, and the command is stopped there as for a lost lease (exit 75,
/// "(max_hold)"), while its TTL alone would have been renewed for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_with_max_hold_stops_its_command_at_the_bound_with_75() {
    let redis = RedisServer::start();
    let dir = temp_dir();
    let app = TestApp::spawn_with(args(&Backend::Redis(redis.url()), &[])).await;
    let raw = unique("order-");
    let d = dir.display();
    let lock = leasehold(&[
        "lock", "--url", &app.base, "--ttl", "3s", "--max-hold", "1500ms", "export", &raw,
        "--", "sh", "-c",
        &format!("trap 'echo term > {d}/term; exit 0' TERM; echo $$ > {d}/started; while :; do sleep 0.05; done"),
    ]);
    let out = finish(lock).await;
    assert_eq!(out.code(), 75, "stderr: {}", out.stderr);
    assert!(out.stderr.contains("(max_hold)"), "stderr: {}", out.stderr);
    assert!(dir.join("started").exists(), "the command ran");
    assert!(dir.join("term").exists(), "the command got SIGTERM");
    let _ = std::fs::remove_dir_all(&dir);
}
