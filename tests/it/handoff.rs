//! Hand-off in the script (docs/design.md §12, "Hand-off"): a release of a
//! plain lease with a queue grants it to the queue's first live waiter when
//! that waiter is on the releasing instance, in the same script run, and
//! the instance answers it from the published grant, without another
//! acquire. A head on another instance is woken as before. A granted waiter
//! whose caller has gone is released again (nobody claimed the grant), and
//! the next waiter goes in turn. Real `redis-server` processes; the
//! instances reach Redis through a RESP-aware proxy that counts script runs
//! by SHA and can hold one script's calls back.

#[allow(unused_imports)]
use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::app::{args, digest, unique, Backend, TestApp, TestAttempt};
use common::fault_proxy::FaultProxy;
use common::redis::RedisServer;
use reqwest::StatusCode;
use serde_json::{json, Value};

const P: &str = "handoff";

/// An instance of namespace `ns` on `url`.
async fn instance(url: String, ns: &str) -> TestApp {
    // A command timeout above the 3 s reply delay of the second test.
    let flags = [
        "--namespace",
        ns,
        "--release-abandoned",
        "true",
        "--command-timeout-ms",
        "6000",
    ];
    TestApp::spawn_with(args(&Backend::Redis(url), &flags)).await
}

/// A waiting acquire through a client of its own, which the test may
/// abort (the caller closes its socket).
fn waiting_acquire(
    app: &TestApp,
    d: &str,
    who: &TestAttempt,
) -> tokio::task::JoinHandle<(StatusCode, Value)> {
    let request = reqwest::Client::new()
        .put(format!("{}/leases/{P}/{d}", app.base))
        .header("Lease-Owner-Token", &who.token)
        .header("Lease-Operation-Id", &who.op)
        .json(&json!({ "ttlMs": 30_000, "waitMs": 20_000, "holder": "waiter" }));
    tokio::spawn(async move {
        let resp = request.send().await.expect("waiting acquire sent");
        let status = resp.status();
        (status, resp.json().await.expect("a JSON answer"))
    })
}

/// Polls inspect (bounded) until `who` holds the lease; its fencing token.
async fn until_held_by(app: &TestApp, d: &str, who: &TestAttempt) -> u64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let seen = app.inspect(P, d, Some(who)).await;
        if seen.body["heldBy"] == "caller" {
            return seen.body["fencingToken"].as_u64().expect("fencingToken");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never granted: {:?}",
            seen.body
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A waiting acquire written on a socket of its own, which the test closes
/// (dropped: the caller leaves at once).
async fn raw_waiting_acquire(app: &TestApp, d: &str, who: &TestAttempt) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt as _;
    let body = json!({ "ttlMs": 30_000, "waitMs": 20_000, "holder": "waiter" }).to_string();
    let head = format!(
        "PUT /leases/{P}/{d} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nlease-owner-token: {}\r\nlease-operation-id: {}\r\n\r\n",
        app.addr,
        body.len(),
        who.token,
        who.op
    );
    let mut socket = tokio::net::TcpStream::connect(app.addr)
        .await
        .expect("connect");
    socket
        .write_all(format!("{head}{body}").as_bytes())
        .await
        .expect("request written");
    socket
}

