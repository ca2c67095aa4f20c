//! The checker's own tests: small hand-made histories that must pass and
//! histories that must fail, one rule at a time.

use std::time::Duration;

use crate::common::history::Event;
use crate::common::history::{
    beliefs, check_breaks, check_fencing, check_honesty, check_liveness, check_max_hold,
    check_recovery, check_refusals, check_safety, check_session_ends, check_typed, documented,
    FaultWindow, Liveness, Verb,
};

const DRIFT: Duration = Duration::from_millis(10);

fn at(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// An answered request: `verb` by `attempt` on resource 0, sent at `send` ms
/// and answered at `reply` ms, with the status the table gives `outcome`.
fn ev(attempt: &str, verb: Verb, send: u64, reply: u64, outcome: &str) -> Event {
    let status = match (verb, outcome) {
        (_, "acquired") | (Verb::Attempt, _) => 201,
        (_, "contended" | "owner_operation_conflict" | "not_owner") => 409,
        (_, "lost") => 404,
        (_, "unavailable" | "overloaded") => 503,
        (_, "indeterminate") => 504,
        _ => 200,
    };
    Event {
        attempt: attempt.into(),
        verb: Some(verb),
        send: at(send),
        reply: at(reply),
        status,
        outcome: outcome.into(),
        problem_json: status >= 300,
        retry_after: status == 503,
        operation_id: (outcome == "indeterminate").then(|| attempt.to_owned()),
        ..Event::default()
    }
}

/// A grant with its token and remainingMs.
fn grant(
    attempt: &str,
    verb: Verb,
    send: u64,
    reply: u64,
    outcome: &str,
    token: u64,
    remaining: u64,
) -> Event {
    Event {
        fencing_token: Some(token),
        remaining_ms: Some(remaining),
        ..ev(attempt, verb, send, reply, outcome)
    }
}

fn numbered(mut events: Vec<Event>) -> Vec<Event> {
    for (i, e) in events.iter_mut().enumerate() {
        e.id = i;
    }
    events
}

// --- safety ----------------------------------------------------------------

#[test]
fn safety_passes_for_handover_after_release_and_after_expiry() {
    let h = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 1, 100),
        ev("a", Verb::Release, 50, 55, "released"),
        grant("b", Verb::Acquire, 52, 60, "acquired", 2, 100),
        // b never releases: its lease ends at 52 + 100 - 10 = 142.
        grant("c", Verb::Acquire, 140, 145, "acquired", 3, 100),
    ]);
    assert!(check_safety(&h, DRIFT, &[]).is_empty());
}

#[test]
fn safety_fails_for_two_holders_at_once() {
    let h = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 1, 100),
        grant("b", Verb::Acquire, 20, 30, "acquired", 2, 100),
    ]);
    let v = check_safety(&h, DRIFT, &[]);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].check, "safety");
    assert_eq!(v[0].events.len(), 2);
}

/// An acquire grant asked with `limit` and `shared`.
fn shaped(attempt: &str, send: u64, token: u64, limit: u64, shared: bool) -> Event {
    Event {
        limit: Some(limit),
        shared,
        ..grant(
            attempt,
            Verb::Acquire,
            send,
            send + 5,
            "acquired",
            token,
            100,
        )
    }
}

#[test]
fn safety_allows_up_to_limit_holders_and_no_more() {
    let three = numbered(vec![
        shaped("a", 0, 1, 3, false),
        shaped("b", 10, 2, 3, false),
        shaped("c", 20, 3, 3, false),
    ]);
    assert!(check_safety(&three, DRIFT, &[]).is_empty());
    let four = numbered(vec![
        shaped("a", 0, 1, 3, false),
        shaped("b", 10, 2, 3, false),
        shaped("c", 20, 3, 3, false),
        shaped("d", 30, 4, 3, false),
    ]);
    let v = check_safety(&four, DRIFT, &[]);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].what.contains("4 attempts"), "{}", v[0].what);
    assert_eq!(v[0].events.len(), 4);
}

