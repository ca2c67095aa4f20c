//! Prometheus metrics: a real lease cycle (embedded store and a real
//! redis-server) moves the counters and histograms by exactly what happened;
//! label values stay bounded; `/metrics` can move to its own listener.
//!
//! The recorder is process-global, so the tests of this binary take turns
//! (`SERIAL`) and compare before/after deltas; each uses its own purposes.

#[allow(unused_imports)]
use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::app::{args, digest, unique, Backend, TestApp};
use common::redis::RedisServer;
use reqwest::StatusCode;
use serde_json::json;

mod allocations;
mod contention;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One scrape: every sample by name and labels.
#[derive(Debug)]
struct Scrape {
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
    text: String,
}

impl Scrape {
    fn parse(text: &str) -> Scrape {
        let mut samples = Vec::new();
        for line in text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let (series, value) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad sample line: {line}"));
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("bad value in: {line}")),
            };
            let (name, labels) = match series.split_once('{') {
                None => (series.to_owned(), BTreeMap::new()),
                Some((name, rest)) => {
                    let body = rest
                        .strip_suffix('}')
                        .unwrap_or_else(|| panic!("bad labels in: {line}"));
                    let labels = body
                        .split("\",")
                        .filter(|kv| !kv.is_empty())
                        .map(|kv| {
                            let (k, v) = kv
                                .split_once('=')
                                .unwrap_or_else(|| panic!("bad label in: {line}"));
                            (k.to_owned(), v.trim_matches('"').to_owned())
                        })
                        .collect();
                    (name.to_owned(), labels)
                }
            };
            samples.push((name, labels, value));
        }
        Scrape {
            samples,
            text: text.to_owned(),
        }
    }

    /// Sum of the samples of `name` whose labels include all of `want`.
    fn sum(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|(n, labels, _)| {
                n == name
                    && want
                        .iter()
                        .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, _, v)| v)
            .sum()
    }
}

async fn scrape(app: &TestApp) -> Scrape {
    let r = app
        .http
        .get(format!("{}/metrics", app.base))
        .send()
        .await
        .expect("scrape");
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    Scrape::parse(&r.text().await.expect("text"))
}

/// `after - before` for one series selection.
fn delta(before: &Scrape, after: &Scrape, name: &str, want: &[(&str, &str)]) -> f64 {
    after.sum(name, want) - before.sum(name, want)
}

const OPS: &str = "leasehold_lease_operations_total";
const OP_SECONDS: &str = "leasehold_lease_operation_duration_seconds";
const STORE_SECONDS: &str = "leasehold_store_command_duration_seconds";
const HTTP: &str = "leasehold_http_requests_total";
const HTTP_SECONDS: &str = "leasehold_http_request_duration_seconds";
const LEASE_ROUTE: &str = "/leases/{purpose}/{digest}";
const WATCH_ROUTE: &str = "/leases/{purpose}/{digest}/events";

/// A histogram moved by exactly `n` observations: `_count` and the `+Inf`
/// bucket by `n`, `_sum` by a positive amount, every bucket by at most `n`,
/// buckets cumulative.
fn assert_histogram_moved(
    before: &Scrape,
    after: &Scrape,
    name: &str,
    want: &[(&str, &str)],
    n: f64,
) {
    assert_histogram_counted(before, after, name, want, n);
    if n > 0.0 {
        assert!(
            delta(before, after, &format!("{name}_sum"), want) > 0.0,
            "{name}_sum{want:?}"
        );
    }
}

