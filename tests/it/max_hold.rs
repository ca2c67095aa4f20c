//! Bounded holds (issue 24, docs/design.md §17): an acquire's `maxHoldMs`,
//! on the embedded store and on a real `redis-server`. No renewal reaches
//! past `acquiredAt + maxHoldMs`: the renew that would is granted the time
//! left, and after the bound the holder's renew answers `lost` with
//! `reason: max_hold`, its release `already_absent` with it. The next holder
//! gets the resource at the bound, not later (a waiter is woken by the
//! expiry: the tests wait on it server-side, never on a client sleep).

use crate::common::app::{digest, Backend, Reply, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};

const P: &str = "invoice-export";

both_stores!(
    renewals_stop_at_the_bound_and_the_holder_hears_max_hold,
    a_bound_above_the_ttl_leaves_renewals_alone,
    a_replay_and_the_history_keep_the_label_and_bound_apart,
    max_hold_bodies_are_validated,
);

/// Milliseconds since the epoch of an RFC 3339 `...T..:..:..mmmZ` answer.
fn epoch_ms(v: &Value) -> u64 {
    let text = v.as_str().unwrap_or_else(|| panic!("not a time: {v}"));
    leasehold::domain::StoreTime::parse(text)
        .unwrap_or_else(|| panic!("not YYYY-MM-DDTHH:MM:SS.mmmZ: {text}"))
        .0
}

/// The hold bound of a test: long enough that a loaded machine renews
/// well inside it, short enough that the test waits for it.
const BOUND_MS: u64 = 2_000;

async fn renewals_stop_at_the_bound_and_the_holder_hears_max_hold(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let (a, b) = (app.attempt().await, app.attempt().await);
    // A TTL above the bound is granted the bound.
    let r = app
        .acquire_body(
            P,
            &d,
            &a,
            &json!({"ttlMs": 30_000, "maxHoldMs": BOUND_MS, "holder": "pod|7"}),
        )
        .await;
    assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
    let lease = &r.body["lease"];
    assert_eq!(lease["ttlMs"], BOUND_MS, "{lease}");
    assert_eq!(lease["maxHoldMs"], BOUND_MS, "{lease}");
    assert_eq!(
        lease["holder"], "pod|7",
        "the bound is not part of the label"
    );
    let acquired_at = epoch_ms(&lease["acquiredAt"]);
    let ends = epoch_ms(&lease["holdEndsAt"]);
    assert_eq!(ends, acquired_at + BOUND_MS);

    // The renew that would reach past the bound gets the time left.
    let renewed = app.renew(P, &d, &a, 30_000).await;
    assert_eq!(renewed.outcome(), "renewed", "{:?}", renewed.body);
    let lease = &renewed.body["lease"];
    let granted = lease["ttlMs"].as_u64().expect("ttlMs");
    let renewed_at = epoch_ms(&lease["renewedAt"]);
    assert!(granted <= BOUND_MS, "{lease}");
    assert_eq!(
        renewed_at + granted,
        ends,
        "granted exactly the time left: {lease}"
    );
    assert_eq!(lease["remainingMs"], granted, "{lease}");
    assert_eq!(epoch_ms(&lease["holdEndsAt"]), ends, "{lease}");
    assert_eq!(lease["holder"], "pod|7", "{lease}");

    // Inspect shows the bound per permit.
    let seen = app.inspect(P, &d, None).await.body;
    assert_eq!(seen["permits"][0]["maxHoldMs"], BOUND_MS, "{seen}");
    assert_eq!(epoch_ms(&seen["permits"][0]["holdEndsAt"]), ends, "{seen}");
    assert_eq!(seen["permits"][0]["holder"], "pod|7", "{seen}");

    // A waiter gets the resource when the bound runs out (server-side wait:
    // the expiry wakes it), not before.
    let next = app.acquire_wait(P, &d, &b, 30_000, 15_000).await;
    assert_eq!(next.outcome(), "acquired", "{:?}", next.body);
    assert!(
        epoch_ms(&next.body["lease"]["acquiredAt"]) >= ends,
        "the next holder came before the bound: {:?}",
        next.body
    );
    assert!(
        next.body["lease"].get("maxHoldMs").is_none(),
        "{:?}",
        next.body
    );

    // The held-out holder learns why, on renew and on release.
    let lost = app.renew(P, &d, &a, 30_000).await;
    assert_eq!(lost.status, StatusCode::NOT_FOUND, "{:?}", lost.body);
    assert_eq!(lost.outcome(), "lost", "{:?}", lost.body);
    assert_eq!(lost.body["reason"], "max_hold", "{:?}", lost.body);
    assert_eq!(lost.content_type(), "application/problem+json");
    let gone = app.release(P, &d, &a).await;
    assert_eq!(gone.status, StatusCode::OK, "{:?}", gone.body);
    assert_eq!(
        gone.body,
        json!({"outcome": "already_absent", "reason": "max_hold"})
    );
    // The next holder is untouched by all of it.
    let theirs = app.renew(P, &d, &b, 30_000).await;
    assert_eq!(theirs.outcome(), "renewed", "{:?}", theirs.body);
}