#[test]
fn safety_allows_many_shared_but_never_shared_with_exclusive() {
    let readers = numbered(vec![
        shaped("r1", 0, 1, 1, true),
        shaped("r2", 10, 2, 1, true),
        shaped("r3", 20, 3, 1, true),
    ]);
    assert!(check_safety(&readers, DRIFT, &[]).is_empty());
    let writer_after = numbered(vec![
        shaped("r1", 0, 1, 1, true),
        shaped("w", 50, 2, 1, false),
    ]);
    let v = check_safety(&writer_after, DRIFT, &[]);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].what.contains("shared and an exclusive"),
        "{}",
        v[0].what
    );
    let reader_after = numbered(vec![
        shaped("w", 0, 1, 1, false),
        shaped("r1", 50, 2, 1, true),
    ]);
    assert_eq!(check_safety(&reader_after, DRIFT, &[]).len(), 1);
}

#[test]
fn safety_cuts_at_renew_and_a_renew_starts_its_own_interval() {
    // a renews at 40 (renewed: a new interval to 40 + 200 - 10 = 230), so b
    // acquiring at 100 overlaps the renewed interval, not the first one.
    let h = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 1, 100),
        grant("a", Verb::Renew, 40, 45, "renewed", 1, 200),
        grant("b", Verb::Acquire, 100, 110, "acquired", 2, 100),
    ]);
    let v = check_safety(&h, DRIFT, &[]);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].events[0].verb, Some(Verb::Renew));
    // A lost renew ends the belief at its send.
    let h = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 1, 100),
        ev("a", Verb::Renew, 40, 45, "lost"),
        grant("b", Verb::Acquire, 41, 50, "acquired", 2, 100),
    ]);
    assert!(check_safety(&h, DRIFT, &[]).is_empty());
}

#[test]
fn safety_ignores_uncertain_answers_and_same_attempt_replays() {
    let h = numbered(vec![
        ev("a", Verb::Acquire, 0, 500, "indeterminate"),
        ev("c", Verb::Acquire, 0, 5, "unavailable"),
        grant("b", Verb::Acquire, 10, 20, "acquired", 2, 1000),
        grant(
            "b",
            Verb::Acquire,
            30,
            40,
            "replayed_same_operation",
            2,
            980,
        ),
    ]);
    assert!(check_safety(&h, DRIFT, &[]).is_empty());
}

#[test]
fn safety_belief_ends_drift_before_send_plus_remaining() {
    let h = vec![grant("a", Verb::Acquire, 100, 150, "acquired", 1, 1000)];
    let b = beliefs(&h, DRIFT);
    assert_eq!((b[0].start, b[0].end), (at(150), at(1090)));
    // An answer arriving after its own validity grants nothing.
    let h = vec![grant("a", Verb::Acquire, 0, 200, "acquired", 1, 100)];
    assert!(beliefs(&h, DRIFT).is_empty());
}

#[test]
fn safety_is_not_claimed_across_data_loss() {
    let h = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 1, 1000),
        grant("b", Verb::Acquire, 300, 310, "acquired", 2, 1000),
    ]);
    let loss = FaultWindow {
        name: "restarted empty".into(),
        start: at(100),
        end: at(200),
        data_loss: true,
        definite_refusal: false,
        on_one_master: false,
    };
    assert!(check_safety(&h, DRIFT, std::slice::from_ref(&loss)).is_empty());
    let no_loss = FaultWindow {
        data_loss: false,
        ..loss
    };
    assert_eq!(check_safety(&h, DRIFT, &[no_loss]).len(), 1);
}

// --- fencing ---------------------------------------------------------------

#[test]
fn fencing_passes_for_increasing_tokens_and_matching_replays() {
    let h = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 10, 100),
        grant("a", Verb::Acquire, 6, 8, "replayed_same_operation", 10, 90),
        grant("a", Verb::Renew, 20, 25, "renewed", 10, 100),
        grant("b", Verb::Acquire, 200, 205, "acquired", 11, 100),
        // Concurrent acquisitions may come in either order.
        grant("c", Verb::Acquire, 300, 400, "acquired", 13, 10),
        grant("d", Verb::Acquire, 310, 390, "acquired", 12, 10),
    ]);
    assert!(check_fencing(&h).is_empty(), "{:?}", check_fencing(&h));
}

#[test]
fn fencing_fails_for_a_smaller_token_later_in_real_time() {
    let h = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 10, 100),
        grant("b", Verb::Acquire, 200, 205, "acquired", 9, 100),
    ]);
    let v = check_fencing(&h);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].check, "fencing");
}