/// [`assert_histogram_moved`] for observations that may all be 0: `_sum`
/// need only not go down.
fn assert_histogram_counted(
    before: &Scrape,
    after: &Scrape,
    name: &str,
    want: &[(&str, &str)],
    n: f64,
) {
    let count = delta(before, after, &format!("{name}_count"), want);
    assert_eq!(count, n, "{name}_count{want:?}");
    let mut inf = want.to_vec();
    inf.push(("le", "+Inf"));
    assert_eq!(
        delta(before, after, &format!("{name}_bucket"), &inf),
        n,
        "{name} +Inf bucket{want:?}"
    );
    assert!(
        delta(before, after, &format!("{name}_sum"), want) >= 0.0,
        "{name}_sum{want:?}"
    );
    let mut buckets: Vec<(f64, f64)> = after
        .samples
        .iter()
        .filter(|(s, labels, _)| {
            *s == format!("{name}_bucket")
                && want
                    .iter()
                    .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, labels, v)| {
            let le = labels["le"].as_str();
            (
                if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().expect("le")
                },
                *v,
            )
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(
        buckets.len() >= 10,
        "{name}: a real histogram with buckets, got {buckets:?}"
    );
    assert!(
        buckets.windows(2).all(|w| w[0].1 <= w[1].1),
        "{name}: buckets are cumulative: {buckets:?}"
    );
}

async fn lease_cycle_moves_metrics_exactly(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let purpose = unique("metrics-");
    let p = purpose.as_str();
    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    let before = scrape(&app).await;

    assert_eq!(app.acquire(p, &d, &a, 30_000).await.outcome(), "acquired");
    assert_eq!(
        app.acquire(p, &d, &a, 30_000).await.outcome(),
        "replayed_same_operation"
    );
    assert_eq!(app.acquire(p, &d, &b, 30_000).await.outcome(), "contended");
    assert_eq!(app.inspect(p, &d, None).await.outcome(), "inspected");
    assert_eq!(app.inspect(p, &d, Some(&a)).await.outcome(), "inspected");
    assert_eq!(app.renew(p, &d, &a, 30_000).await.outcome(), "renewed");
    assert_eq!(app.renew(p, &d, &b, 30_000).await.outcome(), "lost");
    assert_eq!(app.release(p, &d, &b).await.outcome(), "not_owner");
    assert_eq!(app.release(p, &d, &a).await.outcome(), "released");
    assert_eq!(app.release(p, &d, &a).await.outcome(), "already_absent");
    // Refused before the service: an HTTP answer, no lease operation.
    assert_eq!(app.acquire(p, &d, &a, 5).await.outcome(), "invalid_request");
    let c = app.attempt().await;

    let after = scrape(&app).await;
    let ops = |verb: &str, outcome: &str| {
        delta(
            &before,
            &after,
            OPS,
            &[("verb", verb), ("outcome", outcome), ("purpose", p)],
        )
    };
    let expected = [
        ("acquire", "acquired", 1.0),
        ("acquire", "replayed_same_operation", 1.0),
        ("acquire", "contended", 1.0),
        ("inspect", "inspected", 2.0),
        ("renew", "renewed", 1.0),
        ("renew", "lost", 1.0),
        ("release", "not_owner", 1.0),
        ("release", "released", 1.0),
        ("release", "already_absent", 1.0),
    ];
    for (verb, outcome, n) in expected {
        assert_eq!(ops(verb, outcome), n, "{verb}/{outcome}");
    }
    assert_eq!(
        delta(&before, &after, OPS, &[("purpose", p)]),
        10.0,
        "nothing else counted for this purpose"
    );
    assert_eq!(
        delta(
            &before,
            &after,
            OPS,
            &[("verb", "attempt"), ("outcome", "attempt_created")]
        ),
        1.0
    );

    for (verb, n) in [
        ("acquire", 3.0),
        ("inspect", 2.0),
        ("renew", 2.0),
        ("release", 3.0),
    ] {
        assert_histogram_moved(&before, &after, OP_SECONDS, &[("verb", verb)], n);
    }
    match backend {
        Backend::Redis(_) => {
            // Each script run timed under its verb's name. A plain
            // lease's call runs the slim script (lua/plain_*.lua), which
            // hands what it does not decide to the general one, a second
            // run: the replay (acquire), the renew of someone else's lease
            // (renew), and the release of someone else's and of nothing
            // (release). 10 store calls, 14 runs.
            for (script, n) in [
                ("acquire", 4.0),
                ("inspect", 2.0),
                ("renew", 3.0),
                ("release", 5.0),
            ] {
                assert_histogram_moved(&before, &after, STORE_SECONDS, &[("script", script)], n);
            }
            // Every call counted; their sum may stay 0: a call that reuses
            // the last connection waits for nothing and records 0.
            assert_histogram_counted(
                &before,
                &after,
                "leasehold_store_pool_wait_seconds",
                &[],
                14.0,
            );
            assert!(
                after.sum("leasehold_store_pool_connections", &[("state", "idle")]) >= 1.0,
                "{}",
                after.text
            );
            assert_eq!(
                after.sum("leasehold_store_pool_connections", &[("state", "in_use")]),
                0.0
            );
        }
        // The embedded store has no scripts or pool to time.
        Backend::Memory => {}
    }

    let http = |method: &str, route: &str, status: &str| {
        delta(
            &before,
            &after,
            HTTP,
            &[("method", method), ("route", route), ("status", status)],
        )
    };
    assert_eq!(http("PUT", LEASE_ROUTE, "201"), 1.0);
    assert_eq!(http("PUT", LEASE_ROUTE, "200"), 1.0);
    assert_eq!(http("PUT", LEASE_ROUTE, "409"), 1.0);
    assert_eq!(http("PUT", LEASE_ROUTE, "422"), 1.0);
    assert_eq!(http("GET", LEASE_ROUTE, "200"), 2.0);
    assert_eq!(http("PATCH", LEASE_ROUTE, "200"), 1.0);
    assert_eq!(http("PATCH", LEASE_ROUTE, "409"), 1.0);
    assert_eq!(http("DELETE", LEASE_ROUTE, "409"), 1.0);
    assert_eq!(http("DELETE", LEASE_ROUTE, "200"), 2.0);
    assert_eq!(http("POST", "/attempts", "201"), 1.0);
    assert_eq!(
        http("GET", "/metrics", "200"),
        1.0,
        "the first scrape counts itself once it is answered"
    );
    assert_histogram_moved(
        &before,
        &after,
        HTTP_SECONDS,
        &[("method", "PUT"), ("route", LEASE_ROUTE)],
        4.0,
    );
    assert_histogram_moved(
        &before,
        &after,
        HTTP_SECONDS,
        &[("method", "POST"), ("route", "/attempts")],
        1.0,
    );

    // Nothing secret or unbounded in any label.
    for (name, labels, _) in &after.samples {
        assert!(name.starts_with("leasehold_"), "{name}");
        for value in labels.values() {
            assert!(
                !value.contains(&d) && !value.contains("v1."),
                "digest in {name}{labels:?}"
            );
            for secret in [&a.token, &b.token, &c.token, &a.op, &b.op, &c.op] {
                assert!(
                    !value.contains(secret.as_str()),
                    "token or operation id in {name}{labels:?}"
                );
            }
            // Route templates only (this process's other tests also hit
            // `/leases/{purpose}/{digest}/break`): never a raw path.
            assert!(
                !value.starts_with("/leases/") || value.starts_with("/leases/{purpose}"),
                "raw path in {name}{labels:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_lease_cycle_moves_metrics_exactly() {
    let _turn = SERIAL.lock().await;
    lease_cycle_moves_metrics_exactly(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lease_cycle_moves_metrics_exactly() {
    let _turn = SERIAL.lock().await;
    let server = RedisServer::start();
    lease_cycle_moves_metrics_exactly(Backend::Redis(server.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_family_has_help_type_and_base_units() {
    let _turn = SERIAL.lock().await;
    let app = TestApp::spawn(&Backend::Memory).await;
    let s = scrape(&app).await;
    let mut families = BTreeMap::new();
    for line in s.text.lines() {
        let mut words = line.splitn(4, ' ');
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some("#"), Some("HELP"), Some(name), Some(help)) => {
                assert!(!help.trim().is_empty(), "{name} has empty help");
                families.entry(name.to_owned()).or_insert((false, None)).0 = true;
            }
            (Some("#"), Some("TYPE"), Some(name), Some(kind)) => {
                families.entry(name.to_owned()).or_insert((false, None)).1 = Some(kind.to_owned());
            }
            _ => {}
        }
    }
    for (name, (help, kind)) in &families {
        assert!(help, "{name}: no HELP");
        match kind.as_deref() {
            Some("counter") => assert!(name.ends_with("_total"), "{name}: counters end in _total"),
            Some("histogram") => assert!(
                name.ends_with("_seconds"),
                "{name}: histograms are in seconds"
            ),
            Some("gauge") => {}
            other => panic!("{name}: unexpected type {other:?}"),
        }
    }
    assert_eq!(
        s.sum(
            "leasehold_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    assert!(
        families.contains_key("leasehold_waiters"),
        "{:?}",
        families.keys()
    );
    assert!(families.contains_key("leasehold_build_info"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purposes_beyond_the_cap_are_counted_as_other() {
    let _turn = SERIAL.lock().await;
    let app = TestApp::spawn_with(args(&Backend::Memory, &["--max-purpose-labels", "2"])).await;
    let purposes: Vec<String> = (0..4).map(|_| unique("cap-")).collect();
    let before = scrape(&app).await;
    for p in &purposes {
        let a = app.attempt().await;
        assert_eq!(
            app.acquire(p, &digest(), &a, 30_000).await.outcome(),
            "acquired"
        );
    }
    // The first two purposes seen keep their label, even when seen again.
    let a = app.attempt().await;
    assert_eq!(
        app.acquire(&purposes[0], &digest(), &a, 30_000)
            .await
            .outcome(),
        "acquired"
    );
    let after = scrape(&app).await;
    let acquired = |purpose: &str| {
        delta(
            &before,
            &after,
            OPS,
            &[
                ("verb", "acquire"),
                ("outcome", "acquired"),
                ("purpose", purpose),
            ],
        )
    };
    assert_eq!(acquired(&purposes[0]), 2.0);
    assert_eq!(acquired(&purposes[1]), 1.0);
    assert_eq!(acquired(&purposes[2]), 0.0);
    assert_eq!(acquired(&purposes[3]), 0.0);
    assert_eq!(acquired("other"), 2.0);
    assert!(!after.text.contains(&purposes[2]) && !after.text.contains(&purposes[3]));
}

/// The front computes the route label before routing; it must name exactly
/// the template the router matched, and `unmatched` exactly when the router
/// answered with its 404 fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_labels_are_the_templates_the_router_matched() {
    let _turn = SERIAL.lock().await;
    let app = TestApp::spawn(&Backend::Memory).await;
    let d = digest();
    let cases: Vec<(&str, String, &str)> = vec![
        ("GET", format!("/leases/route-label/{d}"), LEASE_ROUTE),
        ("GET", "/leases/route-label/v1.bad".into(), LEASE_ROUTE),
        ("GET", format!("/leases/route%2Flabel/{d}"), LEASE_ROUTE),
        ("POST", format!("/leases/route-label/{d}"), LEASE_ROUTE),
        ("GET", format!("/leases/route-label/{d}/"), "unmatched"),
        ("GET", format!("/leases/route-label/{d}/x"), "unmatched"),
        ("GET", format!("/leases//{d}"), LEASE_ROUTE),
        ("GET", "/leases/route-label/".into(), "unmatched"),
        ("GET", "/leases//".into(), "unmatched"),
        ("GET", "/leases///".into(), "unmatched"),
        ("GET", "/leases/route-label".into(), "/leases/{purpose}"),
        ("GET", "/leases".into(), "unmatched"),
        ("GET", format!("/LEASES/route-label/{d}"), "unmatched"),
        // The event stream (a valid one would stream for ever: 400 and 405 here).
        (
            "GET",
            "/leases/route-label/v1.bad/events".into(),
            WATCH_ROUTE,
        ),
        (
            "POST",
            format!("/leases/route-label/{d}/events"),
            WATCH_ROUTE,
        ),
        ("GET", "/leases//v1.bad/events".into(), WATCH_ROUTE),
        ("GET", "/leases/route-label//events".into(), WATCH_ROUTE),
        (
            "GET",
            format!("/leases/route-label/{d}/events/"),
            "unmatched",
        ),
        (
            "GET",
            format!("/leases/route-label/{d}/events/x"),
            "unmatched",
        ),
        ("GET", format!("/leases/route-label/{d}/other"), "unmatched"),
        ("GET", "/livez".into(), "/livez"),
        ("GET", "/livez/".into(), "unmatched"),
        ("GET", "/readyz".into(), "/readyz"),
        ("GET", "/openapi.json".into(), "/openapi.json"),
        ("GET", "/docs".into(), "/docs"),
        ("GET", "/console".into(), "/console"),
        ("GET", "/console/app.css".into(), "/console/app.css"),
        ("GET", "/console/".into(), "unmatched"),
        ("GET", "/purposes".into(), "/purposes"),
        ("GET", "/attempts".into(), "/attempts"),
        ("GET", "/attempts/".into(), "unmatched"),
        ("GET", "/".into(), "unmatched"),
        ("GET", "/nope".into(), "unmatched"),
    ];
    for (method, path, route) in &cases {
        let before = scrape(&app).await;
        let reply = TestApp::reply(
            app.http
                .request(
                    method.parse().expect("method"),
                    format!("{}{path}", app.base),
                )
                .send()
                .await
                .expect("send"),
        )
        .await;
        let fallback = reply.status == StatusCode::NOT_FOUND && reply.outcome() == "not_found";
        assert_eq!(
            fallback,
            *route == "unmatched",
            "{method} {path}: router fallback {fallback}, expected route {route}"
        );
        let after = scrape(&app).await;
        let status = reply.status.as_u16().to_string();
        assert_eq!(
            delta(
                &before,
                &after,
                HTTP,
                &[("method", method), ("route", route), ("status", &status)]
            ),
            1.0,
            "{method} {path} ({status}) counted under route {route}"
        );
    }
}

/// Scrapes until `probe` holds (a server-side effect), within a bound.
async fn scrape_until(app: &TestApp, what: &str, probe: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let s = scrape(app).await;
        if probe(&s) {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} within 10 s:\n{}",
            s.text
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_gauge_follows_server_side_waits() {
    let _turn = SERIAL.lock().await;
    let app = TestApp::spawn(&Backend::Memory).await;
    let p = unique("waiters-");
    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    let base = scrape(&app).await.sum("leasehold_waiters", &[]);
    assert_eq!(app.acquire(&p, &d, &a, 30_000).await.outcome(), "acquired");
    let waiter = {
        let (http, url) = (app.http.clone(), format!("{}/leases/{p}/{d}", app.base));
        let b = b.clone();
        tokio::spawn(async move {
            let r = http
                .put(url)
                .header("Lease-Owner-Token", &b.token)
                .header("Lease-Operation-Id", &b.op)
                .json(&json!({"ttlMs": 30000, "waitMs": 10000}))
                .send()
                .await
                .expect("send");
            TestApp::reply(r).await
        })
    };
    scrape_until(&app, "one more waiter", |s| {
        s.sum("leasehold_waiters", &[]) == base + 1.0
    })
    .await;
    assert_eq!(app.release(&p, &d, &a).await.outcome(), "released");
    let r = waiter.await.expect("waiter");
    assert_eq!(r.outcome(), "acquired", "{:#}", r.body);
    assert!(r.body["waitedMs"].as_u64().is_some());
    let s = scrape(&app).await;
    assert_eq!(s.sum("leasehold_waiters", &[]), base, "the waiter left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_can_move_to_their_own_listener() {
    let _turn = SERIAL.lock().await;
    let api = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind api");
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind metrics");
    let (api_addr, metrics_addr) = (
        api.local_addr().expect("addr"),
        metrics.local_addr().expect("addr"),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(leasehold::run_with(
        api,
        Some(metrics),
        args(&Backend::Memory, &[])
            .validate()
            .expect("valid settings"),
        async move {
            let _ = stopped.await;
        },
    ));
    let http = reqwest::Client::new();
    let live = http
        .get(format!("http://{api_addr}/livez"))
        .send()
        .await
        .expect("livez");
    assert_eq!(live.status(), StatusCode::OK);

    let on_api = TestApp::reply(
        http.get(format!("http://{api_addr}/metrics"))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(
        on_api.status,
        StatusCode::NOT_FOUND,
        "not on the API listener"
    );
    assert_eq!(on_api.outcome(), "not_found");
    let r = http
        .get(format!("http://{metrics_addr}/metrics"))
        .send()
        .await
        .expect("scrape");
    assert_eq!(r.status(), StatusCode::OK);
    let text = r.text().await.expect("text");
    assert!(
        text.contains("# TYPE leasehold_http_requests_total counter"),
        "{text}"
    );
    assert!(
        text.contains("route=\"/livez\""),
        "API traffic shows on the metrics listener"
    );
    let other = http
        .get(format!("http://{metrics_addr}/livez"))
        .send()
        .await
        .expect("send");
    assert_eq!(
        other.status(),
        StatusCode::NOT_FOUND,
        "the metrics listener serves /metrics only"
    );

    let _ = stop.send(());
    server.await.expect("join").expect("run_with");
    assert!(
        http.get(format!("http://{metrics_addr}/metrics"))
            .send()
            .await
            .is_err(),
        "closed at shutdown"
    );
}

/// Watch metrics: streams of one resource are as many watchers and one
/// group while open; an acquire is one store read for all of them and one
/// delivered event each; clients that go take watchers and group with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_gauges_and_counters_follow_streams() {
    const N: usize = 20;
    let _turn = SERIAL.lock().await;
    let app = TestApp::spawn_with(args(&Backend::Memory, &["--sse-keepalive-ms", "50"])).await;
    let p = unique("watch-");
    let d = digest();
    let before = scrape(&app).await;
    let gauge = |s: &Scrape, name: &str| s.sum(name, &[]);
    /// Reads `stream` until its text so far contains `what` (bounded).
    async fn until(stream: &mut reqwest::Response, seen: &mut String, what: &str) {
        while !seen.contains(what) {
            let chunk = tokio::time::timeout(Duration::from_secs(10), stream.chunk())
                .await
                .expect("stream stalled")
                .expect("read")
                .expect("stream open");
            seen.push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
        }
    }
    let mut streams = Vec::new();
    for _ in 0..N {
        let mut stream = app
            .http
            .get(format!("{}/leases/{p}/{d}/events", app.base))
            .send()
            .await
            .expect("open stream");
        assert_eq!(stream.status(), StatusCode::OK);
        let mut seen = String::new();
        until(&mut stream, &mut seen, "event: state\n").await;
        streams.push((stream, seen));
    }
    let open = scrape(&app).await;
    let more = |name: &str| gauge(&open, name) - gauge(&before, name);
    assert_eq!(more("leasehold_watchers"), N as f64);
    assert_eq!(more("leasehold_watch_groups"), 1.0);
    let a = app.attempt().await;
    assert_eq!(app.acquire(&p, &d, &a, 30_000).await.outcome(), "acquired");
    for (stream, seen) in &mut streams {
        until(stream, seen, "event: acquired\n").await;
    }
    let heard = scrape(&app).await;
    let events = |s: &Scrape| s.sum("leasehold_watch_events_total", &[("kind", "acquired")]);
    assert_eq!(events(&heard) - events(&before), N as f64);
    let reads = |s: &Scrape| s.sum("leasehold_watch_reads_total", &[("result", "ok")]);
    assert_eq!(
        reads(&heard) - reads(&before),
        2.0,
        "one read when the group began, one for the acquire, for {N} watchers"
    );
    drop(streams);
    scrape_until(&app, "watchers and group gone", |s| {
        gauge(s, "leasehold_watchers") == gauge(&before, "leasehold_watchers")
            && gauge(s, "leasehold_watch_groups") == gauge(&before, "leasehold_watch_groups")
    })
    .await;
}

/// `leasehold_session_keepalive_streams` counts the keep-alive streams
/// open: one more while a stream lives, back when it closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keepalive_gauge_follows_streams() {
    let _turn = SERIAL.lock().await;
    let app = TestApp::spawn(&Backend::Memory).await;
    const G: &str = "leasehold_session_keepalive_streams";
    let a = app.attempt().await;
    let made = app
        .http
        .post(format!("{}/sessions", app.base))
        .header("Lease-Owner-Token", &a.token)
        .header("Lease-Operation-Id", &a.op)
        .json(&json!({"ttlMs": 30_000}))
        .send()
        .await
        .expect("send");
    assert_eq!(made.status(), StatusCode::CREATED);
    let made: serde_json::Value = made.json().await.expect("json");
    let id = made["session"]["id"].as_str().expect("id").to_owned();
    let before = scrape(&app).await;
    let stream = app
        .http
        .get(format!("{}/sessions/{id}/keepalive", app.base))
        .header("Lease-Owner-Token", &a.token)
        .send()
        .await
        .expect("send");
    assert_eq!(stream.status(), StatusCode::OK);
    let was = before.sum(G, &[]);
    scrape_until(&app, "one stream more", |s| s.sum(G, &[]) == was + 1.0).await;
    drop(stream);
    scrape_until(&app, "the stream gone from the gauge", |s| {
        s.sum(G, &[]) == was
    })
    .await;
}