/// The release answers `released`; the waiter queued on the same instance
/// is answered `acquired` from the grant, with a newer fencing token, and
/// no acquire script ran for it. Inspect and the history agree: released,
/// then acquired by the waiter. When the next head waits on another
/// instance, that instance's waiter acquires for itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_grants_the_queue_head_without_another_acquire() {
    let server = RedisServer::start();
    let acquire_sha = server.script_sha("acquire");
    // The holder's acquire (a caller not waiting) runs the slim script.
    let plain_sha = server.script_sha("plain_acquire");
    let proxy = FaultProxy::start(server.addr()).await;
    let ns = unique("ho");
    let waiting = instance(proxy.url(), &ns).await;
    let holding = instance(server.url(), &ns).await;
    let d = digest();
    let holder = waiting.attempt().await;
    let held = waiting.acquire(P, &d, &holder, 30_000).await;
    assert_eq!(held.outcome(), "acquired", "{:?}", held.body);

    let waiter = waiting.attempt().await;
    let pending = waiting_acquire(&waiting, &d, &waiter);
    // Counted as a waiter once its first look answered: that look entered
    // it in the queue, with its ask, in the same script run (no enter of
    // its own: queue.lua ran no more than the instance's heartbeats).
    waiting.until_waiters(1).await;
    let looks = proxy.answered(&acquire_sha) + proxy.answered(&plain_sha);
    assert_eq!(looks, 2, "the holder's acquire and the waiter's first look");
    let queue_key = format!("{ns}:queue:v2:{{{P}:{d}}}");
    let entries = server.cli(&["ZRANGE", &queue_key, "0", "-1"]);
    let member = entries
        .lines()
        .find(|m| m.starts_with("x:"))
        .unwrap_or_else(|| panic!("no waiter's entry in {entries:?}"));
    let ask = server.cli(&["HGET", &format!("{ns}:ask:v2:{{{P}:{d}}}"), member]);
    assert!(ask.starts_with("30000|"), "the ask: {ask:?}");
    assert!(ask.ends_with("|waiter"), "the ask: {ask:?}");

    let released = waiting.release(P, &d, &holder).await;
    assert_eq!(released.outcome(), "released", "{:?}", released.body);
    let (status, body) = pending.await.expect("waiter");
    assert_eq!(status, StatusCode::CREATED, "{body:?}");
    assert_eq!(body["outcome"], "acquired");
    assert!(body["waitedMs"].as_u64().is_some(), "{body:?}");
    let lease = &body["lease"];
    let token = lease["fencingToken"].as_u64().expect("fencingToken");
    assert!(token > held.fencing_token(), "{body:?}");
    assert_eq!(lease["holder"], "waiter");
    assert_eq!(lease["ttlMs"], 30_000);
    assert_eq!(lease["acquiredAt"], lease["renewedAt"]);
    assert_eq!(
        proxy.answered(&acquire_sha) + proxy.answered(&plain_sha),
        looks,
        "the grant was answered with another acquire script run"
    );
    // The grant took the entry's ask out and left a grant mark that ends
    // by itself (at the grant's TTL): nothing piles up under a queue that
    // never empties.
    let ask_key = format!("{ns}:ask:v2:{{{P}:{d}}}");
    assert_eq!(server.cli(&["HEXISTS", &ask_key, member]).trim(), "0");
    let (marks, field) = (
        format!("{ns}:granted:v2:{{{P}:{d}}}"),
        format!("p:{}:{}", waiter.token, waiter.op),
    );
    let mark = server.cli(&["HGET", &marks, &field]);
    let (ends, named) = mark.trim().split_once('|').expect("<end ms>|<member>");
    assert_eq!(named, member, "the grant mark names the granted member");
    let mark_ttl: i64 = server.cli(&["PTTL", &marks]).trim().parse().expect("PTTL");
    assert!(
        (1..=30_000).contains(&mark_ttl),
        "grant marks' PTTL {mark_ttl}"
    );
    let ends: u64 = ends.parse().expect("end ms");
    let now_s: u64 = server
        .cli(&["TIME"])
        .lines()
        .next()
        .and_then(|s| s.trim().parse().ok())
        .expect("TIME");
    assert!(
        ends <= (now_s + 1) * 1000 + 30_000,
        "the mark ends with the grant's TTL: {ends}"
    );

    let seen = holding.inspect(P, &d, Some(&waiter)).await;
    assert_eq!(seen.body["heldBy"], "caller", "{:?}", seen.body);
    assert_eq!(seen.body["fencingToken"].as_u64(), Some(token));
    let history = holding.get(&format!("/leases/{P}/{d}/history")).await;
    let entries = history.body["entries"].as_array().expect("entries");
    let newest: Vec<(&str, u64)> = entries
        .iter()
        .take(3)
        .map(|e| {
            let event = e["event"].as_str().expect("event");
            (event, e["fencingToken"].as_u64().expect("fencingToken"))
        })
        .collect();
    assert_eq!(
        newest,
        [
            ("acquired", token),
            ("released", held.fencing_token()),
            ("acquired", held.fencing_token())
        ],
        "{:#}",
        history.body
    );
    // The grantee holds a lease like any other: it renews and releases.
    let renewed = waiting.renew(P, &d, &waiter, 30_000).await;
    assert_eq!(renewed.outcome(), "renewed", "{:?}", renewed.body);

    // The next waiter is on the other instance: woken by this instance's
    // release, it acquires for itself.
    let other = holding.attempt().await;
    let (other_status, other_body) = {
        let pending = waiting_acquire(&holding, &d, &other);
        holding.until_waiters(1).await;
        assert_eq!(waiting.release(P, &d, &waiter).await.outcome(), "released");
        pending.await.expect("other waiter")
    };
    assert_eq!(
        server.cli(&["EXISTS", &mark]).trim(),
        "0",
        "the grant mark outlived the permit's release"
    );
    assert_eq!(other_status, StatusCode::CREATED, "{other_body:?}");
    assert_eq!(other_body["outcome"], "acquired");
    assert!(other_body["lease"]["fencingToken"].as_u64() > Some(token));
}