#[test]
fn fencing_fails_for_a_token_handed_to_two_attempts() {
    let h = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 10, 100),
        grant(
            "b",
            Verb::Acquire,
            50,
            55,
            "replayed_same_operation",
            10,
            50,
        ),
    ]);
    assert!(check_fencing(&h)
        .iter()
        .any(|v| v.what.contains("two attempts")));
}

#[test]
fn fencing_fails_for_a_replay_with_another_token_unless_an_acquire_was_uncertain() {
    let h = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 10, 100),
        grant("a", Verb::Renew, 20, 25, "renewed", 11, 100),
    ]);
    assert_eq!(check_fencing(&h).len(), 1);
    // After an indeterminate re-acquire (the lease had expired), a new token
    // is legitimate.
    let h = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 10, 10),
        ev("a", Verb::Acquire, 100, 600, "indeterminate"),
        grant(
            "a",
            Verb::Acquire,
            700,
            705,
            "replayed_same_operation",
            12,
            100,
        ),
    ]);
    assert!(check_fencing(&h).is_empty());
}

// --- honesty ---------------------------------------------------------------

#[test]
fn honesty_passes_when_a_replay_follows_an_uncertain_acquire() {
    let h = numbered(vec![
        ev("a", Verb::Acquire, 0, 5, "unavailable"),
        ev("a", Verb::Acquire, 10, 600, "indeterminate"),
        grant(
            "a",
            Verb::Acquire,
            700,
            705,
            "replayed_same_operation",
            1,
            100,
        ),
        ev("b", Verb::Acquire, 0, 5, "overloaded"),
        ev("b", Verb::Release, 10, 15, "already_absent"),
    ]);
    assert!(check_honesty(&h).is_empty());
}

#[test]
fn honesty_fails_when_not_applied_was_a_lie() {
    let mut inspect = ev("c", Verb::Inspect, 10, 15, "inspected");
    inspect.held_by = Some("caller".into());
    let h = numbered(vec![
        ev("a", Verb::Acquire, 0, 5, "unavailable"),
        grant(
            "a",
            Verb::Acquire,
            10,
            15,
            "replayed_same_operation",
            1,
            100,
        ),
        ev("b", Verb::Acquire, 0, 5, "overloaded"),
        ev("b", Verb::Release, 10, 15, "released"),
        ev("c", Verb::Acquire, 0, 5, "unavailable"),
        inspect,
    ]);
    let v = check_honesty(&h);
    assert_eq!(v.len(), 3, "{v:?}");
    assert!(v.iter().all(|v| v.check == "honesty"));
}

// --- typed -----------------------------------------------------------------

#[test]
fn typed_accepts_the_documented_table() {
    for (verb, status, outcome) in [
        (Verb::Acquire, 201, "acquired"),
        (Verb::Acquire, 200, "replayed_same_operation"),
        (Verb::Acquire, 409, "contended"),
        (Verb::Acquire, 409, "owner_operation_conflict"),
        (Verb::Renew, 200, "renewed"),
        (Verb::Renew, 404, "lost"),
        (Verb::Renew, 409, "lost"),
        (Verb::Release, 200, "released"),
        (Verb::Release, 200, "already_absent"),
        (Verb::Release, 409, "not_owner"),
        (Verb::Inspect, 200, "inspected"),
        (Verb::Release, 503, "unavailable"),
        (Verb::Renew, 503, "overloaded"),
        (Verb::Acquire, 504, "indeterminate"),
        (Verb::Attempt, 201, "attempt_created"),
    ] {
        assert!(
            documented(verb, status, outcome),
            "{verb:?} {status} {outcome}"
        );
    }
    for (verb, status, outcome) in [
        (Verb::Acquire, 504, "unavailable"),
        (Verb::Acquire, 500, "internal"),
        (Verb::Release, 200, "renewed"),
        (Verb::Renew, 200, "acquired"),
        (Verb::Attempt, 503, "unavailable"),
    ] {
        assert!(
            !documented(verb, status, outcome),
            "{verb:?} {status} {outcome}"
        );
    }
}

