//! The session's state logic without a server: the id a secret names, the
//! keep-alive events, validity from the send, and the one signal per
//! session and per lease.

use std::time::Duration;

use tokio::time::Instant;

use super::super::handle::LeaseHandle;
use super::super::session_lease::{watch_lease, SessionLease};
use super::super::session_wire::{stream_data, LostLease, SessionGone, StreamData};
use super::super::watchdog::EndReason;
use super::*;
use crate::client::ClientSettings;
use crate::domain::{Guarantee, Lease, OwnerToken, Purpose, ResourceDigest, ResourceId, StoreTime};

fn info(id: &str, remaining_ms: u64) -> SessionInfo {
    SessionInfo {
        id: id.to_owned(),
        holder: None,
        ttl_ms: 30_000,
        remaining_ms,
        expires_at: StoreTime(1_000_000),
        created_at: StoreTime(1_000),
        renewed_at: StoreTime(1_000),
        leases: 0,
    }
}

fn attempt() -> Attempt {
    Attempt {
        owner_token: OwnerToken::parse(&"A".repeat(32)).expect("token"),
        operation_id: OperationId::parse("session-1").expect("op"),
    }
}

/// A session of 30 s made by a request sent at `sent`, kept alive by no one.
fn session(sent: Instant) -> Session {
    let client = Client::new(ClientSettings::new("http://127.0.0.1:1")).expect("client");
    let a = attempt();
    let id = session_id_of(&a.owner_token);
    let options = SessionOptions {
        keep_alive: KeepAlive::Manual,
        ..SessionOptions::new(Duration::from_secs(30))
    };
    let s = Session::start(&client, a, &options, info(&id, 30_000), sent);
    super::super::session_keeper::spawn(s.shared(), KeepAlive::Manual);
    s
}

fn resource(raw: &str) -> ResourceId {
    ResourceId {
        purpose: Purpose::parse("shards").expect("purpose"),
        digest: ResourceDigest::of_raw_id(raw),
    }
}

/// A lease of `s` on `raw`, acquired by a request sent at `sent`.
fn lease(s: &Session, raw: &str, token: u64, sent: Instant) -> SessionLease {
    let r = resource(raw);
    let lease = Lease {
        purpose: r.purpose.clone(),
        digest: r.digest.clone(),
        fencing_token: token,
        ttl_ms: 30_000,
        remaining_ms: 30_000,
        guarantee: Guarantee::Fenced,
        replication: None,
        holder: None,
        acquired_at: StoreTime(1_000),
        renewed_at: StoreTime(1_000),
        max_hold_ms: None,
        hold_ends_at: None,
    };
    let shared = s.shared();
    let attempt = Attempt {
        owner_token: shared.attempt.owner_token.clone(),
        operation_id: OperationId::parse(&format!("lease-{token}")).expect("op"),
    };
    let handle = LeaseHandle::new(shared.client.clone(), r, attempt, lease, sent, s.ttl());
    watch_lease(shared, handle, None)
}

#[test]
fn the_id_is_derived_from_the_secret() {
    // python3: "s1." + sha256(b"leasehold-session\x1f" + b"A" * 32).hexdigest()[:32]
    assert_eq!(
        session_id_of(&attempt().owner_token),
        "s1.4a8869bd819a8ef2ae054bcdac41e0c5"
    );
}