/// The release grants the head, and the head's caller leaves before its
/// instance hears of the grant (the instance's replies are held back). Its
/// leave finds the entry gone, and the instance releases the grant nobody
/// claimed; the next waiter, on another instance, then acquires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_to_a_departed_waiter_is_released_and_the_next_waiter_granted() {
    let server = RedisServer::start();
    let (queue_sha, release_sha) = (server.script_sha("queue"), server.script_sha("release"));
    let (first_proxy, second_proxy) = (
        FaultProxy::start(server.addr()).await,
        FaultProxy::start(server.addr()).await,
    );
    let ns = unique("ho");
    let first = Arc::new(instance(first_proxy.url(), &ns).await);
    let second = instance(second_proxy.url(), &ns).await;
    let holding = instance(server.url(), &ns).await;
    let d = digest();
    let holder = first.attempt().await;
    let held = first.acquire(P, &d, &holder, 30_000).await;
    assert_eq!(held.outcome(), "acquired", "{:?}", held.body);

    let departed = first.attempt().await;
    let gone = raw_waiting_acquire(&first, &d, &departed).await;
    // Counted once its first look entered it in the queue.
    first.until_waiters(1).await;
    let next = second.attempt().await;
    let pending = waiting_acquire(&second, &d, &next);
    second.until_waiters(1).await;
    // And the first instance's heartbeat ran queue.lua, so Redis has it
    // cached before replies are held back (a NOSCRIPT reload would take
    // three held-back replies: 9 s).
    assert!(
        first_proxy
            .until_answered(&queue_sha, 1, Duration::from_secs(10))
            .await,
        "the first instance never sent a heartbeat"
    );

    // Replies to the first instance are held back (its calls still reach
    // Redis): the release grants the queue's head, the first instance's own
    // waiter, and the grant's message is on its way when the caller leaves.
    first_proxy.set_reply_delay(Duration::from_secs(3));
    let release = {
        let (first, d, holder) = (Arc::clone(&first), d.clone(), holder.clone());
        tokio::spawn(async move { first.release(P, &d, &holder).await })
    };
    let granted = until_held_by(&holding, &d, &departed).await;
    drop(gone);
    // The leave finds the entry gone: the grant nobody claimed is released
    // (the release's own run and the clean-up's).
    assert!(
        first_proxy
            .until_answered(&release_sha, 2, Duration::from_secs(10))
            .await,
        "the departed waiter's grant was never released"
    );
    assert_eq!(release.await.expect("release").outcome(), "released");
    let (status, body) = pending.await.expect("second waiter");
    assert_eq!(status, StatusCode::CREATED, "{body:?}");
    assert_eq!(body["outcome"], "acquired");
    assert!(
        body["lease"]["fencingToken"]
            .as_u64()
            .expect("fencingToken")
            > granted
    );
    let seen = holding.inspect(P, &d, Some(&next)).await;
    assert_eq!(seen.body["heldBy"], "caller", "{:?}", seen.body);
}