#[test]
fn typed_fails_on_transport_errors_and_malformed_answers() {
    let ok = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 1, 100),
        ev("a", Verb::Acquire, 10, 600, "indeterminate"),
        ev("b", Verb::Acquire, 10, 15, "unavailable"),
    ]);
    assert!(check_typed(&ok).is_empty(), "{:?}", check_typed(&ok));
    let mut transport = ev("a", Verb::Acquire, 0, 5, "");
    transport.status = 0;
    transport.transport_error = Some("connection refused".into());
    let mut no_retry_after = ev("b", Verb::Acquire, 0, 5, "unavailable");
    no_retry_after.retry_after = false;
    let mut wrong_status = ev("c", Verb::Acquire, 0, 5, "unavailable");
    wrong_status.status = 504;
    let no_token = ev("d", Verb::Acquire, 0, 5, "acquired");
    let mut no_op = ev("e", Verb::Acquire, 0, 5, "indeterminate");
    no_op.operation_id = None;
    let h = numbered(vec![
        transport,
        no_retry_after,
        wrong_status,
        no_token,
        no_op,
    ]);
    let v = check_typed(&h);
    assert_eq!(v.len(), 5, "{v:?}");
}

// --- recovery --------------------------------------------------------------

#[test]
fn recovery_needs_an_acquired_sent_after_the_window_within_the_bound() {
    let window = FaultWindow {
        name: "frozen".into(),
        start: at(1000),
        end: at(2000),
        data_loss: false,
        definite_refusal: false,
        on_one_master: false,
    };
    let h = numbered(vec![
        grant("a", Verb::Acquire, 1500, 2100, "acquired", 1, 100),
        ev("b", Verb::Acquire, 2000, 2010, "unavailable"),
        grant("c", Verb::Acquire, 2500, 2600, "acquired", 2, 100),
    ]);
    let bound = Duration::from_secs(1);
    assert!(check_recovery(&h, std::slice::from_ref(&window), bound).is_empty());
    let late = numbered(vec![grant(
        "c",
        Verb::Acquire,
        2500,
        3600,
        "acquired",
        2,
        100,
    )]);
    assert_eq!(
        check_recovery(&late, std::slice::from_ref(&window), bound).len(),
        1
    );
    assert_eq!(check_recovery(&[], &[window], bound).len(), 1);
}

// --- refusals --------------------------------------------------------------

#[test]
fn refusal_windows_admit_unavailable_but_not_indeterminate() {
    let full = FaultWindow {
        name: "full (OOM)".into(),
        start: at(1000),
        end: at(2000),
        data_loss: false,
        definite_refusal: true,
        on_one_master: false,
    };
    let ok = numbered(vec![
        ev("a", Verb::Acquire, 1100, 1105, "unavailable"),
        ev("b", Verb::Acquire, 1100, 1105, "contended"),
        // In flight when the window began or still unanswered at its end.
        ev("c", Verb::Acquire, 900, 1500, "indeterminate"),
        ev("d", Verb::Acquire, 1900, 2500, "indeterminate"),
    ]);
    assert!(check_refusals(&ok, std::slice::from_ref(&full)).is_empty());
    let bad = numbered(vec![ev("a", Verb::Acquire, 1100, 1600, "indeterminate")]);
    let v = check_refusals(&bad, std::slice::from_ref(&full));
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].check, "refusal");
    let not_refusing = FaultWindow {
        definite_refusal: false,
        on_one_master: false,
        ..full
    };
    assert!(check_refusals(&bad, &[not_refusing]).is_empty());
}

/// On a Cluster with one master refusing, a session's renew may renew
/// its record on another master and be refused a lease here: its
/// `indeterminate` is honest; a lease's own call is still judged.
#[test]
fn a_session_call_is_exempt_from_one_refusing_master_of_several() {
    let one = FaultWindow {
        name: "min-replicas unmet".into(),
        start: at(1000),
        end: at(2000),
        data_loss: false,
        definite_refusal: true,
        on_one_master: true,
    };
    let session = Event {
        session: Some("s1.x".into()),
        ..ev("a", Verb::Renew, 1100, 1200, "indeterminate")
    };
    let own = ev("b", Verb::Renew, 1100, 1200, "indeterminate");
    let events = numbered(vec![session.clone(), own]);
    let v = check_refusals(&events, std::slice::from_ref(&one));
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].events.len(), 1);
    assert_eq!(v[0].events[0].attempt, "b");
    // The whole store refusing: the session's record is refused first.
    let whole = FaultWindow {
        on_one_master: false,
        ..one
    };
    let v = check_refusals(&numbered(vec![session]), &[whole]);
    assert_eq!(v.len(), 1, "{v:?}");
}

// --- callers that leave -----------------------------------------------------

