//! Definite refusals by Redis (docs/design.md §8): a full Redis, NOREPLICAS,
//! MISCONF, BUSY and NOPERM, each on a real `redis-server` configured to
//! refuse. Every verb the refusal can hit answers `503 unavailable` as
//! problem+json with `Retry-After`; the refusal costs no reconnect per
//! request; nothing was applied meanwhile (the same attempt acquires
//! normally afterwards, a lease held before is intact). A replay, which
//! needs no write to be decided, is answered through a full Redis,
//! NOREPLICAS and a read-only replica (issue 39, item 8).

#[allow(unused_imports)]
use crate::common;

use common::app::{args, digest, Backend, Reply, TestApp, TestAttempt};
use common::redis::RedisServer;
use reqwest::StatusCode;

const P: &str = "billing";
/// Pool size of the app under test: small, so "a few warm connections"
/// and "one connection per request" are far apart.
const POOL: u64 = 2;
/// Refused requests per verb.
const ROUNDS: usize = 12;
/// TTL of the lease held through the refusal.
const HELD_TTL_MS: u64 = 60_000;
/// TTL asked for while refused: far above `HELD_TTL_MS`, so a renew that was
/// applied after all shows in `remainingMs`.
const REFUSED_TTL_MS: u64 = 3_600_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verb {
    Acquire,
    Renew,
    Release,
    Inspect,
}

const EVERY_VERB: &[Verb] = &[Verb::Acquire, Verb::Renew, Verb::Release, Verb::Inspect];
/// What a write refusal (OOM aside) hits: acquire of a free resource, renew
/// and release of a held one. Inspect only reads.
const WRITES: &[Verb] = &[Verb::Acquire, Verb::Renew, Verb::Release];

/// The leases a refusal test works on.
struct Scene {
    /// Holds `held_digest` from before the refusal.
    holder: TestAttempt,
    held_digest: String,
    held_token: u64,
    /// Tries to acquire `free_digest` while refused, then again after.
    newcomer: TestAttempt,
    free_digest: String,
}

/// An app on `server` with a 2 s command timeout (the test default: slowness
/// is never mistaken for a refusal) and a small pool.
async fn app_on(server: &RedisServer, extra: &[&str]) -> TestApp {
    let pool = POOL.to_string();
    let mut all = vec!["--pool-size", pool.as_str()];
    all.extend_from_slice(extra);
    TestApp::spawn_with(args(&Backend::Redis(server.url()), &all)).await
}

/// Runs every verb once on a scratch resource (so each script is loaded and
/// the pool warm), then takes the lease that must survive the refusal.
async fn prepare(app: &TestApp) -> Scene {
    let scratch = digest();
    let a = app.attempt().await;
    let r = app.acquire(P, &scratch, &a, HELD_TTL_MS).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(
        app.renew(P, &scratch, &a, HELD_TTL_MS).await.outcome(),
        "renewed"
    );
    assert_eq!(
        app.inspect(P, &scratch, Some(&a)).await.body["heldBy"],
        "caller"
    );
    assert_eq!(app.release(P, &scratch, &a).await.outcome(), "released");

    let holder = app.attempt().await;
    let held_digest = digest();
    let held = app.acquire(P, &held_digest, &holder, HELD_TTL_MS).await;
    assert_eq!(held.status, StatusCode::CREATED, "{:?}", held.body);
    Scene {
        held_token: held.fencing_token(),
        holder,
        held_digest,
        newcomer: app.attempt().await,
        free_digest: digest(),
    }
}

async fn send(app: &TestApp, scene: &Scene, verb: Verb) -> Reply {
    match verb {
        Verb::Acquire => {
            app.acquire(P, &scene.free_digest, &scene.newcomer, REFUSED_TTL_MS)
                .await
        }
        Verb::Renew => {
            app.renew(P, &scene.held_digest, &scene.holder, REFUSED_TTL_MS)
                .await
        }
        Verb::Release => app.release(P, &scene.held_digest, &scene.holder).await,
        Verb::Inspect => {
            app.inspect(P, &scene.held_digest, Some(&scene.holder))
                .await
        }
    }
}

fn assert_unavailable(what: &str, verb: Verb, r: &Reply) {
    assert_eq!(
        (r.status, r.outcome()),
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        "{what}: {verb:?} must answer 503 unavailable, got {:?}",
        r.body
    );
    assert_eq!(
        r.content_type(),
        "application/problem+json",
        "{what}: {verb:?}"
    );
    assert_eq!(r.body["status"], 503, "{what}: {verb:?}: {:?}", r.body);
    let retry_after = r
        .headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    assert!(
        retry_after.is_some_and(|s| s >= 1),
        "{what}: {verb:?} needs a Retry-After of whole seconds: {:?}",
        r.headers.get("retry-after")
    );
}

