//! `GET /leases/{purpose}`: listing a purpose's leases, a page at a time,
//! on the embedded store and on real `redis-server`s (standalone, Cluster,
//! Sentinel).
//!
//! - every listed lease carries its public record, and no answer carries
//!   an owner token or operation id;
//! - `limit`, `cursor` and the purpose are validated, naming the field;
//!   a forged cursor is a 400, never a 500;
//! - paging with limits 1..=7 returns every lease exactly once;
//! - leases coming and going between pages: every lease held throughout
//!   appears exactly once, none released before the listing began appears;
//! - API keys scope listings by purpose;
//! - Cluster: every master's leases, and a listing that goes on through a
//!   failover of every master; Sentinel: the master's;
//! - Redis: a listing resumed on a restarted server starts its SCAN over;
//!   among many other keys, pages do bounded work.
//! - the page size and cursor parsers (proptest): exactly their rule, never
//!   a panic, every issued cursor parses back to itself.

#[allow(unused_imports)]
use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use common::app::{args, digest, unique, Backend, Reply, TestApp, TestAttempt};
use common::redis::{RedisCluster, RedisSentinelSet};
use reqwest::StatusCode;
use serde_json::{json, Value};

const PROBLEM: &str = "application/problem+json";

both_stores!(
    listed_leases_carry_their_public_record_and_no_secrets,
    limit_cursor_and_purpose_are_validated,
    paging_returns_every_lease_exactly_once,
    leases_coming_and_going_between_pages,
);

async fn list(app: &TestApp, purpose: &str, query: &str) -> Reply {
    app.get(&format!("/leases/{purpose}?{query}")).await
}

/// Every page of a listing with `limit`: the digests of each page.
async fn all_pages(app: &TestApp, purpose: &str, limit: usize) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10_000 {
        let query = match &cursor {
            Some(c) => format!("limit={limit}&cursor={c}"),
            None => format!("limit={limit}"),
        };
        let r = list(app, purpose, &query).await;
        assert_eq!(r.status, StatusCode::OK, "{:#}", r.body);
        let page = digests(&r);
        assert!(
            page.len() <= limit,
            "a page of {} for limit {limit}",
            page.len()
        );
        pages.push(page);
        match r.body["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return pages,
        }
    }
    panic!("the listing did not end");
}

fn digests(r: &Reply) -> Vec<String> {
    r.body["leases"]
        .as_array()
        .expect("leases array")
        .iter()
        .map(|l| l["digest"].as_str().expect("digest").to_owned())
        .collect()
}

/// How often each digest was listed.
fn counts(pages: &[Vec<String>]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for d in pages.iter().flatten() {
        *counts.entry(d.clone()).or_insert(0) += 1;
    }
    counts
}

/// `n` leases on `purpose`, each held by its own attempt.
async fn hold(app: &TestApp, purpose: &str, n: usize) -> Vec<(String, TestAttempt)> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let (d, a) = (digest(), app.attempt().await);
        let r = app.acquire(purpose, &d, &a, 60_000).await;
        assert_eq!(r.outcome(), "acquired", "{:#}", r.body);
        held.push((d, a));
    }
    held
}