/// A call whose caller closed its connection at `left` ms, before an answer.
fn left(attempt: &str, verb: Verb, send: u64, left: u64) -> Event {
    Event {
        status: 0,
        aborted: true,
        ..ev(attempt, verb, send, left, "aborted")
    }
}

/// Issue 21 #1, by hand: a waiter's caller leaves while its acquire is in
/// flight, retries with the same attempt and is told it holds the lease
/// (`replayed_same_operation`); the departed waiter's clean-up then
/// releases it and a third attempt acquires while the caller still
/// believes. The checker must see two holders.
#[test]
fn safety_catches_a_replayed_caller_whose_lease_was_released_behind_it() {
    let mut waiting = left("w", Verb::Acquire, 0, 600);
    waiting.wait_ms = Some(20_000);
    let h = numbered(vec![
        grant("b", Verb::Acquire, 0, 5, "acquired", 1, 30_000),
        waiting,
        ev("b", Verb::Release, 500, 505, "released"),
        grant(
            "w",
            Verb::Acquire,
            610,
            615,
            "replayed_same_operation",
            2,
            29_500,
        ),
        grant("t", Verb::Acquire, 700, 705, "acquired", 3, 30_000),
    ]);
    let v = check_safety(&h, DRIFT, &[]);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].what.contains("two attempts"), "{}", v[0].what);
    assert!(v[0].events.iter().any(|e| e.attempt == "w"));
    assert!(v[0].events.iter().any(|e| e.attempt == "t"));
    // The same history where the clean-up spared the replayed lease: the
    // third attempt was contended, nothing to report; the left call itself
    // is neither a belief, nor a typed failure, nor "not applied".
    let mut fixed = h.clone();
    fixed[4] = ev("t", Verb::Acquire, 700, 705, "contended");
    assert!(check_safety(&fixed, DRIFT, &[]).is_empty());
    assert!(check_typed(&fixed).is_empty(), "{:?}", check_typed(&fixed));
    assert!(check_honesty(&fixed).is_empty());
    assert!(check_fencing(&fixed).is_empty());
}

#[test]
fn a_call_left_in_flight_grants_nothing_and_may_have_applied() {
    // An acquire left in flight is no belief: another attempt may acquire
    // after it (the service's clean-up released it).
    let h = numbered(vec![
        left("a", Verb::Acquire, 0, 3),
        grant("b", Verb::Acquire, 10, 15, "acquired", 2, 100),
    ]);
    assert!(check_safety(&h, DRIFT, &[]).is_empty());
    // It may have applied: a replay after it is honest, even after an
    // `unavailable`, and may carry a new token (fencing).
    let h = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 1, 10),
        ev("a", Verb::Acquire, 100, 105, "unavailable"),
        left("a", Verb::Acquire, 110, 120),
        grant(
            "a",
            Verb::Acquire,
            130,
            135,
            "replayed_same_operation",
            7,
            100,
        ),
    ]);
    assert!(check_honesty(&h).is_empty(), "{:?}", check_honesty(&h));
    assert!(check_fencing(&h).is_empty(), "{:?}", check_fencing(&h));
    // A renew left in flight ends the belief it renews (conservatively),
    // and its retry's `renewed` starts a new one.
    let h = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 1, 100),
        left("a", Verb::Renew, 40, 45),
        grant("a", Verb::Renew, 46, 50, "renewed", 1, 100),
        grant("b", Verb::Acquire, 120, 125, "acquired", 2, 100),
    ]);
    let v = check_safety(&h, DRIFT, &[]);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].events[0].verb, Some(Verb::Renew));
}

// --- liveness --------------------------------------------------------------

const LIVE: Liveness = Liveness {
    bound: Duration::from_millis(3_000),
    apply_slack: Duration::from_millis(500),
};

/// A waiting acquire of `attempt` answered `contended` at its deadline.
fn gave_up(attempt: &str, send: u64, wait: u64) -> Event {
    Event {
        wait_ms: Some(wait),
        ttl_ms: Some(1_000),
        ..ev(attempt, Verb::Acquire, send, send + wait, "contended")
    }
}

#[test]
fn liveness_fails_when_a_waiter_gives_up_on_a_free_resource() {
    // a holds until it releases at 1 000; nobody else waits; w waits from
    // 500 to 5 500 and is told contended: free for 4.5 s.
    let h = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 1, 10_000),
        gave_up("w", 500, 5_000),
        ev("a", Verb::Release, 1_000, 1_005, "released"),
    ]);
    let v = check_liveness(&h, &[], LIVE);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].check, "liveness");
    assert!(v[0].what.contains("free"), "{}", v[0].what);
}

