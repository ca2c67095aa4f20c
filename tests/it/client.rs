//! The Rust client (`--features client`): the handle's state machine, table
//! by table and against a model under random operation sequences; the
//! client's outcomes against a real service; and the watchdog against a
//! real service on a real `redis-server` (deleted keys, a frozen Redis).

#[allow(unused_imports)]
use crate::common;
use crate::common::rng::Rng;

use std::collections::HashMap;
use std::time::Duration;

use common::app::{args, unique, Backend, TestApp};
use common::redis::RedisServer;
use leasehold::client::{
    Acquire, Cause, Client, ClientSettings, EndReason, Error, EventKind, HandleCore, LeaseHandle,
    LeaseState, Refused, ReleaseReply, RenewReply, Watchdog, WatchdogError, WatchdogEvent,
};
use leasehold::domain::{
    Attempt, HeldBy, LostReason, OperationId, Purpose, ReleaseOutcome, RenewOutcome,
    ResourceDigest, ResourceId,
};
use tokio::sync::broadcast;
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

// ---------------------------------------------------------------------------
// The state machine, without I/O
// ---------------------------------------------------------------------------

const TTL: Duration = Duration::from_millis(1000);
const DRIFT: Duration = Duration::from_millis(10);

#[derive(Debug, Clone, Copy, PartialEq)]
enum From {
    Active,
    LostByServer,
    LostByExpiry,
    Unknown,
    Released,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Input {
    AskRenew,
    Renewed,
    RenewLost,
    RenewIndeterminate,
    RenewNotApplied,
    AskRelease,
    Released,
    AlreadyAbsent,
    NotOwner,
    ReleaseIndeterminate,
    ReleaseNotApplied,
    ValidityRunsOut,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Validity {
    /// Moved to `renew sent + min(ttl, remaining) - drift`.
    Extended,
    /// Where it was.
    Kept,
}

/// A core in `from`, with `t0` its acquire's send instant (valid until
/// `t0 + 990 ms`).
fn core_in(from: From, t0: Instant) -> HandleCore {
    let mut core = HandleCore::new(t0, TTL, TTL, DRIFT);
    let now = t0 + 50 * MS;
    match from {
        From::Active => {}
        From::LostByServer => {
            core.finish_renew(now, now, RenewReply::Lost);
        }
        From::LostByExpiry => {
            core.observe(t0 + 990 * MS);
        }
        From::Unknown => {
            core.finish_renew(now, now, RenewReply::Indeterminate);
        }
        From::Released => {
            core.finish_release(now, ReleaseReply::Released);
        }
    }
    core
}

#[test]
fn every_transition_of_the_handle_state_machine() {
    use LeaseState::{Active as A, Lost as L, Released as R, Unknown as U};
    use Validity::{Extended as Ext, Kept};
    // (from, input, refused locally, state after, validity)
    #[rustfmt::skip]
    let table: &[(From, Input, bool, LeaseState, Validity)] = &[
        (From::Active, Input::AskRenew,             false, A, Kept),
        (From::Active, Input::Renewed,              false, A, Ext),
        (From::Active, Input::RenewLost,            false, L, Kept),
        (From::Active, Input::RenewIndeterminate,   false, U, Kept),
        (From::Active, Input::RenewNotApplied,      false, A, Kept),
        (From::Active, Input::AskRelease,           false, A, Kept),
        (From::Active, Input::Released,             false, R, Kept),
        (From::Active, Input::AlreadyAbsent,        false, R, Kept),
        (From::Active, Input::NotOwner,             false, L, Kept),
        (From::Active, Input::ReleaseIndeterminate, false, U, Kept),
        (From::Active, Input::ReleaseNotApplied,    false, A, Kept),
        (From::Active, Input::ValidityRunsOut,      false, L, Kept),

        (From::LostByServer, Input::AskRenew,             true,  L, Kept),
        (From::LostByServer, Input::Renewed,              false, L, Kept),
        (From::LostByServer, Input::RenewLost,            false, L, Kept),
        (From::LostByServer, Input::RenewIndeterminate,   false, L, Kept),
        (From::LostByServer, Input::RenewNotApplied,      false, L, Kept),
        (From::LostByServer, Input::AskRelease,           false, L, Kept),
        (From::LostByServer, Input::Released,             false, L, Kept),
        (From::LostByServer, Input::AlreadyAbsent,        false, L, Kept),
        (From::LostByServer, Input::NotOwner,             false, L, Kept),
        (From::LostByServer, Input::ReleaseIndeterminate, false, L, Kept),
        (From::LostByServer, Input::ReleaseNotApplied,    false, L, Kept),
        (From::LostByServer, Input::ValidityRunsOut,      false, L, Kept),

        (From::LostByExpiry, Input::AskRenew,             true,  L, Kept),
        (From::LostByExpiry, Input::Renewed,              false, L, Kept),
        (From::LostByExpiry, Input::RenewLost,            false, L, Kept),
        (From::LostByExpiry, Input::RenewIndeterminate,   false, L, Kept),
        (From::LostByExpiry, Input::RenewNotApplied,      false, L, Kept),
        (From::LostByExpiry, Input::AskRelease,           false, L, Kept),
        (From::LostByExpiry, Input::Released,             false, L, Kept),
        (From::LostByExpiry, Input::AlreadyAbsent,        false, L, Kept),
        (From::LostByExpiry, Input::NotOwner,             false, L, Kept),
        (From::LostByExpiry, Input::ReleaseIndeterminate, false, L, Kept),
        (From::LostByExpiry, Input::ReleaseNotApplied,    false, L, Kept),
        (From::LostByExpiry, Input::ValidityRunsOut,      false, L, Kept),

        (From::Unknown, Input::AskRenew,             true,  U, Kept),
        (From::Unknown, Input::Renewed,              false, U, Kept),
        (From::Unknown, Input::RenewLost,            false, U, Kept),
        (From::Unknown, Input::RenewIndeterminate,   false, U, Kept),
        (From::Unknown, Input::RenewNotApplied,      false, U, Kept),
        (From::Unknown, Input::AskRelease,           false, U, Kept),
        (From::Unknown, Input::Released,             false, U, Kept),
        (From::Unknown, Input::AlreadyAbsent,        false, U, Kept),
        (From::Unknown, Input::NotOwner,             false, U, Kept),
        (From::Unknown, Input::ReleaseIndeterminate, false, U, Kept),
        (From::Unknown, Input::ReleaseNotApplied,    false, U, Kept),
        (From::Unknown, Input::ValidityRunsOut,      false, U, Kept),

        (From::Released, Input::AskRenew,             true,  R, Kept),
        (From::Released, Input::Renewed,              false, R, Kept),
        (From::Released, Input::RenewLost,            false, R, Kept),
        (From::Released, Input::RenewIndeterminate,   false, R, Kept),
        (From::Released, Input::RenewNotApplied,      false, R, Kept),
        (From::Released, Input::AskRelease,           true,  R, Kept),
        (From::Released, Input::Released,             false, R, Kept),
        (From::Released, Input::AlreadyAbsent,        false, R, Kept),
        (From::Released, Input::NotOwner,             false, R, Kept),
        (From::Released, Input::ReleaseIndeterminate, false, R, Kept),
        (From::Released, Input::ReleaseNotApplied,    false, R, Kept),
        (From::Released, Input::ValidityRunsOut,      false, R, Kept),
    ];
    assert_eq!(table.len(), 5 * 12, "one row per (state, input)");

    let t0 = Instant::now();
    for &(from, input, refused, after, validity) in table {
        let row = format!("{from:?} + {input:?}");
        let mut core = core_in(from, t0);
        let before = core.valid_until();
        // Inputs arrive while an ACTIVE handle is still valid; a terminal
        // handle is past its validity anyway.
        let now = if from == From::Active {
            t0 + 100 * MS
        } else {
            t0 + 1000 * MS
        };
        let sent = now - 40 * MS;
        let remaining = RenewReply::Renewed { remaining: TTL };
        let got_refused = match input {
            Input::AskRenew => core.begin_renew(now).is_err(),
            Input::AskRelease => core.begin_release(now).is_err(),
            Input::Renewed => {
                core.finish_renew(now, sent, remaining);
                false
            }
            Input::RenewLost => {
                core.finish_renew(now, sent, RenewReply::Lost);
                false
            }
            Input::RenewIndeterminate => {
                core.finish_renew(now, sent, RenewReply::Indeterminate);
                false
            }
            Input::RenewNotApplied => {
                core.finish_renew(now, sent, RenewReply::NotApplied);
                false
            }
            Input::Released => {
                core.finish_release(now, ReleaseReply::Released);
                false
            }
            Input::AlreadyAbsent => {
                core.finish_release(now, ReleaseReply::AlreadyAbsent);
                false
            }
            Input::NotOwner => {
                core.finish_release(now, ReleaseReply::NotOwner);
                false
            }
            Input::ReleaseIndeterminate => {
                core.finish_release(now, ReleaseReply::Indeterminate);
                false
            }
            Input::ReleaseNotApplied => {
                core.finish_release(now, ReleaseReply::NotApplied);
                false
            }
            Input::ValidityRunsOut => {
                core.observe(before.max(now));
                false
            }
        };
        assert_eq!(got_refused, refused, "{row}: refused");
        // The stored state, read back at the input's instant (or right
        // after validity ran out), without advancing past any new deadline.
        let read_at = if input == Input::ValidityRunsOut {
            before.max(now)
        } else {
            now
        };
        assert_eq!(core.observe(read_at), after, "{row}: state");
        let expected_until = match validity {
            Validity::Extended => sent + TTL - DRIFT,
            Validity::Kept => before,
        };
        assert_eq!(core.valid_until(), expected_until, "{row}: validity");
        if refused {
            // A refusal names the state that refused.
            let refusal = match input {
                Input::AskRenew => core.begin_renew(now),
                _ => core.begin_release(now),
            };
            assert_eq!(refusal, Err(Refused { state: after }), "{row}");
        }
    }
}

#[test]
fn validity_is_counted_from_the_send_instant_and_never_revived() {
    let sent = Instant::now();
    // min(ttl, remaining) - drift: a replay reports the server's PTTL.
    let mut core = HandleCore::new(sent, TTL, 400 * MS, DRIFT);
    assert_eq!(core.valid_until(), sent + 390 * MS);
    assert_eq!(core.valid_for(sent + 90 * MS), 300 * MS);
    // A remaining time below the drift budget gives no validity at all.
    let mut doomed = HandleCore::new(sent, TTL, 5 * MS, DRIFT);
    assert_eq!(doomed.observe(sent), LeaseState::Lost);
    assert!(doomed.expired_locally());

    // A renew sent at +300 answered at +350 restarts validity at +300.
    core.finish_renew(
        sent + 350 * MS,
        sent + 300 * MS,
        RenewReply::Renewed { remaining: TTL },
    );
    assert_eq!(core.valid_until(), sent + 300 * MS + TTL - DRIFT);
    // An older renew answered later does not shorten it.
    core.finish_renew(
        sent + 360 * MS,
        sent + 100 * MS,
        RenewReply::Renewed { remaining: TTL },
    );
    assert_eq!(core.valid_until(), sent + 300 * MS + TTL - DRIFT);
    // A renew answered after validity ran out does not revive the handle.
    let deadline = core.valid_until();
    let state = core.finish_renew(
        deadline + MS,
        deadline - 100 * MS,
        RenewReply::Renewed { remaining: TTL },
    );
    assert_eq!(state, LeaseState::Lost);
    assert!(core.expired_locally());
    assert_eq!(core.valid_until(), deadline);
    assert_eq!(core.valid_for(deadline + MS), Duration::ZERO);
    assert_eq!(
        core.begin_renew(deadline + MS),
        Err(Refused {
            state: LeaseState::Lost
        })
    );
}

/// The reference model: integer milliseconds, written from the design's
/// words rather than from the implementation.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Model {
    state: LeaseState,
    valid_until_ms: u64,
}

impl Model {
    fn expire(&mut self, now: u64) {
        if self.state == LeaseState::Active && now >= self.valid_until_ms {
            self.state = LeaseState::Lost;
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Wait(u64),
    Observe,
    /// A renew taking `latency` ms, answered with `reply`.
    Renew {
        latency: u64,
        reply: RenewReply,
    },
    Release {
        latency: u64,
        reply: ReleaseReply,
    },
}

fn random_op(rng: &mut Rng, ttl_ms: u64) -> Op {
    let latency = rng.below(ttl_ms / 2);
    match rng.below(8) {
        0 | 1 => Op::Wait(rng.below(ttl_ms)),
        2 => Op::Observe,
        3..=5 => Op::Renew {
            latency,
            reply: match rng.below(5) {
                0 | 1 => RenewReply::Renewed {
                    remaining: Duration::from_millis(rng.below(ttl_ms + 1)),
                },
                2 => RenewReply::Lost,
                3 => RenewReply::Indeterminate,
                _ => RenewReply::NotApplied,
            },
        },
        _ => Op::Release {
            latency,
            reply: match rng.below(6) {
                0 => ReleaseReply::Released,
                1 => ReleaseReply::AlreadyAbsent,
                2 => ReleaseReply::NotOwner,
                3 => ReleaseReply::Indeterminate,
                _ => ReleaseReply::NotApplied,
            },
        },
    }
}

#[test]
fn random_operation_sequences_agree_with_the_model() {
    let base_seed = std::env::var("LEASEHOLD_CLIENT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_1ea5_e401_d000_u64);
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let mut reached = HashMap::<LeaseState, usize>::new();
    for case in 0..500u64 {
        let seed = base_seed.wrapping_add(case.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1;
        let mut rng = Rng(seed);
        let ttl_ms = 20 + rng.below(2000);
        let drift_ms = rng.below(ttl_ms / 2);
        let remaining_ms = rng.below(ttl_ms + 1);
        let ttl = Duration::from_millis(ttl_ms);
        let mut core = HandleCore::new(
            t0,
            ttl,
            Duration::from_millis(remaining_ms),
            Duration::from_millis(drift_ms),
        );
        let mut model = Model {
            state: LeaseState::Active,
            valid_until_ms: ttl_ms.min(remaining_ms).saturating_sub(drift_ms),
        };
        let mut now = 0u64;
        let mut trace = Vec::new();
        for _ in 0..40 {
            let op = random_op(&mut rng, ttl_ms);
            trace.push(op);
            let ctx = || {
                format!("seed {seed} (LEASEHOLD_CLIENT_SEED={base_seed}, case {case}), ttl {ttl_ms} drift {drift_ms}: {trace:?}")
            };
            let was_terminal = model.state.is_terminal();
            let before = model;
            match op {
                Op::Wait(d) => now += d,
                Op::Observe => {}
                Op::Renew { latency, reply } => {
                    model.expire(now);
                    let refused = core.begin_renew(ms(now));
                    assert_eq!(refused.is_err(), model.state.is_terminal(), "{}", ctx());
                    if refused.is_ok() {
                        let sent = now;
                        now += latency;
                        core.finish_renew(ms(now), ms(sent), reply);
                        model.expire(now);
                        if model.state == LeaseState::Active {
                            match reply {
                                RenewReply::Renewed { remaining } => {
                                    let end = sent
                                        + ttl_ms
                                            .min(remaining.as_millis() as u64)
                                            .saturating_sub(drift_ms);
                                    model.valid_until_ms = model.valid_until_ms.max(end);
                                    model.expire(now);
                                }
                                RenewReply::Lost => model.state = LeaseState::Lost,
                                RenewReply::Indeterminate => model.state = LeaseState::Unknown,
                                RenewReply::NotApplied => {}
                            }
                        }
                    }
                }
                Op::Release { latency, reply } => {
                    model.expire(now);
                    let refused = core.begin_release(ms(now));
                    assert_eq!(
                        refused.is_err(),
                        model.state == LeaseState::Released,
                        "{}",
                        ctx()
                    );
                    if refused.is_ok() {
                        now += latency;
                        core.finish_release(ms(now), reply);
                        model.expire(now);
                        if model.state == LeaseState::Active {
                            model.state = match reply {
                                ReleaseReply::Released | ReleaseReply::AlreadyAbsent => {
                                    LeaseState::Released
                                }
                                ReleaseReply::NotOwner => LeaseState::Lost,
                                ReleaseReply::Indeterminate => LeaseState::Unknown,
                                ReleaseReply::NotApplied => LeaseState::Active,
                            };
                        }
                    }
                }
            }
            model.expire(now);
            assert_eq!(core.observe(ms(now)), model.state, "{}", ctx());
            assert_eq!(core.valid_until(), ms(model.valid_until_ms), "{}", ctx());
            // Invariants, whatever the model says.
            if was_terminal {
                assert_eq!(
                    model.state,
                    before.state,
                    "terminal states are terminal: {}",
                    ctx()
                );
            }
            assert!(
                model.valid_until_ms >= before.valid_until_ms,
                "validity never shrinks: {}",
                ctx()
            );
            if core.observe(ms(now)) == LeaseState::Active {
                assert!(
                    ms(now) < core.valid_until(),
                    "ACTIVE only while locally valid: {}",
                    ctx()
                );
            }
            *reached.entry(model.state).or_default() += 1;
        }
    }
    // The generator reaches every state, so the comparison means something.
    for state in [
        LeaseState::Active,
        LeaseState::Lost,
        LeaseState::Released,
        LeaseState::Unknown,
    ] {
        assert!(
            reached.get(&state).copied().unwrap_or(0) > 100,
            "{state} reached too rarely: {reached:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Against a real service
// ---------------------------------------------------------------------------

const P: &str = "client-test";

fn client_for(app: &TestApp) -> Client {
    Client::new(ClientSettings::new(app.base.clone())).expect("client")
}

fn client_with(app: &TestApp, tune: impl FnOnce(&mut ClientSettings)) -> Client {
    let mut settings = ClientSettings::new(app.base.clone());
    tune(&mut settings);
    Client::new(settings).expect("client")
}

fn resource() -> ResourceId {
    ResourceId {
        purpose: Purpose::parse(P).expect("purpose"),
        digest: ResourceDigest::of_raw_id(&unique("res-")),
    }
}

fn lease_key(app: &TestApp, r: &ResourceId) -> String {
    format!("{}:lease:v2:{{{}:{}}}", app.namespace, r.purpose, r.digest)
}

async fn attempt(client: &Client) -> Attempt {
    client
        .create_attempt(&OperationId::parse(&unique("op-")).expect("op"))
        .await
        .expect("attempt")
}

async fn acquired(client: &Client, r: &ResourceId, ttl: Duration) -> LeaseHandle {
    let a = attempt(client).await;
    match client
        .acquire(r, &a, ttl, Duration::ZERO)
        .await
        .expect("acquire")
    {
        Acquire::Acquired { handle, .. } => handle,
        other => panic!("expected acquired, got {other:?}"),
    }
}

/// How long a test waits for a watchdog event before failing (a hang
/// guard, not a timing assertion: those are explicit where they matter).
const EVENT_WAIT: Duration = Duration::from_secs(10);

/// A watchdog's event stream, read per registration: events of other
/// registrations are kept for later, not dropped.
struct Events {
    rx: broadcast::Receiver<WatchdogEvent>,
    held: Vec<WatchdogEvent>,
}

impl Events {
    fn of(watchdog: &Watchdog) -> Self {
        Self {
            rx: watchdog.subscribe(),
            held: Vec::new(),
        }
    }

    /// The next event of registration `id`.
    async fn next(&mut self, id: u64) -> EventKind {
        if let Some(i) = self.held.iter().position(|e| e.registration == id) {
            return self.held.remove(i).kind;
        }
        let deadline = Instant::now() + EVENT_WAIT;
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Ok(e)) if e.registration == id => return e.kind,
                Ok(Ok(e)) => self.held.push(e),
                Ok(Err(e)) => panic!("watchdog events: {e}"),
                Err(_) => panic!("no watchdog event for registration {id} within {EVENT_WAIT:?}"),
            }
        }
    }

    /// Skips renewals up to the end of registration `id`.
    async fn end_of(&mut self, id: u64) -> EndReason {
        loop {
            match self.next(id).await {
                EventKind::Renewed { .. } => {}
                EventKind::Ended { reason } => return reason,
                other => panic!("registration {id}: {other:?}"),
            }
        }
    }

    /// Drops the watchdog and collects every event still due, until the
    /// channel closes (every registration task has finished).
    async fn drain(mut self, watchdog: Watchdog) -> Vec<WatchdogEvent> {
        watchdog.shutdown();
        drop(watchdog);
        let mut all = std::mem::take(&mut self.held);
        loop {
            match tokio::time::timeout(EVENT_WAIT, self.rx.recv()).await {
                Ok(Ok(e)) => all.push(e),
                Ok(Err(broadcast::error::RecvError::Closed)) => return all,
                Ok(Err(e)) => panic!("watchdog events: {e}"),
                Err(_) => panic!("watchdog tasks did not finish"),
            }
        }
    }
}

fn ended_count(events: &[WatchdogEvent], id: u64) -> usize {
    events
        .iter()
        .filter(|e| e.registration == id && matches!(e.kind, EventKind::Ended { .. }))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_mirror_the_server() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let client = client_for(&app);
    let r = resource();
    let a = attempt(&client).await;
    let ttl = Duration::from_secs(30);

    let handle = match client
        .acquire(&r, &a, ttl, Duration::ZERO)
        .await
        .expect("acquire")
    {
        Acquire::Acquired { handle, waited_ms } => {
            assert_eq!(waited_ms, None);
            handle
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(handle.state(), LeaseState::Active);
    assert_eq!(handle.lease().ttl_ms, 30_000);
    assert!(
        handle.valid_for() > ttl - Duration::from_secs(1) && handle.valid_for() <= ttl - 10 * MS,
        "{handle:?}"
    );
    let seen = client.inspect(&r, Some(&a)).await.expect("inspect");
    assert_eq!(
        (seen.held, seen.held_by, seen.fencing_token),
        (true, Some(HeldBy::Caller), Some(handle.fencing_token()))
    );
    assert_eq!(
        client.inspect(&r, None).await.expect("inspect").held_by,
        None
    );

    // Same attempt again: replayed, valid for at most the server's PTTL.
    let replay = client
        .acquire(&r, &a, Duration::from_secs(3600), Duration::ZERO)
        .await
        .expect("replay");
    let Acquire::ReplayedSameOperation { handle: replayed } = replay else {
        panic!("{replay:?}")
    };
    assert_eq!(replayed.fencing_token(), handle.fencing_token());
    assert!(replayed.lease().remaining_ms <= 30_000);
    assert!(replayed.valid_for() <= Duration::from_millis(replayed.lease().remaining_ms) - 10 * MS);

    let same_owner = Attempt {
        owner_token: a.owner_token.clone(),
        operation_id: OperationId::parse(&unique("op-")).expect("op"),
    };
    let conflict = client
        .acquire(&r, &same_owner, ttl, Duration::ZERO)
        .await
        .expect("conflict");
    assert!(
        matches!(conflict, Acquire::OwnerOperationConflict { retry_after_ms } if retry_after_ms > 0),
        "{conflict:?}"
    );
    let b = attempt(&client).await;
    let contended = client
        .acquire(&r, &b, ttl, 50 * MS)
        .await
        .expect("contended");
    assert!(
        matches!(contended, Acquire::Contended { retry_after_ms, waited_ms: Some(_), reason: None } if retry_after_ms > 0 && retry_after_ms <= 30_000),
        "{contended:?}"
    );
    assert!(matches!(
        client.renew(&r, &b, ttl).await,
        Ok(RenewOutcome::Lost {
            reason: LostReason::NotOwner
        })
    ));
    assert_eq!(client.release(&r, &b).await, Ok(ReleaseOutcome::NotOwner));

    let renewed = handle.renew().await.expect("renew");
    assert!(
        matches!(&renewed, RenewOutcome::Renewed { lease } if lease.fencing_token == handle.fencing_token()),
        "{renewed:?}"
    );
    assert_eq!(handle.release().await, Ok(ReleaseOutcome::Released));
    assert_eq!(handle.state(), LeaseState::Released);
    assert_eq!(
        handle.renew().await,
        Err(Error::Refused(Refused {
            state: LeaseState::Released
        }))
    );
    assert_eq!(
        handle.release().await,
        Err(Error::Refused(Refused {
            state: LeaseState::Released
        }))
    );
    // The other handle of the same attempt: the lease is gone, so
    // `already_absent` releases it too.
    assert_eq!(
        replayed.release().await,
        Ok(ReleaseOutcome::AlreadyAbsent { reason: None })
    );
    assert_eq!(replayed.state(), LeaseState::Released);

    // A waiting acquire gets the lease when the holder's expires; its
    // validity is still counted from its own send instant.
    let holder = acquired(&client, &r, Duration::from_millis(200)).await;
    match client
        .acquire(&r, &b, ttl, Duration::from_secs(10))
        .await
        .expect("acquire")
    {
        Acquire::Acquired { handle, waited_ms } => {
            assert!(handle.fencing_token() > holder.fencing_token());
            assert!(waited_ms.is_none_or(|w| w <= 10_000), "{waited_ms:?}");
            assert!(handle.valid_for() <= ttl - 10 * MS);
        }
        other => panic!("{other:?}"),
    }

    // The service's refusals are typed and name the field.
    match client
        .acquire(&r, &a, Duration::from_millis(5), Duration::ZERO)
        .await
    {
        Err(Error::Rejected(rej)) => {
            assert_eq!((rej.status, rej.outcome.as_str()), (422, "invalid_request"));
            assert_eq!(rej.errors[0].field, "ttlMs");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_lost_and_release_not_owner_end_the_handle() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let client = client_for(&app);
    let ttl = Duration::from_secs(30);

    // Released behind the handle's back: renew answers lost (absent).
    let r = resource();
    let a = attempt(&client).await;
    let Some(handle) = client
        .acquire(&r, &a, ttl, Duration::ZERO)
        .await
        .expect("acquire")
        .into_handle()
    else {
        panic!()
    };
    assert_eq!(client.release(&r, &a).await, Ok(ReleaseOutcome::Released));
    assert_eq!(
        handle.renew().await,
        Ok(RenewOutcome::Lost {
            reason: LostReason::Absent
        })
    );
    assert_eq!(handle.state(), LeaseState::Lost);
    assert_eq!(handle.valid_for(), Duration::ZERO);
    assert_eq!(
        handle.renew().await,
        Err(Error::Refused(Refused {
            state: LeaseState::Lost
        }))
    );
    // Clean-up release is still allowed on a LOST handle, which stays LOST.
    assert_eq!(
        handle.release().await,
        Ok(ReleaseOutcome::AlreadyAbsent { reason: None })
    );
    assert_eq!(handle.state(), LeaseState::Lost);

    // Someone else took it meanwhile: release answers not_owner → LOST.
    let r = resource();
    let a = attempt(&client).await;
    let Some(handle) = client
        .acquire(&r, &a, ttl, Duration::ZERO)
        .await
        .expect("acquire")
        .into_handle()
    else {
        panic!()
    };
    assert_eq!(client.release(&r, &a).await, Ok(ReleaseOutcome::Released));
    let other = acquired(&client, &r, ttl).await;
    assert_eq!(handle.release().await, Ok(ReleaseOutcome::NotOwner));
    assert_eq!(handle.state(), LeaseState::Lost);
    assert_eq!(other.state(), LeaseState::Active);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_without_local_validity_is_lost_and_refuses_to_renew() {
    let app = TestApp::spawn(&Backend::Memory).await;
    // A client whose drift budget swallows the whole TTL.
    let client = client_with(&app, |s| s.drift_budget = Duration::from_millis(100));
    let r = resource();
    let handle = acquired(&client, &r, Duration::from_millis(100)).await;
    assert_eq!(handle.state(), LeaseState::Lost);
    assert_eq!(
        handle.renew().await,
        Err(Error::Refused(Refused {
            state: LeaseState::Lost
        }))
    );
    let watchdog = Watchdog::new(1);
    assert_eq!(
        watchdog.register(&handle).err(),
        Some(WatchdogError::NotActive {
            state: LeaseState::Lost
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_key_is_sent_and_refusals_are_typed() {
    let dir = std::env::temp_dir().join(unique("leasehold-client-keys-"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let keys = dir.join("keys");
    let key = "client-test-key-0123456789";
    std::fs::write(&keys, format!("{key} {P}\n")).expect("write keys");
    let path = keys.to_str().expect("utf-8 path");
    let app = TestApp::spawn_with(args(&Backend::Memory, &["--api-keys-file", path])).await;
    let _ = std::fs::remove_dir_all(&dir);

    let anonymous = client_for(&app);
    let op = OperationId::parse("op-1").expect("op");
    match anonymous.create_attempt(&op).await {
        Err(Error::Rejected(r)) => {
            assert_eq!((r.status, r.outcome.as_str()), (401, "unauthorized"))
        }
        other => panic!("{other:?}"),
    }
    let keyed = client_with(&app, |s| s.api_key = Some(key.to_owned()));
    assert!(
        !format!("{:?}", keyed.settings()).contains(key),
        "Debug must redact the API key"
    );
    let handle = acquired(&keyed, &resource(), Duration::from_secs(30)).await;
    assert_eq!(handle.release().await, Ok(ReleaseOutcome::Released));
    let elsewhere = ResourceId {
        purpose: Purpose::parse("other-purpose").expect("purpose"),
        digest: ResourceDigest::of_raw_id("x"),
    };
    match keyed.inspect(&elsewhere, None).await {
        Err(Error::Rejected(r)) => assert_eq!((r.status, r.outcome.as_str()), (403, "forbidden")),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transport_failures_are_unavailable_before_sending_and_indeterminate_after() {
    // Nothing listens: every verb is Unavailable (never written).
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let client = Client::new(ClientSettings::new(format!("http://{closed}"))).expect("client");
    let r = resource();
    let op = OperationId::parse("op-1").expect("op");
    let unavailable = Err::<(), _>(Error::Unavailable {
        retry_after: None,
        cause: Cause::Connect,
    });
    assert_eq!(client.create_attempt(&op).await.map(|_| ()), unavailable);
    let a = Attempt {
        owner_token: leasehold::domain::OwnerToken::generate().expect("csprng"),
        operation_id: op.clone(),
    };
    assert_eq!(
        client
            .acquire(&r, &a, Duration::from_secs(1), Duration::ZERO)
            .await
            .map(|_| ()),
        unavailable
    );
    assert_eq!(
        client
            .renew(&r, &a, Duration::from_secs(1))
            .await
            .map(|_| ()),
        unavailable
    );
    assert_eq!(client.release(&r, &a).await.map(|_| ()), unavailable);
    assert_eq!(client.inspect(&r, Some(&a)).await.map(|_| ()), unavailable);

    // A peer that reads the request, then misbehaves in each way.
    for (reply, cause) in [
        (&b""[..], Cause::ConnectionLost),
        (&b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"outc"[..], Cause::ConnectionLost),
        (&b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 9\r\n\r\nnot json!"[..], Cause::UnexpectedReply { status: 200 }),
        (&b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 2\r\n\r\n{}"[..], Cause::UnexpectedReply { status: 500 }),
    ] {
        let peer = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = peer.local_addr().expect("addr");
        let served = tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let (mut s, _) = peer.accept().await.expect("accept");
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            // The whole request: head and the small JSON body.
            while !(got.windows(4).any(|w| w == b"\r\n\r\n") && got.ends_with(b"}")) {
                let n = s.read(&mut buf).await.expect("read");
                assert!(n > 0, "client closed early");
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(reply).await.expect("write");
            drop(s);
            got
        });
        let client = Client::new(ClientSettings::new(format!("http://{addr}"))).expect("client");
        let got = client.renew(&r, &a, Duration::from_secs(1)).await;
        assert_eq!(got, Err(Error::Indeterminate { operation_id: op.clone(), cause }), "{:?}", String::from_utf8_lossy(reply));
        let request = served.await.expect("peer");
        let head = String::from_utf8_lossy(&request).to_lowercase();
        assert!(head.starts_with("patch /leases/client-test/v1."), "{head}");
        assert!(head.contains("lease-operation-id: op-1"), "{head}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renew_timing_out_makes_the_handle_unknown_without_extending_it() {
    let server = RedisServer::start();
    let app = TestApp::spawn(&Backend::Redis(server.url())).await;
    // The service waits 2 s for Redis; the client gives up after 300 ms.
    let client = client_with(&app, |s| s.request_timeout = Duration::from_millis(300));
    let r = resource();
    let handle = acquired(&client, &r, Duration::from_secs(30)).await;
    let abandoned = acquired(&client, &resource(), Duration::from_secs(30)).await;
    let before = handle.valid_for();
    server.freeze();
    let result = handle.renew().await;
    // A release given up on mid-flight may have happened: UNKNOWN.
    let gave_up = tokio::time::timeout(Duration::from_millis(100), abandoned.release()).await;
    server.thaw();
    assert!(gave_up.is_err(), "{gave_up:?}");
    assert_eq!(abandoned.state(), LeaseState::Unknown);
    assert!(
        matches!(&result, Err(Error::Indeterminate { cause: Cause::Timeout, operation_id }) if operation_id == handle.operation_id()),
        "{result:?}"
    );
    assert_eq!(handle.state(), LeaseState::Unknown);
    assert_eq!(handle.valid_for(), Duration::ZERO);
    assert!(before > Duration::ZERO);
    assert_eq!(
        handle.renew().await,
        Err(Error::Refused(Refused {
            state: LeaseState::Unknown
        }))
    );
    // Clean-up is allowed and answered; the handle stays UNKNOWN.
    assert_eq!(handle.release().await, Ok(ReleaseOutcome::Released));
    assert_eq!(handle.state(), LeaseState::Unknown);
}

// ---------------------------------------------------------------------------
// The watchdog against a real service on real Redis
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_a_lease_alive_for_five_ttls() {
    let server = RedisServer::start();
    let app = TestApp::spawn(&Backend::Redis(server.url())).await;
    let client = client_for(&app);
    let r = resource();
    let ttl = Duration::from_millis(300);
    let watchdog = Watchdog::new(4);
    let mut events = Events::of(&watchdog);
    let a = attempt(&client).await;
    let started = Instant::now();
    let Some(handle) = client
        .acquire(&r, &a, ttl, Duration::ZERO)
        .await
        .expect("acquire")
        .into_handle()
    else {
        panic!()
    };
    let registration = watchdog.register(&handle).expect("register");
    let id = registration.id();
    let token = registration.token();

    let mut renewals = 0;
    while started.elapsed() < 5 * ttl {
        match events.next(id).await {
            EventKind::Renewed {
                remaining_ms,
                valid_for,
            } => {
                renewals += 1;
                assert!(remaining_ms > 0 && remaining_ms <= 300, "{remaining_ms}");
                assert!(valid_for <= ttl - 10 * MS, "{valid_for:?}");
            }
            other => panic!(
                "after {renewals} renewals in {:?}: {other:?}",
                started.elapsed()
            ),
        }
    }
    // Five TTLs of renewals at about a third of the TTL each.
    assert!(
        renewals >= 10,
        "only {renewals} renewals in {:?}",
        started.elapsed()
    );
    println!(
        "{renewals} renewals in {:?} (TTL {ttl:?})",
        started.elapsed()
    );
    assert!(!token.is_cancelled());
    assert_eq!(handle.state(), LeaseState::Active);
    let seen = client.inspect(&r, Some(&a)).await.expect("inspect");
    assert_eq!(
        (seen.held, seen.held_by, seen.fencing_token),
        (true, Some(HeldBy::Caller), Some(handle.fencing_token()))
    );
    let pttl: i64 = server
        .cli(&["PTTL", &lease_key(&app, &r)])
        .trim()
        .parse()
        .expect("PTTL");
    assert!(pttl > 0 && pttl <= 300, "{pttl}");
    let other = attempt(&client).await;
    assert!(matches!(
        client.acquire(&r, &other, ttl, Duration::ZERO).await,
        Ok(Acquire::Contended { .. })
    ));

    // Release ends the registration: token cancelled, no more renewals.
    assert_eq!(handle.release().await, Ok(ReleaseOutcome::Released));
    assert_eq!(events.end_of(id).await, EndReason::Released);
    assert!(token.is_cancelled());
    assert_eq!(registration.end_reason(), Some(EndReason::Released));
    let rest = events.drain(watchdog).await;
    assert!(
        rest.iter().all(|e| e.registration != id),
        "events after the end: {rest:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_key_cancels_the_token_within_one_cadence() {
    let server = RedisServer::start();
    let app = TestApp::spawn(&Backend::Redis(server.url())).await;
    let client = client_for(&app);
    // Long enough that local expiry (~3 s) cannot pass for the renew's
    // `lost`, which comes at most one cadence (~1 s) after the deletion.
    let ttl = Duration::from_millis(3000);
    let cadence = ttl / 3;
    let watchdog = Watchdog::new(4);
    let mut events = Events::of(&watchdog);
    let mut ids = Vec::new();
    for flush in [false, true] {
        let r = resource();
        let handle = acquired(&client, &r, ttl).await;
        let mut registration = watchdog.register(&handle).expect("register");
        let id = registration.id();
        ids.push(id);
        let token = registration.token();
        // One renewal first, so the deletion lands mid-cadence.
        assert!(matches!(events.next(id).await, EventKind::Renewed { .. }));
        let deleted = Instant::now();
        if flush {
            assert_eq!(server.cli(&["FLUSHALL"]).trim(), "OK");
        } else {
            assert_eq!(server.cli(&["DEL", &lease_key(&app, &r)]).trim(), "1");
        }
        let within = cadence + Duration::from_millis(500);
        assert!(
            tokio::time::timeout(within, token.cancelled())
                .await
                .is_ok(),
            "token not cancelled within {within:?} of the deletion (FLUSHALL: {flush})"
        );
        let took = deleted.elapsed();
        assert_eq!(
            registration.ended().await,
            EndReason::Lost,
            "FLUSHALL: {flush}"
        );
        assert_eq!(handle.state(), LeaseState::Lost);
        assert_eq!(
            handle.renew().await,
            Err(Error::Refused(Refused {
                state: LeaseState::Lost
            }))
        );
        assert_eq!(events.end_of(id).await, EndReason::Lost);
        println!(
            "FLUSHALL {flush}: token cancelled {took:?} after the deletion (cadence {cadence:?})"
        );
    }
    let rest = events.drain(watchdog).await;
    for id in ids {
        assert_eq!(ended_count(&rest, id), 0, "a second end for {id}: {rest:?}");
    }
}

/// Acquires, retrying with the same attempt on `indeterminate` (the reason
/// attempts exist: the retry answers `replayed_same_operation`).
async fn acquired_retrying(client: &Client, r: &ResourceId, ttl: Duration) -> LeaseHandle {
    let a = attempt(client).await;
    for _ in 0..5 {
        match client.acquire(r, &a, ttl, Duration::ZERO).await {
            Ok(Acquire::Acquired { handle, .. } | Acquire::ReplayedSameOperation { handle }) => {
                return handle
            }
            Err(Error::Indeterminate { .. }) => continue,
            other => panic!("{other:?}"),
        }
    }
    panic!("acquire stayed indeterminate");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_makes_the_lease_unknown_and_cancels_once() {
    let server = RedisServer::start();
    // A command timeout short enough to answer `indeterminate` well within
    // the lease's validity, long enough not to trip on a loaded machine
    // before the freeze.
    let app = TestApp::spawn_with(args(
        &Backend::Redis(server.url()),
        &["--command-timeout-ms", "500"],
    ))
    .await;
    let client = client_for(&app);
    let r = resource();
    // Renew every ~800 ms; the frozen renew's 504 comes ~500 ms after it is
    // sent, long before validity (~2.4 s) runs out.
    let ttl = Duration::from_millis(2400);
    let watchdog = Watchdog::new(4);
    let mut events = Events::of(&watchdog);
    let handle = acquired_retrying(&client, &r, ttl).await;
    let mut registration = watchdog.register(&handle).expect("register");
    let id = registration.id();
    let token = registration.token();
    assert!(matches!(events.next(id).await, EventKind::Renewed { .. }));

    server.freeze();
    let frozen = Instant::now();
    let cancelled = tokio::time::timeout(ttl, token.cancelled()).await;
    println!("frozen Redis: token cancelled after {:?}", frozen.elapsed());
    server.thaw();
    assert!(
        cancelled.is_ok(),
        "token not cancelled while Redis was frozen"
    );
    assert_eq!(registration.ended().await, EndReason::Unknown);
    assert_eq!(handle.state(), LeaseState::Unknown);
    assert_eq!(
        handle.renew().await,
        Err(Error::Refused(Refused {
            state: LeaseState::Unknown
        }))
    );
    assert_eq!(events.end_of(id).await, EndReason::Unknown);
    // Later events on the handle (a clean-up release) end nothing again.
    let cleanup = handle.release().await;
    assert!(
        matches!(
            cleanup,
            Ok(ReleaseOutcome::Released) | Err(Error::Indeterminate { .. })
        ),
        "{cleanup:?}"
    );
    assert_eq!(handle.state(), LeaseState::Unknown);
    let rest = events.drain(watchdog).await;
    assert_eq!(ended_count(&rest, id), 0, "{rest:?}");
    assert!(token.is_cancelled());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validity_running_out_with_a_renew_in_flight_cancels_and_stores_lost() {
    let server = RedisServer::start();
    // The service waits up to 2 s on Redis: far longer than the validity.
    let app = TestApp::spawn(&Backend::Redis(server.url())).await;
    let client = client_for(&app);
    let r = resource();
    let ttl = Duration::from_millis(300);
    let watchdog = Watchdog::new(4);
    let mut events = Events::of(&watchdog);
    let handle = acquired(&client, &r, ttl).await;
    let mut registration = watchdog.register(&handle).expect("register");
    let id = registration.id();
    let token = registration.token();
    assert!(matches!(events.next(id).await, EventKind::Renewed { .. }));

    server.freeze();
    let frozen = Instant::now();
    let cancelled = tokio::time::timeout(Duration::from_secs(3), token.cancelled()).await;
    let took = frozen.elapsed();
    server.thaw();
    assert!(
        cancelled.is_ok(),
        "token not cancelled when local validity ran out"
    );
    // At validity's end (< 290 ms), not when the renew's answer comes (~2 s).
    assert!(
        took < Duration::from_secs(1),
        "cancelled {took:?} after the freeze"
    );
    println!("validity ran out with a renew in flight: token cancelled {took:?} after the freeze");
    assert_eq!(registration.ended().await, EndReason::Expired);
    // The work was stopped one drift budget (10 ms for this TTL) before
    // local validity ends, never after it: what is left is at most that.
    let left = handle.valid_for();
    assert!(
        left <= Duration::from_millis(10),
        "stopped {left:?} before validity's end"
    );
    // Once validity's end has passed (a deadline, not a synchronisation),
    // the stored state is LOST, and renew is refused without a request.
    tokio::time::sleep(left + Duration::from_millis(1)).await;
    assert_eq!(handle.state(), LeaseState::Lost);
    assert_eq!(handle.valid_for(), Duration::ZERO);
    assert_eq!(
        handle.renew().await,
        Err(Error::Refused(Refused {
            state: LeaseState::Lost
        }))
    );
    assert_eq!(events.end_of(id).await, EndReason::Expired);
    let rest = events.drain(watchdog).await;
    assert_eq!(ended_count(&rest, id), 0, "{rest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_are_bounded_and_dropping_a_handle_stops_renewing() {
    let app = TestApp::spawn(&Backend::Memory).await;
    let client = client_for(&app);
    let ttl = Duration::from_millis(600);
    let watchdog = Watchdog::new(2);
    let mut events = Events::of(&watchdog);
    let (r1, r2, r3) = (resource(), resource(), resource());
    let (h1, h2, h3) = (
        acquired(&client, &r1, ttl).await,
        acquired(&client, &r2, ttl).await,
        acquired(&client, &r3, ttl).await,
    );
    let mut reg1 = watchdog.register(&h1).expect("first");
    assert_eq!(
        watchdog.register(&h1).err(),
        Some(WatchdogError::AlreadyRegistered)
    );
    let reg2 = watchdog.register(&h2).expect("second");
    assert_eq!(
        watchdog.register(&h3).err(),
        Some(WatchdogError::Full { max: 2 })
    );
    assert_eq!(watchdog.len(), 2);

    // The caller cancelling its own token frees the slot and stops renewing.
    reg1.token().cancel();
    assert_eq!(reg1.ended().await, EndReason::CancelledByCaller);
    assert_eq!(h1.state(), LeaseState::Active);
    let reg3 = watchdog.register(&h3).expect("a slot was freed");

    // Dropping an ACTIVE handle neither releases it nor keeps it alive: the
    // registration ends when the validity it had runs out, and the lease
    // then expires on the server.
    assert!(matches!(
        events.next(reg2.id()).await,
        EventKind::Renewed { .. }
    ));
    let before = client.inspect(&r2, None).await.expect("inspect");
    drop(h2);
    let seen = client.inspect(&r2, None).await.expect("inspect");
    assert!(seen.held, "dropping the handle must not release: {seen:?}");
    assert_eq!(seen.fencing_token, before.fencing_token);
    assert_eq!(events.end_of(reg2.id()).await, EndReason::Expired);
    assert!(reg2.token().is_cancelled());
    // Someone else waiting gets it once it expires: nothing renews it.
    let other = attempt(&client).await;
    match client
        .acquire(&r2, &other, ttl, Duration::from_secs(10))
        .await
    {
        Ok(Acquire::Acquired { handle, .. }) => {
            assert!(Some(handle.fencing_token()) > before.fencing_token)
        }
        other => panic!("the dropped handle's lease was not left to expire: {other:?}"),
    }

    // The other registration is unaffected; shutdown ends it as Stopped.
    assert!(matches!(
        events.next(reg3.id()).await,
        EventKind::Renewed { .. }
    ));
    let rest = events.drain(watchdog).await;
    let stopped = WatchdogEvent {
        registration: reg3.id(),
        kind: EventKind::Ended {
            reason: EndReason::Stopped,
        },
    };
    assert!(rest.contains(&stopped), "{rest:?}");
    assert_eq!(ended_count(&rest, reg3.id()), 1);
    assert!(reg3.token().is_cancelled());
    assert_eq!(h3.state(), LeaseState::Active);
}