fn problem_naming(r: &Reply, field: &str) {
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:#}", r.body);
    assert_eq!(r.headers["content-type"].to_str().expect("ascii"), PROBLEM);
    assert_eq!(r.outcome(), "invalid_request");
    let fields: Vec<&str> = r.body["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|e| e["field"].as_str())
        .collect();
    assert_eq!(fields, [field], "{:#}", r.body);
}

async fn listed_leases_carry_their_public_record_and_no_secrets(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let p = unique("record-");
    let held = hold(&app, &p, 2).await;
    let (labelled, labeller) = (digest(), app.attempt().await);
    let r = app
        .acquire_body(
            &p,
            &labelled,
            &labeller,
            &json!({"ttlMs": 30_000, "holder": "worker-7:8080"}),
        )
        .await;
    assert_eq!(r.outcome(), "acquired", "{:#}", r.body);
    // Gone before the listing: released, and another purpose's.
    let (gone, goner) = (digest(), app.attempt().await);
    app.acquire(&p, &gone, &goner, 30_000).await;
    assert_eq!(app.release(&p, &gone, &goner).await.outcome(), "released");
    let elsewhere = hold(&app, &format!("{p}-other"), 1).await;

    let r = app.get(&format!("/leases/{p}")).await;
    assert_eq!(r.status, StatusCode::OK, "{:#}", r.body);
    assert_eq!(r.content_type(), "application/json");
    assert_eq!(r.outcome(), "listed");
    assert!(r.body.get("nextCursor").is_none(), "one page: {:#}", r.body);
    let listed: BTreeMap<String, &Value> = r.body["leases"]
        .as_array()
        .expect("leases")
        .iter()
        .map(|l| (l["digest"].as_str().expect("digest").to_owned(), l))
        .collect();
    let want: BTreeSet<String> = held
        .iter()
        .map(|(d, _)| d.clone())
        .chain([labelled.clone()])
        .collect();
    assert_eq!(listed.keys().cloned().collect::<BTreeSet<_>>(), want);
    for (d, lease) in &listed {
        let inspected = app.inspect(&p, d, None).await.body;
        assert_eq!(lease["fencingToken"], inspected["fencingToken"]);
        assert!(lease["remainingMs"].as_u64().is_some_and(|ms| ms <= 60_000));
        assert!(lease["ttlMs"].as_u64().is_some());
        for at in ["acquiredAt", "renewedAt"] {
            let text = lease[at].as_str().expect("a time");
            assert!(text.ends_with('Z') && text.len() == 24, "{at}: {text}");
            assert_eq!(lease[at], inspected[at]);
        }
        let members: BTreeSet<&str> = lease
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected = BTreeSet::from([
            "digest",
            "fencingToken",
            "remainingMs",
            "ttlMs",
            "acquiredAt",
            "renewedAt",
            "holders",
            "limit",
            "mode",
        ]);
        assert_eq!(
            (lease["holders"].as_u64(), lease["limit"].as_u64()),
            (Some(1), Some(1))
        );
        assert_eq!(lease["mode"], "exclusive");
        if *d == labelled {
            expected.insert("holder");
            assert_eq!(lease["holder"], "worker-7:8080");
            assert_eq!(lease["ttlMs"], 30_000);
        }
        assert_eq!(members, expected);
    }
    // A counting lease held twice: one entry, the oldest holder on top,
    // every holder in `permits`; a shared one likewise.
    let (counted, shared) = (digest(), digest());
    let mut sharers = Vec::new();
    for (d, body) in [
        (
            &counted,
            json!({"ttlMs": 30_000, "limit": 3, "holder": "first"}),
        ),
        (&counted, json!({"ttlMs": 30_000, "limit": 3})),
        (&shared, json!({"ttlMs": 30_000, "mode": "shared"})),
        (&shared, json!({"ttlMs": 30_000, "mode": "shared"})),
    ] {
        let a = app.attempt().await;
        let r = app.acquire_body(&p, d, &a, &body).await;
        assert_eq!(r.outcome(), "acquired", "{:#}", r.body);
        sharers.push((r.fencing_token(), a));
    }
    let r = app.get(&format!("/leases/{p}")).await;
    let all = r.body["leases"].as_array().expect("leases");
    assert_eq!(all.len(), 5, "{:#}", r.body);
    let entry = |d: &str| {
        all.iter()
            .find(|l| l["digest"] == d)
            .unwrap_or_else(|| panic!("{d} listed"))
    };
    let c = entry(&counted);
    assert_eq!(
        (c["holders"].as_u64(), c["limit"].as_u64()),
        (Some(2), Some(3))
    );
    assert_eq!(c["mode"], "exclusive");
    assert_eq!(
        c["fencingToken"].as_u64(),
        Some(sharers[0].0),
        "the oldest on top"
    );
    assert_eq!(c["holder"], "first");
    let tokens: Vec<u64> = c["permits"]
        .as_array()
        .expect("permits")
        .iter()
        .filter_map(|p| p["fencingToken"].as_u64())
        .collect();
    assert_eq!(tokens, [sharers[0].0, sharers[1].0]);
    let s = entry(&shared);
    assert_eq!(
        (s["holders"].as_u64(), s["mode"].as_str()),
        (Some(2), Some("shared"))
    );
    assert_eq!(s["permits"].as_array().map(Vec::len), Some(2));

    let text = r.body.to_string();
    for (_, a) in sharers.iter() {
        assert!(!text.contains(&a.token) && !text.contains(&a.op));
    }
    for (_, a) in held.iter().chain(&elsewhere) {
        assert!(!text.contains(&a.token) && !text.contains(&a.op));
    }
    assert!(!text.contains(&labeller.token) && !text.contains(&labeller.op));
}

async fn limit_cursor_and_purpose_are_validated(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let p = unique("valid-");
    hold(&app, &p, 3).await;
    for query in [
        "limit=0",
        "limit=1001",
        "limit=abc",
        "limit=",
        "limit=-1",
        "limit=1.5",
        "limit=2&limit=3",
    ] {
        problem_naming(&list(&app, &p, query).await, "limit");
    }
    assert_eq!(list(&app, &p, "limit=1000").await.status, StatusCode::OK);
    let enc = |s: &str| URL_SAFE_NO_PAD.encode(s);
    let d = digest();
    let other_store = match backend {
        Backend::Memory => enc(&format!("{p}/s/0/abc/5")),
        Backend::Redis(_) => enc(&format!("{p}/a/{d}")),
    };
    for cursor in [
        String::new(),
        "not base64!".into(),
        "%ff".into(),
        enc("garbage"),
        enc(&format!("{p}/a/{d}/extra")),
        enc(&format!("{p}/s/99999/abc/5")),
        enc(&format!("{p}/s/0/XYZ/5")),
        enc(&format!("{p}-other/a/{d}")),
        "A".repeat(7000),
        other_store,
    ] {
        problem_naming(&list(&app, &p, &format!("cursor={cursor}")).await, "cursor");
    }
    // A real cursor, sent back for another purpose.
    let first = list(&app, &p, "limit=1").await;
    let next = first.body["nextCursor"].as_str().expect("a next cursor");
    problem_naming(
        &list(&app, "another", &format!("cursor={next}")).await,
        "cursor",
    );
    for bad in ["Upper", "1abc", "a_b", &"a".repeat(64)] {
        problem_naming(&app.get(&format!("/leases/{bad}")).await, "purpose");
    }
    // A well-formed cursor this store issues but no listing did: never a
    // 5xx (Redis: a SCAN of an unknown process starts that node over).
    let forged = match backend {
        Backend::Memory => enc(&format!("{p}/a/{d}")),
        Backend::Redis(_) => enc(&format!("{p}/s/0/0123456789abcdef/12345")),
    };
    let r = list(&app, &p, &format!("cursor={forged}")).await;
    assert_eq!(r.status, StatusCode::OK, "{:#}", r.body);
    // Unknown parameters are ignored.
    assert_eq!(list(&app, &p, "nope=1").await.status, StatusCode::OK);
}

async fn paging_returns_every_lease_exactly_once(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let p = unique("paging-");
    let held: BTreeSet<String> = hold(&app, &p, 23)
        .await
        .into_iter()
        .map(|(d, _)| d)
        .collect();
    hold(&app, &format!("{p}x"), 3).await;
    for limit in 1..=7 {
        let pages = all_pages(&app, &p, limit).await;
        let counts = counts(&pages);
        assert_eq!(
            counts.keys().cloned().collect::<BTreeSet<_>>(),
            held,
            "limit {limit}"
        );
        assert!(
            counts.values().all(|n| *n == 1),
            "limit {limit}: repeated {counts:?}"
        );
    }
    // The default page holds them all.
    let r = app.get(&format!("/leases/{p}")).await;
    assert_eq!(digests(&r).len(), 23);
    assert!(r.body.get("nextCursor").is_none());
}

/// Leases held throughout appear exactly once across the pages, those
/// released before the listing began never, whatever else comes and goes
/// between pages. (On Redis, SCAN may repeat a key when the keyspace
/// shrinks to a tenth of its table; here it never falls that low.)
async fn leases_coming_and_going_between_pages(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let p = unique("churn-");
    let stable: BTreeSet<String> = hold(&app, &p, 30)
        .await
        .into_iter()
        .map(|(d, _)| d)
        .collect();
    let mut transient = hold(&app, &p, 12).await;
    let released_before = hold(&app, &p, 5).await;
    for (d, a) in &released_before {
        assert_eq!(app.release(&p, d, a).await.outcome(), "released");
    }
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    let mut arrived = BTreeSet::new();
    loop {
        let query = match &cursor {
            Some(c) => format!("limit=4&cursor={c}"),
            None => "limit=4".to_owned(),
        };
        let r = list(&app, &p, &query).await;
        assert_eq!(r.status, StatusCode::OK, "{:#}", r.body);
        pages.push(digests(&r));
        // Between pages: one lease goes, another comes.
        if let Some((d, a)) = transient.pop() {
            assert_eq!(app.release(&p, &d, &a).await.outcome(), "released");
        }
        for (d, _) in hold(&app, &p, 1).await {
            arrived.insert(d);
        }
        match r.body["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    let counts = counts(&pages);
    for d in &stable {
        assert_eq!(counts.get(d), Some(&1), "held throughout: {d}");
    }
    for (d, _) in &released_before {
        assert!(!counts.contains_key(d), "released before the listing: {d}");
    }
    assert!(
        counts.values().all(|n| *n == 1),
        "nothing listed twice: {counts:?}"
    );
    assert!(pages.len() >= 8, "{} pages", pages.len());
    let _ = arrived; // may or may not be listed: they came during the listing
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_scope_listings_by_purpose() {
    let dir = std::env::temp_dir().join(unique("leasehold-list-keys-"));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("keys");
    let (scoped, admin) = (
        unique("scoped-key-0123456789-"),
        unique("admin-key-0123456789-"),
    );
    std::fs::write(&file, format!("{scoped} mine\n{admin} *\n")).expect("write keys");
    let app = TestApp::spawn_with(args(
        &Backend::Memory,
        &["--api-keys-file", file.to_str().expect("utf-8 path")],
    ))
    .await;
    let get = |purpose: &str, key: Option<&str>| {
        let mut rb = app.http.get(format!("{}/leases/{purpose}", app.base));
        if let Some(key) = key {
            rb = rb.header("authorization", format!("Bearer {key}"));
        }
        rb
    };
    let send = |rb: reqwest::RequestBuilder| async move {
        TestApp::reply(rb.send().await.expect("send")).await
    };
    let r = send(get("mine", None)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.outcome(), "unauthorized");
    let r = send(get("theirs", Some(&scoped))).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:#}", r.body);
    assert_eq!(r.outcome(), "forbidden");
    assert_eq!(send(get("mine", Some(&scoped))).await.outcome(), "listed");
    assert_eq!(send(get("theirs", Some(&admin))).await.outcome(), "listed");
    // A bad query is refused only once the caller is known.
    let r = send(app.http.get(format!("{}/leases/mine?limit=0", app.base))).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_lists_every_masters_leases() {
    let cluster = RedisCluster::start(3, 0);
    let app = TestApp::spawn_with(args(
        &Backend::Memory,
        &["--redis-cluster-nodes", &cluster.seed_urls()[0]],
    ))
    .await;
    let p = unique("cluster-");
    let held: BTreeSet<String> = hold(&app, &p, 30)
        .await
        .into_iter()
        .map(|(d, _)| d)
        .collect();
    let pattern = format!("{}:lease:v2:*", app.namespace);
    for master in cluster.masters() {
        let keys = master.cli(&["KEYS", &pattern]);
        assert!(
            keys.lines().any(|l| !l.is_empty()),
            "master {} holds none of 30 leases",
            master.port()
        );
    }
    for limit in [1, 4, 7, 100] {
        let pages = all_pages(&app, &p, limit).await;
        let counts = counts(&pages);
        assert_eq!(
            counts.keys().cloned().collect::<BTreeSet<_>>(),
            held,
            "limit {limit}"
        );
        assert!(
            counts.values().all(|n| *n == 1),
            "limit {limit}: {counts:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_lists_the_masters_leases() {
    let set = RedisSentinelSet::start(0, 1);
    let app = TestApp::spawn_with(args(
        &Backend::Memory,
        &[
            "--redis-sentinels",
            &set.sentinel_urls().join(","),
            "--redis-sentinel-master",
            set.master_name(),
        ],
    ))
    .await;
    let p = unique("sentinel-");
    let held: BTreeSet<String> = hold(&app, &p, 9)
        .await
        .into_iter()
        .map(|(d, _)| d)
        .collect();
    let pages = all_pages(&app, &p, 2).await;
    let counts = counts(&pages);
    assert_eq!(counts.keys().cloned().collect::<BTreeSet<_>>(), held);
    assert!(counts.values().all(|n| *n == 1), "{counts:?}");
}

/// Answers of an app whose Redis just restarted: the first calls on dead
/// connections are `unavailable`; retried (bounded) until a lease is held.
async fn hold_after_restart(app: &TestApp, purpose: &str, n: usize) -> Vec<String> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let (d, a) = (digest(), app.attempt().await);
        let mut tries = 0;
        loop {
            let r = app.acquire(purpose, &d, &a, 60_000).await;
            if r.outcome() == "acquired" {
                break;
            }
            tries += 1;
            assert!(tries < 50, "no lease after the restart: {:#}", r.body);
            assert_eq!(r.outcome(), "unavailable", "{:#}", r.body);
        }
        held.push(d);
    }
    held
}

/// A SCAN cursor means nothing to another process: after a restart the
/// listing goes on (no 5xx), that node's SCAN starts over, and every lease
/// held there now is listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_resumed_on_a_restarted_redis_starts_its_scan_over() {
    let mut server = common::redis::RedisServer::start();
    let app = TestApp::spawn(&Backend::Redis(server.url())).await;
    let p = unique("restart-");
    let before: BTreeSet<String> = hold(&app, &p, 60)
        .await
        .into_iter()
        .map(|(d, _)| d)
        .collect();
    let mut cursor = None;
    for _ in 0..3 {
        let query = match &cursor {
            Some(c) => format!("limit=5&cursor={c}"),
            None => "limit=5".to_owned(),
        };
        let r = list(&app, &p, &query).await;
        cursor = Some(
            r.body["nextCursor"]
                .as_str()
                .expect("more pages")
                .to_owned(),
        );
    }
    tokio::task::block_in_place(|| server.restart());
    let after: BTreeSet<String> = hold_after_restart(&app, &p, 20).await.into_iter().collect();
    let mut listed = BTreeMap::new();
    while let Some(c) = cursor.take() {
        let r = list(&app, &p, &format!("limit=5&cursor={c}")).await;
        assert_eq!(r.status, StatusCode::OK, "{:#}", r.body);
        for d in digests(&r) {
            *listed.entry(d).or_insert(0) += 1;
        }
        cursor = r.body["nextCursor"].as_str().map(str::to_owned);
    }
    assert_eq!(listed.keys().cloned().collect::<BTreeSet<_>>(), after);
    assert!(before.is_disjoint(&after));
}

/// A purpose with few leases among many other keys: pages do bounded work
/// (some come back short, with a cursor), and the listing still ends with
/// every lease exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_do_bounded_work_among_many_other_keys() {
    let server = common::redis::RedisServer::start();
    server.cli(&[
        "EVAL",
        "for i = 1, 20000 do redis.call('SET', 'filler:' .. i, 'x') end",
        "0",
    ]);
    let app = TestApp::spawn(&Backend::Redis(server.url())).await;
    let p = unique("sparse-");
    let held: BTreeSet<String> = hold(&app, &p, 150)
        .await
        .into_iter()
        .map(|(d, _)| d)
        .collect();
    // 1000: a page reads more keys than one batch of reads.
    for limit in [100, 1000] {
        let pages = all_pages(&app, &p, limit).await;
        let counts = counts(&pages);
        assert_eq!(counts.keys().cloned().collect::<BTreeSet<_>>(), held);
        assert!(counts.values().all(|n| *n == 1), "{counts:?}");
        assert!(
            pages.len() > 1,
            "20 000 keys need more than one page's SCAN budget"
        );
        assert!(
            pages.iter().any(|p| p.len() < limit.min(held.len())),
            "a page cut short by its budget"
        );
    }
}

/// One page, retried while the service answers `unavailable` (a Cluster
/// failover: the old master's connections fail until the slot map is read
/// again); bounded.
async fn page_through_failover(app: &TestApp, p: &str, query: &str) -> Reply {
    for _ in 0..200 {
        let r = list(app, p, query).await;
        if r.status != StatusCode::SERVICE_UNAVAILABLE {
            assert_eq!(r.status, StatusCode::OK, "{:#}", r.body);
            return r;
        }
        assert_eq!(r.outcome(), "unavailable", "{:#}", r.body);
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("the listing stayed unavailable after the failover");
}

/// Every master fails over once while a listing runs (the masters are
/// listed in the order of their lowest slot, which a failover keeps; the
/// promoted replica is another process, so its SCAN starts over): the
/// listing goes on, ends, and lists every lease held throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_listing_goes_on_through_failovers() {
    let cluster = RedisCluster::start(3, 1);
    let app = TestApp::spawn_with(args(
        &Backend::Memory,
        &["--redis-cluster-nodes", &cluster.seed_urls().join(",")],
    ))
    .await;
    let p = unique("failover-");
    let held: BTreeSet<String> = hold(&app, &p, 45)
        .await
        .into_iter()
        .map(|(d, _)| d)
        .collect();
    let replicas: Vec<u16> = cluster.replicas().iter().map(|r| r.port()).collect();
    let mut listed = BTreeMap::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let query = match &cursor {
            Some(c) => format!("limit=4&cursor={c}"),
            None => "limit=4".to_owned(),
        };
        let r = page_through_failover(&app, &p, &query).await;
        for d in digests(&r) {
            *listed.entry(d).or_insert(0) += 1;
        }
        pages += 1;
        // After pages 2, 5 and 8: the next replica takes over its master.
        if pages % 3 == 2 && pages / 3 < replicas.len() {
            let port = replicas[pages / 3];
            tokio::task::block_in_place(|| {
                let at = cluster
                    .replicas()
                    .iter()
                    .position(|r| r.port() == port)
                    .expect("still a replica");
                cluster.failover_replica(at);
            });
        }
        match r.body["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert!(pages >= 9, "{pages} pages");
    assert_eq!(listed.keys().cloned().collect::<BTreeSet<_>>(), held);
}

mod parsers {
    //! The page size and cursor parsers: exactly their rule, never a
    //! panic, and every cursor the service issues parses back to itself.

    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    use leasehold::domain::{ListCursor, ListLimit, Purpose, ResourceDigest, ScanPosition};
    use proptest::prelude::*;

    fn purpose() -> Purpose {
        Purpose::parse("invoice-export").expect("purpose")
    }

    proptest! {
        #[test]
        fn limit_is_one_to_four_digits_from_1_to_1000(s in "[0-9+ -]{0,6}|[0-9]{1,5}") {
            let rule = (1..=4).contains(&s.len())
                && s.bytes().all(|b| b.is_ascii_digit())
                && s.parse::<u32>().is_ok_and(|n| (1..=1000).contains(&n));
            prop_assert_eq!(ListLimit::parse(&s).is_ok(), rule, "{:?}", s);
        }

        #[test]
        fn any_text_or_bytes_as_a_cursor_is_parsed_or_refused(
            text in any::<String>(),
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            for raw in [text, URL_SAFE_NO_PAD.encode(&bytes)] {
                if let Ok(cursor) = ListCursor::parse(&raw, &purpose()) {
                    // What parses is canonical: it encodes back to itself.
                    prop_assert_eq!(cursor.encode(&purpose()), raw);
                }
            }
        }

        #[test]
        fn scan_positions_round_trip(
            shard in 0u16..=16384,
            node in "[0-9a-f]{1,16}",
            scan in any::<u64>(),
            raw_ids in proptest::collection::vec(any::<String>(), 0..=64),
        ) {
            let cursor = ListCursor::Scan(ScanPosition {
                shard,
                node,
                scan,
                pending: raw_ids.iter().map(|r| ResourceDigest::of_raw_id(r)).collect(),
            });
            let text = cursor.encode(&purpose());
            prop_assert_eq!(ListCursor::parse(&text, &purpose()), Ok(cursor));
            let other = Purpose::parse("other").expect("purpose");
            prop_assert!(ListCursor::parse(&text, &other).is_err());
        }
    }
}