#[test]
fn liveness_passes_when_the_resource_was_held_or_someone_was_ahead() {
    // Held all along (a renews).
    let held = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 1, 3_000),
        gave_up("w", 500, 5_000),
        grant("a", Verb::Renew, 2_500, 2_505, "renewed", 1, 4_000),
    ]);
    assert!(check_liveness(&held, &[], LIVE).is_empty());
    // Free from 1 000, but another waiter waited (it could be ahead) until
    // 4 000: free with nobody ahead for 1.5 s only, within the bound.
    let mut ahead = gave_up("x", 400, 3_600);
    ahead.outcome = "contended".into();
    let queued = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 1, 10_000),
        ahead,
        gave_up("w", 500, 5_000),
        ev("a", Verb::Release, 1_000, 1_005, "released"),
    ]);
    assert!(
        check_liveness(&queued, &[], LIVE).is_empty(),
        "{:?}",
        check_liveness(&queued, &[], LIVE)
    );
    // Free from 1 000, but a fault window covers most of the wait.
    let stall = FaultWindow {
        name: "pool exhausted".into(),
        start: at(1_200),
        end: at(4_000),
        data_loss: false,
        definite_refusal: false,
        on_one_master: false,
    };
    let faulted = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 1, 10_000),
        gave_up("w", 500, 5_000),
        ev("a", Verb::Release, 1_000, 1_005, "released"),
    ]);
    assert!(check_liveness(&faulted, std::slice::from_ref(&stall), LIVE).is_empty());
    // An uncertain release keeps the holder possible until its TTL.
    let unsure = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 1, 10_000),
        gave_up("w", 500, 5_000),
        ev("a", Verb::Release, 1_000, 1_500, "indeterminate"),
    ]);
    assert!(check_liveness(&unsure, &[], LIVE).is_empty());
    // An acquire left in flight may hold until its wait, the slack and
    // its TTL have passed: 0 + 5 000 + 500 + 1 000 ms.
    let mut gone = left("g", Verb::Acquire, 0, 10);
    gone.wait_ms = Some(5_000);
    gone.ttl_ms = Some(1_000);
    let departed = numbered(vec![gone, gave_up("w", 500, 5_000)]);
    assert!(check_liveness(&departed, &[], LIVE).is_empty());
    // A counting lease with a free permit is free for an exclusive waiter
    // of that limit; full, it is not.
    let mut full_w = gave_up("w", 500, 5_000);
    full_w.limit = Some(2);
    let counted = |holders: &[&str]| {
        let mut h: Vec<Event> = holders
            .iter()
            .enumerate()
            .map(|(i, a)| Event {
                limit: Some(2),
                ..grant(a, Verb::Acquire, 0, 5, "acquired", i as u64 + 1, 10_000)
            })
            .collect();
        h.push(full_w.clone());
        numbered(h)
    };
    assert!(check_liveness(&counted(&["a", "b"]), &[], LIVE).is_empty());
    assert_eq!(check_liveness(&counted(&["a"]), &[], LIVE).len(), 1);
    // Short waits are not judged.
    let short = numbered(vec![gave_up("w", 500, 2_000)]);
    assert!(check_liveness(&short, &[], LIVE).is_empty());
}

// --- the fault proxy's RESP framing ------------------------------------------

#[test]
fn resp_frames_are_delimited_whole() {
    use crate::common::fault_proxy::frame_end;
    let whole = |b: &[u8]| frame_end(b, 0).expect("valid RESP");
    assert_eq!(whole(b"+OK\r\n"), Some(5));
    assert_eq!(
        whole(b"-NOREPLICAS Not enough good replicas\r\n:1\r\n"),
        Some(38)
    );
    assert_eq!(whole(b"$5\r\nhello\r\n"), Some(11));
    assert_eq!(whole(b"$-1\r\n"), Some(5));
    assert_eq!(whole(b"_\r\n"), Some(3));
    // A script reply: an array of an integer, a bulk string and a nested array.
    let script = b"*3\r\n:1\r\n$3\r\nabc\r\n*2\r\n,1.5\r\n#t\r\n";
    assert_eq!(whole(script), Some(script.len()));
    // RESP3 map, set, push, verbatim, and an attribute before its value.
    let map = b"%1\r\n+k\r\n:2\r\n";
    assert_eq!(whole(map), Some(map.len()));
    let push = b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n";
    assert_eq!(whole(push), Some(push.len()));
    let verbatim = b"=8\r\ntxt:abcd\r\n";
    assert_eq!(whole(verbatim), Some(verbatim.len()));
    let attributed = b"|1\r\n+ttl\r\n:3\r\n:42\r\n";
    assert_eq!(whole(attributed), Some(attributed.len()));
    // Incomplete frames wait for more bytes, at every cut.
    for cut in 1..script.len() {
        assert_eq!(whole(&script[..cut]), None, "cut at {cut}");
    }
    assert!(frame_end(b"?what\r\n", 0).is_err());
}

