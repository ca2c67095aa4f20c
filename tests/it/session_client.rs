//! The Rust client's [`Session`] against a real service (issue 42,
//! docs/design.md §18, §19): leases kept alive by the keep-alive stream
//! and by the `PATCH` fallback, freed by the session's end, lost together
//! when the session is ended from outside, one lease lost alone when an
//! operator breaks it, the stream's close freeing every lease, and a lost
//! create reply retried with the same attempt.
//!
//! Every wait is on an event (a renewal applied, a registration's end, a
//! server-side wait), never on a fixed sleep.

#[allow(unused_imports)]
use crate::common;

use std::time::Duration;

use common::app::{unique, Backend, TestApp};
use common::cli::PATIENCE;
use common::http_proxy::HttpProxy;
use leasehold::client::{
    session_id_of, Acquire, AcquireOptions, Attach, Client, ClientSettings, EndReason, KeepAlive,
    LeaseState, Session, SessionEnd, SessionEnded, SessionGone, SessionLease, SessionOptions,
};
use leasehold::domain::{OperationId, Purpose, ResourceDigest, ResourceId};
use tokio::time::{timeout, Instant};

const PURPOSE: &str = "shards";

fn client_for(base: &str) -> Client {
    Client::new(ClientSettings::new(base.to_owned())).expect("client")
}

fn op(prefix: &str) -> OperationId {
    OperationId::parse(&unique(prefix)).expect("operation id")
}

fn resources(n: usize) -> Vec<ResourceId> {
    (0..n)
        .map(|_| ResourceId {
            purpose: Purpose::parse(PURPOSE).expect("purpose"),
            digest: ResourceDigest::of_raw_id(&unique("shard-")),
        })
        .collect()
}

fn options(ttl: Duration, keep_alive: KeepAlive) -> SessionOptions {
    SessionOptions {
        keep_alive,
        ..SessionOptions::new(ttl)
    }
}

/// Acquires every resource on the session.
async fn attach(session: &Session, rs: &[ResourceId]) -> Vec<SessionLease> {
    let mut leases = Vec::new();
    for r in rs {
        let got = session
            .acquire(r, &op("lease-"), &AcquireOptions::new(session.ttl()))
            .await
            .expect("acquire on the session");
        match got {
            Attach::Acquired { lease, .. } => leases.push(lease),
            other => panic!("not acquired: {other:?}"),
        }
    }
    leases
}

/// Waits (on the session's renewals) until `at` has passed with the
/// session still alive: its leases were renewed past where they started.
async fn renewed_past(session: &Session, at: Instant) -> usize {
    let mut renewals = session.renewals();
    let mut seen = 0;
    while Instant::now() <= at {
        timeout(PATIENCE, renewals.changed())
            .await
            .expect("a renewal in time")
            .expect("the session lives");
        seen += 1;
    }
    seen
}

/// Whether another attempt acquires `r` at once.
async fn free_for_another(client: &Client, r: &ResourceId) -> bool {
    let attempt = client.create_attempt(&op("other-")).await.expect("attempt");
    let got = client
        .acquire(r, &attempt, Duration::from_secs(5), Duration::ZERO)
        .await
        .expect("acquire");
    matches!(got, Acquire::Acquired { .. })
}