/// Sends `ROUNDS` of every verb in `refused`, each answered 503
/// `unavailable`; returns how many requests were sent.
async fn assert_refused(what: &str, app: &TestApp, scene: &Scene, refused: &[Verb]) -> u64 {
    let mut sent = 0;
    for _ in 0..ROUNDS {
        for &verb in refused {
            assert_unavailable(what, verb, &send(app, scene, verb).await);
            sent += 1;
        }
    }
    sent
}

/// Reads still work while writes are refused: Redis serves them.
async fn assert_reads_work(what: &str, app: &TestApp, scene: &Scene) {
    let r = send(app, scene, Verb::Inspect).await;
    assert_eq!(r.status, StatusCode::OK, "{what}: inspect: {:?}", r.body);
    assert_eq!(r.body["heldBy"], "caller", "{what}: {:?}", r.body);
}

/// `growth` connections were accepted while `sent` refused requests were
/// answered (the harness's own connections already taken off): at most a
/// refill of the pool and a re-subscription, never one per request.
fn assert_no_reconnect_per_request(what: &str, growth: u64, sent: u64) {
    assert!(
        sent >= 3 * (POOL + 1),
        "the test must send far more requests than the pool holds"
    );
    assert!(
        growth <= POOL + 1,
        "{what}: {growth} new Redis connections for {sent} refused requests \
         (pool of {POOL}): a refusal must keep its connection"
    );
}

/// After the refusal is lifted: nothing was applied meanwhile. The held
/// lease is intact (same fencing token, its TTL not extended to the refused
/// renew's), the newcomer acquires afresh (not a replay), and both release.
async fn assert_nothing_applied(what: &str, app: &TestApp, scene: &Scene) {
    let seen = send(app, scene, Verb::Inspect).await;
    assert_eq!(seen.status, StatusCode::OK, "{what}: {:?}", seen.body);
    assert_eq!(
        seen.body["heldBy"], "caller",
        "{what}: the lease held before the refusal is gone: {:?}",
        seen.body
    );
    assert_eq!(seen.body["fencingToken"], scene.held_token, "{what}");
    let remaining = seen.body["remainingMs"].as_u64().unwrap_or(u64::MAX);
    assert!(
        remaining <= HELD_TTL_MS,
        "{what}: a refused renew was applied: remainingMs {remaining}"
    );

    let again = send(app, scene, Verb::Acquire).await;
    assert_eq!(
        (again.status, again.outcome()),
        (StatusCode::CREATED, "acquired"),
        "{what}: the refused attempt must acquire afresh: {:?}",
        again.body
    );
    assert!(again.fencing_token() > 0);

    let renewed = app
        .renew(P, &scene.held_digest, &scene.holder, HELD_TTL_MS)
        .await;
    assert_eq!(renewed.outcome(), "renewed", "{what}: {:?}", renewed.body);
    assert_eq!(renewed.fencing_token(), scene.held_token, "{what}");
    for (d, a) in [
        (&scene.held_digest, &scene.holder),
        (&scene.free_digest, &scene.newcomer),
    ] {
        let r = app.release(P, d, a).await;
        assert_eq!(r.outcome(), "released", "{what}: {:?}", r.body);
    }
}