// --- breaks ------------------------------------------------------------------

/// An operator's break of resource 0, answered `broken`.
fn broke(send: u64, reply: u64) -> Event {
    ev("break-1", Verb::Break, send, reply, "broken")
}

#[test]
fn breaks_fail_when_a_broken_holder_is_renewed_after_the_break() {
    let h = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 1, 100),
        broke(20, 25),
        grant("a", Verb::Renew, 30, 35, "renewed", 1, 100),
    ]);
    let v = check_breaks(&h);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].what.contains("renewed after a break"), "{v:?}");
}

#[test]
fn breaks_pass_for_a_renew_before_the_break_or_after_acquiring_again() {
    let h = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 1, 100),
        grant("a", Verb::Renew, 10, 15, "renewed", 1, 100),
        broke(20, 25),
        Event {
            reason: Some("revoked".into()),
            ..ev("a", Verb::Renew, 30, 35, "lost")
        },
        grant("a", Verb::Acquire, 40, 45, "acquired", 2, 100),
        grant("a", Verb::Renew, 50, 55, "renewed", 2, 100),
    ]);
    assert!(check_breaks(&h).is_empty());
}

#[test]
fn breaks_fail_for_lost_revoked_with_no_break_before_it() {
    let h = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 1, 100),
        Event {
            reason: Some("revoked".into()),
            ..ev("a", Verb::Renew, 30, 35, "lost")
        },
        broke(40, 45),
    ]);
    let v = check_breaks(&h);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].what.contains("no break before it"), "{v:?}");
}

#[test]
fn safety_exempts_only_the_overlap_a_break_makes() {
    // b acquires while a still believes: a violation without the break,
    // none with it in between.
    let without = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 1, 100),
        grant("b", Verb::Acquire, 30, 35, "acquired", 2, 100),
    ]);
    assert_eq!(check_safety(&without, DRIFT, &[]).len(), 1);
    let with = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 1, 100),
        broke(20, 25),
        grant("b", Verb::Acquire, 30, 35, "acquired", 2, 100),
    ]);
    assert!(check_safety(&with, DRIFT, &[]).is_empty());
}

#[test]
fn safety_exempts_a_break_of_a_holder_whose_answer_came_after_the_next_grant() {
    // a's waited acquire is granted before the break and answered long
    // after it; b acquires once the break freed the resource and is
    // answered first. b's belief starts first: the break still explains
    // the overlap (seen in a Cluster run under load, issue 42's session).
    let with = numbered(vec![
        grant("a", Verb::Acquire, 0, 60, "acquired", 1, 100),
        broke(20, 25),
        grant("b", Verb::Acquire, 30, 35, "acquired", 2, 100),
    ]);
    assert!(check_safety(&with, DRIFT, &[]).is_empty());
    // Without a break between them it is two holders at once.
    let without = numbered(vec![
        grant("a", Verb::Acquire, 0, 60, "acquired", 1, 100),
        grant("b", Verb::Acquire, 30, 35, "acquired", 2, 100),
    ]);
    assert_eq!(check_safety(&without, DRIFT, &[]).len(), 1);
    // A break answered before a was sent explains nothing.
    let before = numbered(vec![
        broke(0, 5),
        grant("a", Verb::Acquire, 10, 60, "acquired", 1, 100),
        grant("b", Verb::Acquire, 30, 35, "acquired", 2, 100),
    ]);
    assert_eq!(check_safety(&before, DRIFT, &[]).len(), 1);
}

// --- bounded holds -----------------------------------------------------------