async fn a_bound_above_the_ttl_leaves_renewals_alone(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let a = app.attempt().await;
    // A counting lease (a hash record on Redis) as well as a plain one.
    for (d, limit) in [(d.clone(), 1), (digest(), 3)] {
        let r = app
            .acquire_body(
                P,
                &d,
                &a,
                &json!({"ttlMs": 5_000, "maxHoldMs": 3_600_000, "limit": limit}),
            )
            .await;
        assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
        assert_eq!(r.body["lease"]["ttlMs"], 5_000);
        let renewed = app.renew(P, &d, &a, 5_000).await;
        assert_eq!(renewed.outcome(), "renewed", "{:?}", renewed.body);
        assert_eq!(renewed.body["lease"]["ttlMs"], 5_000, "{:?}", renewed.body);
        assert_eq!(renewed.body["lease"]["maxHoldMs"], 3_600_000);
        let released = app.release(P, &d, &a).await;
        assert_eq!(released.outcome(), "released", "{:?}", released.body);
    }
    // Without a bound, nothing of it is shown.
    let plain = app.acquire(P, &digest(), &a, 5_000).await;
    assert!(
        plain.body["lease"].get("maxHoldMs").is_none(),
        "{:?}",
        plain.body
    );
    assert!(
        plain.body["lease"].get("holdEndsAt").is_none(),
        "{:?}",
        plain.body
    );
}

async fn a_replay_and_the_history_keep_the_label_and_bound_apart(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let d = digest();
    let a = app.attempt().await;
    let body = json!({"ttlMs": 30_000, "maxHoldMs": 600_000, "limit": 2, "holder": "w-1"});
    let first = app.acquire_body(P, &d, &a, &body).await;
    assert_eq!(first.outcome(), "acquired", "{:?}", first.body);
    let again = app.acquire_body(P, &d, &a, &body).await;
    assert_eq!(
        again.outcome(),
        "replayed_same_operation",
        "{:?}",
        again.body
    );
    assert_eq!(again.body["lease"]["holder"], "w-1");
    assert_eq!(again.body["lease"]["maxHoldMs"], 600_000);
    assert_eq!(
        again.body["lease"]["holdEndsAt"],
        first.body["lease"]["holdEndsAt"]
    );
    // A new label keeps the bound.
    let rb = app
        .http
        .patch(format!("{}/leases/{P}/{d}", app.base))
        .header("Lease-Owner-Token", &a.token)
        .header("Lease-Operation-Id", &a.op)
        .json(&json!({"ttlMs": 30_000, "holder": "w-2"}));
    let relabelled: Reply = TestApp::reply(rb.send().await.expect("send")).await;
    assert_eq!(
        relabelled.body["lease"]["holder"], "w-2",
        "{:?}",
        relabelled.body
    );
    assert_eq!(relabelled.body["lease"]["maxHoldMs"], 600_000);
    assert_eq!(app.release(P, &d, &a).await.outcome(), "released");
    let history = app
        .get(&format!("/leases/{P}/{d}/history?limit=10"))
        .await
        .body;
    let holders: Vec<&str> = history["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("entries: {history}"))
        .iter()
        .filter_map(|e| e["holder"].as_str())
        .collect();
    assert_eq!(holders, ["w-2", "w-2", "w-1"], "{history}");
}

async fn max_hold_bodies_are_validated(backend: Backend) {
    let app = TestApp::spawn(&backend).await;
    let a = app.attempt().await;
    for bad in [
        json!(0),
        json!(19),
        json!(2_592_000_001_u64),
        json!(1.5),
        json!("600"),
        json!(-1),
    ] {
        let r = app
            .acquire_body(P, &digest(), &a, &json!({"ttlMs": 1_000, "maxHoldMs": bad}))
            .await;
        assert!(
            r.status == StatusCode::UNPROCESSABLE_ENTITY || r.status == StatusCode::BAD_REQUEST,
            "{bad}: {:?}",
            r.body
        );
        assert_eq!(r.content_type(), "application/problem+json");
        assert!(
            r.body.to_string().contains("maxHoldMs"),
            "{bad}: {:?}",
            r.body
        );
    }
    // A whole float is the integer it is (JSON Schema's reading).
    let r = app
        .acquire_body(
            P,
            &digest(),
            &a,
            &json!({"ttlMs": 1_000, "maxHoldMs": 60_000.0}),
        )
        .await;
    assert_eq!(r.outcome(), "acquired", "{:?}", r.body);
    assert_eq!(r.body["lease"]["maxHoldMs"], 60_000);
}