/// A waiter's last look at its deadline takes its entry out of the queue
/// in the same script run: right after its `contended` answer no entry or
/// ask of it is left, and a release then grants it nothing (a grant after
/// that answer would be a lease its caller was told it did not get).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_told_contended_at_its_deadline_is_granted_nothing() {
    let server = RedisServer::start();
    let ns = unique("ho");
    let app = instance(server.url(), &ns).await;
    let d = digest();
    let holder = app.attempt().await;
    let held = app.acquire(P, &d, &holder, 30_000).await;
    assert_eq!(held.outcome(), "acquired", "{:?}", held.body);
    let waiter = app.attempt().await;
    let resp = reqwest::Client::new()
        .put(format!("{}/leases/{P}/{d}", app.base))
        .header("Lease-Owner-Token", &waiter.token)
        .header("Lease-Operation-Id", &waiter.op)
        .json(&json!({ "ttlMs": 30_000, "waitMs": 300, "holder": "waiter" }))
        .send()
        .await
        .expect("waiting acquire sent");
    let body: Value = resp.json().await.expect("a JSON answer");
    assert_eq!(body["outcome"], "contended", "{body:?}");
    let entries = server.cli(&["ZRANGE", &format!("{ns}:queue:v2:{{{P}:{d}}}"), "0", "-1"]);
    assert!(
        !entries.lines().any(|m| m.starts_with("x:")),
        "the waiter's entry outlived its answer: {entries:?}"
    );
    let asks = server.cli(&["HLEN", &format!("{ns}:ask:v2:{{{P}:{d}}}")]);
    assert_eq!(asks.trim(), "0", "the waiter's ask outlived its answer");
    let released = app.release(P, &d, &holder).await;
    assert_eq!(released.outcome(), "released", "{:?}", released.body);
    let seen = app.inspect(P, &d, Some(&waiter)).await;
    assert_eq!(seen.body["held"], false, "{:?}", seen.body);
}

/// The same attempt may wait in two entries: its caller left one instance
/// mid-wait and retried on another. A release grants one of them; the
/// other entry's leave must not take the grant for its own, or its
/// instance would release (as nobody's) a lease the retry was told it
/// holds. Found by CI's history check under "callers leave": two holders
/// at once. The grant mark names the granted member; `queue.lua`'s leave
/// is called directly, as each instance calls it.
#[test]
fn a_leave_takes_a_grant_only_for_the_entry_it_was_made_to() {
    let server = RedisServer::start();
    let queue_sha = server.script_sha("queue");
    let (ns, d) = (unique("ho"), digest());
    let tag = format!("{P}:{d}");
    let (queue_key, seq_key) = (
        format!("{ns}:queue:v2:{{{tag}}}"),
        format!("{ns}:seq:v2:{{{tag}}}"),
    );
    let field = "p:token:op";
    let (asks, marks, record) = (
        format!("{ns}:ask:v2:{{{tag}}}"),
        format!("{ns}:granted:v2:{{{tag}}}"),
        format!("{ns}:lease:v2:{{{tag}}}"),
    );
    // As release.lua leaves it after granting instance b's entry.
    let now_s: u64 = server
        .cli(&["TIME"])
        .lines()
        .next()
        .and_then(|s| s.trim().parse().ok())
        .expect("TIME");
    let mark = format!("{}|x:b:1", (now_s + 30) * 1000);
    server.cli(&["HSET", &marks, field, &mark]);
    server.cli(&["PEXPIRE", &marks, "30000"]);
    // KEYS: queue, sequence, asks, grants, record. ARGV: verb, instance,
    // horizon, sequence ttl, channel, tag, member, the asking attempt's
    // permit field, nonce 0 (status 1 is tagged 10).
    let leave = |instance: &str, member: &str| -> Vec<String> {
        server
            .cli(&[
                "EVALSHA",
                &queue_sha,
                "5",
                &queue_key,
                &seq_key,
                &asks,
                &marks,
                &record,
                "leave",
                instance,
                "2000",
                "604800000",
                "wake",
                &tag,
                member,
                field,
                "0",
            ])
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        leave("a", "x:a:1"),
        ["10", "0"],
        "the other entry of the same attempt was granted nothing"
    );
    assert_eq!(
        server.cli(&["HGET", &marks, field]).trim(),
        mark,
        "and left the mark"
    );
    assert_eq!(leave("b", "x:b:1"), ["10", "1"], "the granted entry");
    assert_eq!(
        server.cli(&["HEXISTS", &marks, field]).trim(),
        "0",
        "its mark goes"
    );
}