/// An acquire of resource 0 with `maxHoldMs`, granted for `left` ms.
fn bounded(send: u64, reply: u64, max_hold_ms: u64, left: u64) -> Event {
    Event {
        max_hold_ms: Some(max_hold_ms),
        ..grant("a", Verb::Acquire, send, reply, "acquired", 1, left)
    }
}

fn held_out(send: u64, reply: u64) -> Event {
    Event {
        reason: Some("max_hold".into()),
        ..ev("a", Verb::Renew, send, reply, "lost")
    }
}

#[test]
fn max_hold_passes_for_capped_renewals_and_a_late_max_hold() {
    let h = numbered(vec![
        bounded(0, 5, 100, 100),
        // Capped: granted until 5 + 100 at the latest.
        grant("a", Verb::Renew, 40, 45, "renewed", 1, 65),
        held_out(110, 112),
    ]);
    assert!(check_max_hold(&h).is_empty(), "{:?}", check_max_hold(&h));
}

#[test]
fn max_hold_fails_for_a_renewal_past_the_bound() {
    let h = numbered(vec![
        bounded(0, 5, 100, 100),
        grant("a", Verb::Renew, 40, 45, "renewed", 1, 100),
    ]);
    let v = check_max_hold(&h);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].what.contains("past its maxHoldMs"), "{v:?}");
}

#[test]
fn max_hold_fails_for_max_hold_too_early_or_without_a_bound() {
    let early = numbered(vec![bounded(0, 5, 100, 100), held_out(50, 55)]);
    assert_eq!(check_max_hold(&early).len(), 1);
    let unbounded = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 1, 100),
        held_out(200, 205),
    ]);
    assert_eq!(check_max_hold(&unbounded).len(), 1);
}

// --- sessions ----------------------------------------------------------------

/// A lease on session `s1` (its end recorded as a release of it).
fn on_session(mut e: Event) -> Event {
    e.session = Some("s1".into());
    e
}

/// The caller's inspect of its own lease: `caller` while it holds it.
fn inspected(attempt: &str, send: u64, held: bool) -> Event {
    Event {
        held_by: Some(if held { "caller" } else { "other" }.into()),
        ..ev(attempt, Verb::Inspect, send, send + 2, "inspected")
    }
}

#[test]
fn an_ended_sessions_lease_is_free_once_the_end_is_answered() {
    let h = numbered(vec![
        on_session(grant("a", Verb::Acquire, 0, 5, "acquired", 1, 1000)),
        // Held before the end was sent: fine.
        inspected("a", 10, true),
        on_session(ev("a", Verb::Release, 20, 30, "released")),
        inspected("a", 31, false),
    ]);
    assert!(check_session_ends(&h).is_empty());
}

#[test]
fn an_ended_sessions_lease_still_held_after_the_answer_fails() {
    let h = numbered(vec![
        on_session(grant("a", Verb::Acquire, 0, 5, "acquired", 1, 1000)),
        on_session(ev("a", Verb::Release, 20, 30, "released")),
        inspected("a", 31, true),
    ]);
    let v = check_session_ends(&h);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].check, "session");
    // A release that was not a session's (a plain lease) is not judged.
    let plain = numbered(vec![
        grant("a", Verb::Acquire, 0, 5, "acquired", 1, 1000),
        ev("a", Verb::Release, 20, 30, "released"),
        inspected("a", 31, true),
    ]);
    assert!(check_session_ends(&plain).is_empty());
}

#[test]
fn a_session_renew_is_a_belief_for_the_sessions_validity() {
    // Renewed through its session at 400 with 1000 ms left: believed until
    // 400 + 1000 − drift = 1390: another holder told at 1385 overlaps,
    // one told at 1391 not.
    let renewed = on_session(grant("a", Verb::Renew, 400, 410, "renewed", 1, 1000));
    let h = numbered(vec![
        on_session(grant("a", Verb::Acquire, 0, 5, "acquired", 1, 1000)),
        renewed.clone(),
        grant("b", Verb::Acquire, 1380, 1385, "acquired", 2, 1000),
    ]);
    assert_eq!(check_safety(&h, DRIFT, &[]).len(), 1);
    let h = numbered(vec![
        on_session(grant("a", Verb::Acquire, 0, 5, "acquired", 1, 1000)),
        renewed,
        grant("b", Verb::Acquire, 1385, 1391, "acquired", 2, 1000),
    ]);
    assert!(check_safety(&h, DRIFT, &[]).is_empty());
}
