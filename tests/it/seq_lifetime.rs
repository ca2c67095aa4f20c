//! What a released resource leaves behind, and for how long (issue 41,
//! design §20, docs/storage.md "Keys"): the fencing sequence lives only as
//! long as it protects something (the history's age, at least a minute and
//! the lease's TTL), the history one hour by default, and a fencing token
//! still increases after the sequence key has expired (the server clock
//! floors the next token, §8), on Redis and on the embedded store.

use std::time::{Duration, Instant};

use crate::common::app::{args, digest, Backend, TestApp};
use crate::common::redis::RedisServer;

const P: &str = "ledger";

/// One hour: the default `LEASEHOLD_HISTORY_MAX_AGE_MS`, and the most any
/// key a released plain lease leaves may live by default (§20).
const HOUR_MS: i64 = 3_600_000;
/// The least a sequence key lives past its last write (`SEQ_KEY_FLOOR_MS`).
const SEQ_FLOOR_MS: i64 = 60_000;

fn pttl(server: &RedisServer, key: &str) -> i64 {
    server.cli(&["PTTL", key]).trim().parse().expect("PTTL")
}

/// Polls `probe` every few ms until it holds; fails after 10 s.
async fn until(what: &str, mut probe: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !probe() {
        assert!(Instant::now() < deadline, "still not: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// With default settings, every key a released plain lease leaves (the
/// sequence and the history) expires within one hour, not 7 days.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_lease_leaves_nothing_for_longer_than_an_hour() {
    let server = RedisServer::start();
    let app = TestApp::spawn_with(args(&Backend::Redis(server.url()), &[])).await;
    let d = digest();
    let a = app.attempt().await;
    let got = app.acquire(P, &d, &a, 30_000).await;
    assert_eq!(got.outcome(), "acquired", "{:?}", got.body);
    let gone = app.release(P, &d, &a).await;
    assert_eq!(gone.outcome(), "released", "{:?}", gone.body);
    let listed = server.cli(&["--scan", "--pattern", &format!("{}:*", app.namespace)]);
    let keys: Vec<&str> = listed
        .lines()
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .collect();
    let kinds: Vec<&str> = keys.iter().filter_map(|k| k.split(':').nth(1)).collect();
    assert!(
        kinds.contains(&"seq") && kinds.contains(&"hist"),
        "the sequence and the history stay after a release: {keys:?}"
    );
    for key in keys {
        let left = pttl(&server, key);
        assert!(
            left > 0 && left <= HOUR_MS,
            "{key} lives {left} ms after the release (at most an hour by default)"
        );
    }
}

/// Hold, release, let the sequence key expire, acquire again: the new
/// token is larger than every earlier one; and the sequence's PTTL stays
/// within its bound (the history's age, at least a minute and the TTL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_still_increases_after_the_sequence_expired() {
    let server = RedisServer::start();
    let app = TestApp::spawn_with(args(
        &Backend::Redis(server.url()),
        &["--history-max-age-ms", "3000"],
    ))
    .await;
    let d = digest();
    let seq = format!("{}:seq:v2:{{{P}:{d}}}", app.namespace);
    let a = app.attempt().await;
    let got = app.acquire(P, &d, &a, 5_000).await;
    assert_eq!(got.outcome(), "acquired", "{:?}", got.body);
    let first = got.fencing_token();
    // Held: it outlives the lease, and lives the floor (the history's 3 s
    // are shorter), not 7 days.
    let held = pttl(&server, &seq);
    assert!(
        held > 5_000 && held <= SEQ_FLOOR_MS,
        "sequence PTTL {held} ms while held (want > the 5 s TTL, <= {SEQ_FLOOR_MS})"
    );
    let gone = app.release(P, &d, &a).await;
    assert_eq!(gone.outcome(), "released", "{:?}", gone.body);
    let after = pttl(&server, &seq);
    assert!(
        after > 0 && after <= SEQ_FLOOR_MS,
        "sequence PTTL {after} ms after the release"
    );
    // The sequence expires (made due at once rather than waiting its
    // minute): Redis drops it as it drops any expired key.
    assert_eq!(server.cli(&["PEXPIRE", &seq, "1"]).trim(), "1");
    until("the sequence key expired", || {
        server.cli(&["EXISTS", &seq]).trim() == "0"
    })
    .await;
    let b = app.attempt().await;
    let again = app.acquire(P, &d, &b, 5_000).await;
    assert_eq!(again.outcome(), "acquired", "{:?}", again.body);
    assert!(
        again.fencing_token() > first,
        "token {} after the sequence expired, {first} before",
        again.fencing_token()
    );
    // A longer TTL than the floor: the sequence outlives that lease.
    let gone = app.release(P, &d, &b).await;
    assert_eq!(gone.outcome(), "released", "{:?}", gone.body);
    let c = app.attempt().await;
    let long = app.acquire(P, &d, &c, 120_000).await;
    assert_eq!(long.outcome(), "acquired", "{:?}", long.body);
    assert!(long.fencing_token() > again.fencing_token());
    let held = pttl(&server, &seq);
    assert!(
        held > 110_000 && held <= 120_000,
        "sequence PTTL {held} ms under a 120 s lease"
    );
}

/// The embedded store: hold, release, let the resource's history age out
/// and the sweeper drop it, acquire again: a larger token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_still_increases_after_the_embedded_history_went() {
    let (app, store) =
        TestApp::spawn_observed(args(&Backend::Memory, &["--history-max-age-ms", "300"])).await;
    let leasehold::store::Store::Memory(memory) = store else {
        panic!("the embedded store");
    };
    let d = digest();
    let a = app.attempt().await;
    let got = app.acquire(P, &d, &a, 5_000).await;
    assert_eq!(got.outcome(), "acquired", "{:?}", got.body);
    let first = got.fencing_token();
    let gone = app.release(P, &d, &a).await;
    assert_eq!(gone.outcome(), "released", "{:?}", gone.body);
    assert_eq!(memory.residue().histories, 1);
    until("the embedded history aged out", || {
        memory.residue().histories == 0
    })
    .await;
    assert_eq!(memory.residue().leases, 0);
    let b = app.attempt().await;
    let again = app.acquire(P, &d, &b, 5_000).await;
    assert_eq!(again.outcome(), "acquired", "{:?}", again.body);
    assert!(
        again.fencing_token() > first,
        "token {} after the history went, {first} before",
        again.fencing_token()
    );
}