/// The common course of a refusal that the harness sets with CONFIG (and
/// that allows INFO meanwhile): refuse, count connections around the refused
/// requests, lift, check nothing was applied.
async fn config_refusal(
    what: &str,
    server: &RedisServer,
    refused: &[Verb],
    refuse: impl FnOnce(),
    lift: impl FnOnce(),
) {
    let app = app_on(server, &[]).await;
    let scene = prepare(&app).await;
    refuse();
    let before = server.connections_received();
    let sent = assert_refused(what, &app, &scene, refused).await;
    if !refused.contains(&Verb::Inspect) {
        assert_reads_work(what, &app, &scene).await;
    }
    // `after` counts its own redis-cli connection.
    let growth = server.connections_received() - before - 1;
    lift();
    assert_no_reconnect_per_request(what, growth, sent);
    assert_nothing_applied(what, &app, &scene).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_redis_refuses_acquire_as_unavailable() {
    // maxmemory below what is used, with noeviction (README's advice):
    // Redis refuses a script's first memory-growing write (SET) with OOM.
    // Renew (PEXPIRE) and release (DEL) do not grow memory and are allowed.
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    config_refusal(
        "OOM",
        &server,
        &[Verb::Acquire],
        || {
            server.cli(&["CONFIG", "SET", "maxmemory", "1"]);
        },
        || {
            server.cli(&["CONFIG", "SET", "maxmemory", "0"]);
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noreplicas_refuses_writes_as_unavailable() {
    // min-replicas-to-write 1 with no replica at all: every script's first
    // write is refused NOREPLICAS.
    let server = RedisServer::start();
    config_refusal(
        "NOREPLICAS",
        &server,
        WRITES,
        || {
            server.cli(&["CONFIG", "SET", "min-replicas-to-write", "1"]);
        },
        || {
            server.cli(&["CONFIG", "SET", "min-replicas-to-write", "0"]);
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misconf_refuses_writes_as_unavailable() {
    // A BGSAVE that failed with stop-writes-on-bgsave-error: every script's
    // first write is refused MISCONF until a BGSAVE succeeds.
    let server = RedisServer::start();
    config_refusal(
        "MISCONF",
        &server,
        WRITES,
        || server.break_persistence(),
        || server.repair_persistence(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_script_refuses_every_verb_as_unavailable() {
    // Another client's script loops past busy-reply-threshold: Redis answers
    // every other command BUSY (INFO included) until SCRIPT KILL.
    let server = RedisServer::start_with(&["--busy-reply-threshold", "100"]);
    let app = app_on(&server, &[]).await;
    let scene = prepare(&app).await;
    let before = server.connections_received();
    let busy = server.start_busy_script();
    let sent = assert_refused("BUSY", &app, &scene, EVERY_VERB).await;
    let harness = busy.end();
    let growth = server.connections_received() - before - 1 - harness;
    assert_no_reconnect_per_request("BUSY", growth, sent);
    assert_nothing_applied("BUSY", &app, &scene).await;
}

/// An app on an ACL server as `user` (password from a file).
async fn acl_app(server: &RedisServer, user: &str, password: &str) -> TestApp {
    let file = server.dir().join("leasehold-password");
    std::fs::write(&file, format!("{password}\n")).expect("write password file");
    let file = file.display().to_string();
    app_on(
        server,
        &["--redis-username", user, "--redis-password-file", &file],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noperm_on_the_keys_refuses_every_verb_as_unavailable() {
    // The user may still EVALSHA, but no longer touch the lease keys: Redis
    // checks a script's declared keys before running it (NOPERM).
    let (user, password) = ("leasehold", "refusals-Secret-1");
    let server = RedisServer::start_acl(user, password);
    let app = acl_app(&server, user, password).await;
    let scene = prepare(&app).await;
    server.cli(&["ACL", "SETUSER", user, "resetkeys", "~unrelated:*"]);
    let before = server.connections_received();
    let sent = assert_refused("NOPERM (keys)", &app, &scene, EVERY_VERB).await;
    let growth = server.connections_received() - before - 1;
    server.cli(&["ACL", "SETUSER", user, "resetkeys", "~*"]);
    assert_no_reconnect_per_request("NOPERM (keys)", growth, sent);
    assert_nothing_applied("NOPERM (keys)", &app, &scene).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noperm_on_publish_refuses_release_and_keeps_the_lease() {
    // The user may run every script but not PUBLISH, which release needs to
    // wake waiters: release must be refused before it deletes anything
    // (Redis 7.0 words this in-script ACL denial as an ERR reply).
    let (user, password) = ("leasehold", "refusals-Secret-2");
    let server = RedisServer::start_acl(user, password);
    let app = acl_app(&server, user, password).await;
    let scene = prepare(&app).await;
    server.cli(&["ACL", "SETUSER", user, "-publish"]);
    let before = server.connections_received();
    let sent = assert_refused("NOPERM (publish)", &app, &scene, &[Verb::Release]).await;
    assert_reads_work("NOPERM (publish)", &app, &scene).await;
    let growth = server.connections_received() - before - 1;
    server.cli(&["ACL", "SETUSER", user, "+publish"]);
    assert_no_reconnect_per_request("NOPERM (publish)", growth, sent);
    assert_nothing_applied("NOPERM (publish)", &app, &scene).await;
}

/// Item 8 of issue 39: the first replay of a permit neither renewed nor
/// claimed yet (its claim key, lua/acquire.lua, not written) is answered
/// while Redis refuses writes, as the previous release answered it: the
/// answer is decided before any write and the claim's write is optional.
/// A newcomer's acquire is refused meanwhile (the refusal is real); once
/// it is lifted the replayed lease is intact and releases.
async fn first_replay_answered_while_refused(
    what: &str,
    server: &RedisServer,
    refuse: impl FnOnce(),
    lift: impl FnOnce(),
) {
    let app = app_on(server, &[]).await;
    let (a, held) = (app.attempt().await, digest());
    let first = app.acquire(P, &held, &a, HELD_TTL_MS).await;
    assert_eq!(
        first.status,
        StatusCode::CREATED,
        "{what}: {:?}",
        first.body
    );
    let token = first.fencing_token();
    refuse();
    let newcomer = app.attempt().await;
    assert_unavailable(
        what,
        Verb::Acquire,
        &app.acquire(P, &digest(), &newcomer, HELD_TTL_MS).await,
    );
    for round in 0..3 {
        let replay = app.acquire(P, &held, &a, HELD_TTL_MS).await;
        assert_eq!(
            (replay.status, replay.outcome()),
            (StatusCode::OK, "replayed_same_operation"),
            "{what}: replay {round} while Redis refuses writes: {:?}",
            replay.body
        );
        assert_eq!(replay.fencing_token(), token, "{what}");
    }
    lift();
    let seen = app.inspect(P, &held, Some(&a)).await;
    assert_eq!(seen.body["heldBy"], "caller", "{what}: {:?}", seen.body);
    assert_eq!(seen.body["fencingToken"], token, "{what}");
    let released = app.release(P, &held, &a).await;
    assert_eq!(
        released.outcome(),
        "released",
        "{what}: {:?}",
        released.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_replay_is_answered_by_a_full_redis() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    first_replay_answered_while_refused(
        "OOM",
        &server,
        || {
            server.cli(&["CONFIG", "SET", "maxmemory", "1"]);
        },
        || {
            server.cli(&["CONFIG", "SET", "maxmemory", "0"]);
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_replay_is_answered_under_noreplicas() {
    let server = RedisServer::start();
    first_replay_answered_while_refused(
        "NOREPLICAS",
        &server,
        || {
            server.cli(&["CONFIG", "SET", "min-replicas-to-write", "1"]);
        },
        || {
            server.cli(&["CONFIG", "SET", "min-replicas-to-write", "0"]);
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_replay_is_answered_by_a_read_only_replica() {
    // REPLICAOF a loopback port nobody listens on: the server turns into a
    // read-only replica (READONLY on every write) that keeps its data, as
    // it never reaches a master to sync from; REPLICAOF NO ONE lifts it.
    let server = RedisServer::start();
    let nobody = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
        .to_string();
    first_replay_answered_while_refused(
        "READONLY",
        &server,
        || {
            server.cli(&["REPLICAOF", "127.0.0.1", &nobody]);
        },
        || {
            server.cli(&["REPLICAOF", "NO", "ONE"]);
        },
    )
    .await;
}

/// The refusals above are real: each makes Redis answer a script's write
/// with its code, and each is lifted. Checked with redis-cli alone, so a
/// failure here is the harness's, not leasehold's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_makes_redis_refuse_and_lifts_it() {
    const WRITE: &str = "redis.call('GET', KEYS[1]); return redis.call('SET', KEYS[1], 'x')";
    let write = |server: &RedisServer| server.cli_result(&["EVAL", WRITE, "1", "refusal-probe"]);
    let expect_code = |code: &str, result: Result<String, String>| match result {
        Err(e) => assert!(e.starts_with(code), "expected {code}, got {e}"),
        Ok(v) => panic!("expected {code}, the write answered {v}"),
    };

    let server = RedisServer::start_with(&["--busy-reply-threshold", "100"]);
    server.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    expect_code("OOM", write(&server));
    server.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    server.cli(&["CONFIG", "SET", "min-replicas-to-write", "1"]);
    expect_code("NOREPLICAS", write(&server));
    server.cli(&["CONFIG", "SET", "min-replicas-to-write", "0"]);
    server.break_persistence();
    expect_code("MISCONF", write(&server));
    server.repair_persistence();
    assert_eq!(write(&server).as_deref(), Ok("OK"));
    let busy = server.start_busy_script();
    expect_code("BUSY", write(&server));
    assert!(
        busy.end() >= 3,
        "the looping client, a probe and SCRIPT KILL"
    );
    assert_eq!(write(&server).as_deref(), Ok("OK"));

    let (user, password) = ("leasehold", "refusals-Secret-3");
    let acl = RedisServer::start_acl(user, password);
    let as_user = || acl.cli_as(user, password, &["EVAL", WRITE, "1", "refusal-probe"]);
    assert_eq!(as_user().as_deref(), Ok("OK"));
    acl.cli(&["ACL", "SETUSER", user, "resetkeys", "~unrelated:*"]);
    expect_code("NOPERM", as_user());
    acl.cli(&["ACL", "SETUSER", user, "resetkeys", "~*"]);
    assert_eq!(as_user().as_deref(), Ok("OK"));
}