async fn session_leases_kept_then_freed_by_end(keep_alive: KeepAlive) {
    let app = TestApp::spawn(&Backend::Memory).await;
    let client = client_for(&app.base);
    let ttl = Duration::from_secs(2);
    let sent = Instant::now();
    let session = Session::create(&client, &op("session-"), options(ttl, keep_alive))
        .await
        .expect("session");
    assert_eq!(session.state(), LeaseState::Active);
    let rs = resources(3);
    let mut leases = attach(&session, &rs).await;
    let tokens: Vec<u64> = leases.iter().map(SessionLease::fencing_token).collect();
    assert!(tokens.iter().all(|t| *t > 0), "{tokens:?}");

    // Past the first TTL, every lease is still valid: the keep-alive
    // renewed the session, and each lease with it.
    let renewals = renewed_past(&session, sent + ttl).await;
    assert!(renewals >= 2, "{renewals} renewals");
    for (l, r) in leases.iter().zip(&rs) {
        assert!(l.handle().is_valid(), "{:?}", l.handle());
        assert_eq!(l.end_reason(), None);
        let seen = app.inspect(PURPOSE, r.digest.as_str(), None).await;
        assert_eq!(seen.body["held"], true, "{:?}", seen.body);
    }
    assert!(
        !free_for_another(&client, &rs[0]).await,
        "held by the session"
    );
    let page = client
        .session(session.id(), Some(10), None)
        .await
        .expect("read the session")
        .expect("it lives");
    assert_eq!(page.leases.len(), 3, "{page:?}");
    assert_eq!(page.session.leases, 3);

    // Ending the session releases every lease: each registration ends
    // once, Released, and another attempt takes each resource at once.
    assert_eq!(session.end().await, Ok(SessionEnded::Ended { released: 3 }));
    assert_eq!(session.end_reason(), Some(SessionEnd::Ended));
    assert!(session.lost().is_cancelled());
    for l in &mut leases {
        assert_eq!(l.ended().await, EndReason::Released);
        assert!(l.token().is_cancelled());
        assert_eq!(l.handle().state(), LeaseState::Released);
    }
    for r in &rs {
        assert!(free_for_another(&client, r).await, "free after the end");
    }
    assert_eq!(
        client.session(session.id(), None, None).await,
        Ok(None),
        "an ended session reads as gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_leases_are_kept_by_the_keep_alive_stream_and_freed_by_the_end() {
    session_leases_kept_then_freed_by_end(KeepAlive::Stream).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_leases_are_kept_by_patch_renewals_and_freed_by_the_end() {
    session_leases_kept_then_freed_by_end(KeepAlive::Renew).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ended_from_outside_signals_once_for_it_and_once_per_lease() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let client = client_for(&app.base);
    let attempt = client
        .create_attempt(&op("session-"))
        .await
        .expect("attempt");
    let token = attempt.owner_token.expose().to_owned();
    let session = Session::create_with(
        &client,
        attempt,
        options(Duration::from_secs(3), KeepAlive::Stream),
    )
    .await
    .expect("session");
    let rs = resources(3);
    let mut leases = attach(&session, &rs).await;
    let lost = session.lost();
    assert!(!lost.is_cancelled());

    // Someone holding the secret ends it with a DELETE (the stream hears it
    // at the service's next renewal, a third of the 3 s TTL at most).
    let deleted = app
        .http
        .delete(format!("{}/sessions/{}", app.base, session.id()))
        .header("Lease-Owner-Token", &token)
        .send()
        .await
        .expect("DELETE");
    assert_eq!(deleted.status(), 200);

    // The stream says `lost`: the session's one signal, and one per lease.
    let end = timeout(PATIENCE, session.ended()).await.expect("in time");
    assert_eq!(end, SessionEnd::Lost(SessionGone::Ended));
    assert!(lost.is_cancelled());
    for l in &mut leases {
        assert_eq!(
            timeout(PATIENCE, l.ended()).await.expect("in time"),
            EndReason::Lost
        );
        assert!(l.token().is_cancelled());
        assert_eq!(l.handle().state(), LeaseState::Lost);
    }
    for r in &rs {
        assert!(free_for_another(&client, r).await, "free after the DELETE");
    }
    // Nothing more to renew, or to acquire on.
    assert!(session.renew().await.is_err(), "refused locally");
    let refused = session
        .acquire(&rs[0], &op("late-"), &AcquireOptions::new(session.ttl()))
        .await;
    assert!(refused.is_err(), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_lease_ends_alone_at_the_next_renewal() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let client = client_for(&app.base);
    let session = Session::create(
        &client,
        &op("session-"),
        options(Duration::from_secs(30), KeepAlive::Manual),
    )
    .await
    .expect("session");
    let rs = resources(3);
    let mut leases = attach(&session, &rs).await;
    let broken = client.break_lease(&rs[1], None, None).await.expect("break");
    assert_eq!(
        broken,
        leasehold::domain::BreakOutcome::Broken { permits: 1 }
    );
    let renewal = session.renew().await.expect("renew");
    match renewal {
        leasehold::client::SessionRenewal::Renewed { lost, .. } => {
            assert_eq!(lost.len(), 1, "{lost:?}");
            assert_eq!(lost[0].digest, rs[1].digest.as_str());
            assert_eq!(lost[0].reason, "revoked");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        timeout(PATIENCE, leases[1].ended()).await.expect("in time"),
        EndReason::Revoked
    );
    assert_eq!(leases[1].handle().state(), LeaseState::Lost);
    for i in [0, 2] {
        assert_eq!(leases[i].end_reason(), None);
        assert!(leases[i].handle().is_valid());
    }
    assert!(!session.lost().is_cancelled(), "the session lives on");
    // One lease released alone: the others stay, the session lives.
    assert_eq!(
        leases[0].release().await,
        Ok(leasehold::domain::ReleaseOutcome::Released)
    );
    assert_eq!(
        timeout(PATIENCE, leases[0].ended()).await.expect("in time"),
        EndReason::Released
    );
    assert!(free_for_another(&client, &rs[0]).await);
    assert!(leases[2].handle().is_valid());
    assert_eq!(session.end().await, Ok(SessionEnded::Ended { released: 1 }));
    assert_eq!(
        timeout(PATIENCE, leases[2].ended()).await.expect("in time"),
        EndReason::Released
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_streamed_session_frees_its_leases_long_before_the_ttl() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let client = client_for(&app.base);
    let ttl = Duration::from_secs(30);
    let session = Session::create(&client, &op("session-"), options(ttl, KeepAlive::Stream))
        .await
        .expect("session");
    let rs = resources(3);
    let leases = attach(&session, &rs).await;
    // The stream is open once its first renewal has been applied.
    let mut renewals = session.renewals();
    timeout(PATIENCE, renewals.changed())
        .await
        .expect("the stream's first renewal")
        .expect("alive");
    // A waiter on another attempt, then the holder goes away: its stream
    // closes, and the service ends the session at once.
    let waiter = client
        .create_attempt(&op("waiter-"))
        .await
        .expect("attempt");
    let dropped = Instant::now();
    drop(leases);
    drop(session);
    for r in &rs {
        let got = client
            .acquire(r, &waiter, Duration::from_secs(5), Duration::from_secs(20))
            .await
            .expect("acquire");
        assert!(matches!(got, Acquire::Acquired { .. }), "{got:?}");
    }
    let took = dropped.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "freed after {took:?} (TTL 30 s)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_create_reply_is_retried_with_the_same_attempt() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let direct = client_for(&app.base);
    let proxy = HttpProxy::start(app.addr).await;
    let proxied = client_for(&proxy.url());
    let attempt = direct
        .create_attempt(&op("session-"))
        .await
        .expect("attempt");
    let id = session_id_of(&attempt.owner_token);
    proxy.drop_replies("POST", 1);
    let session = Session::create_with(
        &proxied,
        attempt,
        options(Duration::from_secs(30), KeepAlive::Manual),
    )
    .await
    .expect("made on the retry");
    assert_eq!(session.id(), id);
    let posts = proxy.requests("POST", "/sessions");
    assert_eq!(posts.len(), 2, "{posts:?}");
    assert!(posts[0].dropped && !posts[1].dropped, "{posts:?}");
    assert_eq!(
        posts[0].operation_id, posts[1].operation_id,
        "the same attempt"
    );
    let page = direct
        .session(&id, None, None)
        .await
        .expect("read")
        .expect("one session, alive");
    assert_eq!(page.session.id, id);
    assert_eq!(session.end().await, Ok(SessionEnded::Ended { released: 0 }));
}