#[test]
fn keep_alive_events_parse_and_off_contract_ones_do_not() {
    let data = r#"{"id":"s1.00000000000000000000000000000000","ttlMs":30000,"remainingMs":29990,"expiresAt":"2026-12-05T23:00:30.000Z","createdAt":"2026-12-05T23:00:00.000Z","renewedAt":"2026-12-05T23:00:00.010Z","leases":3}"#;
    match stream_data("renewed", data) {
        Some(StreamData::Renewed { session, lost }) => {
            assert_eq!(session.remaining_ms, 29_990);
            assert_eq!(session.leases, 3);
            assert!(lost.is_empty());
        }
        other => panic!("{other:?}"),
    }
    let wrapped = format!(
        r#"{{"outcome":"renewed","session":{data},"lost":[{{"purpose":"shards","digest":"v1.x","reason":"revoked"}}]}}"#
    );
    match stream_data("renewed", &wrapped) {
        Some(StreamData::Renewed { lost, .. }) => assert_eq!(lost[0].reason, "revoked"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        stream_data("lost", r#"{"reason":"session_ended"}"#),
        Some(StreamData::Lost(SessionGone::Ended))
    );
    assert_eq!(
        stream_data("lost", r#"{"reason":"session_expired"}"#),
        Some(StreamData::Lost(SessionGone::Expired))
    );
    assert_eq!(
        stream_data("lost", r#"{"reason":"absent"}"#),
        Some(StreamData::Lost(SessionGone::Absent))
    );
    assert_eq!(stream_data("lost", r#"{"reason":"revoked"}"#), None);
    assert_eq!(stream_data("renewed", r#"{"id":"s1.x"}"#), None);
    assert_eq!(stream_data("ping", "{}"), Some(StreamData::Other));
}

#[tokio::test(start_paused = true)]
async fn validity_counts_from_the_send_and_renewals_extend_every_lease() {
    let t0 = Instant::now();
    let s = session(t0);
    // 30 s less 1 % drift, from the send.
    assert_eq!(s.shared().valid_until(), t0 + Duration::from_millis(29_700));
    tokio::time::advance(Duration::from_secs(5)).await;
    let a = lease(&s, "a", 7, Instant::now());
    let b = lease(&s, "b", 8, Instant::now());
    assert_eq!(a.fencing_token(), 7);
    assert_eq!(b.fencing_token(), 8);
    tokio::time::advance(Duration::from_secs(10)).await;
    let sent = Instant::now();
    tokio::time::advance(Duration::from_millis(40)).await;
    let id = s.id().to_owned();
    s.shared().apply_renewed(sent, &info(&id, 29_999), &[]);
    let until = sent + Duration::from_millis(29_999 - 300);
    assert_eq!(s.shared().valid_until(), until);
    for l in [&a, &b] {
        assert_eq!(l.handle().state(), LeaseState::Active);
        assert_eq!(l.handle().shared().valid_until(), until);
        assert!(!l.token().is_cancelled());
    }
}

#[tokio::test(start_paused = true)]
async fn a_lease_the_renewal_no_longer_holds_ends_alone_with_its_reason() {
    let s = session(Instant::now());
    let mut a = lease(&s, "a", 1, Instant::now());
    let mut b = lease(&s, "b", 2, Instant::now());
    let id = s.id().to_owned();
    let gone = LostLease {
        purpose: "shards".into(),
        digest: resource("a").digest.as_str().to_owned(),
        reason: "revoked".into(),
    };
    s.shared()
        .apply_renewed(Instant::now(), &info(&id, 30_000), &[gone]);
    assert_eq!(a.ended().await, EndReason::Revoked);
    assert_eq!(a.handle().state(), LeaseState::Lost);
    assert_eq!(b.end_reason(), None);
    assert_eq!(b.handle().state(), LeaseState::Active);
    assert!(!s.lost().is_cancelled());
    // Then the session is lost: one signal for it, one for the lease left.
    s.shared().finish(SessionEnd::Lost(SessionGone::Ended));
    s.shared().finish(SessionEnd::Ended);
    assert!(s.lost().is_cancelled());
    assert_eq!(s.end_reason(), Some(SessionEnd::Lost(SessionGone::Ended)));
    assert_eq!(b.ended().await, EndReason::Lost);
    assert_eq!(b.handle().state(), LeaseState::Lost);
    assert_eq!(s.state(), LeaseState::Lost);
}

#[tokio::test(start_paused = true)]
async fn an_unrenewed_session_and_its_leases_end_before_validity_runs_out() {
    let t0 = Instant::now();
    let s = session(t0);
    let mut a = lease(&s, "a", 1, t0);
    // The lease's own stop instant: validity less one drift budget.
    assert_eq!(a.ended().await, EndReason::Expired);
    assert!(Instant::now() >= t0 + Duration::from_millis(29_400));
    assert!(Instant::now() < t0 + Duration::from_millis(29_700));
    assert_eq!(s.ended().await, SessionEnd::Expired);
    assert!(Instant::now() < t0 + Duration::from_millis(29_700));
    assert_eq!(s.state(), LeaseState::Lost);
    assert_eq!(s.end_reason(), Some(SessionEnd::Expired));
    assert!(s.lost().is_cancelled());
    let refused = s
        .acquire(
            &resource("b"),
            &OperationId::parse("b").expect("op"),
            &AcquireOptions::new(Duration::from_secs(1)),
        )
        .await;
    assert!(matches!(refused, Err(Error::Refused(_))), "{refused:?}");
}

#[tokio::test(start_paused = true)]
async fn a_lease_acquired_after_the_end_is_settled_at_once() {
    let s = session(Instant::now());
    s.shared().finish(SessionEnd::Ended);
    let mut late = lease(&s, "late", 3, Instant::now());
    assert_eq!(late.ended().await, EndReason::Released);
    assert_eq!(late.handle().state(), LeaseState::Released);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_session_stops_every_registration() {
    let s = session(Instant::now());
    let mut a = lease(&s, "a", 1, Instant::now());
    let lost = s.lost();
    drop(s);
    assert!(lost.is_cancelled());
    assert_eq!(a.ended().await, EndReason::Stopped);
}
