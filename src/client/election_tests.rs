//! Unit tests of the election: stop reasons, backoff, the candidate's state.
use super::*;
use crate::client::EndReason;
use crate::client::{Cause, Rejection};
use crate::domain::ContendedReason;

fn settings() -> ElectionSettings {
    ElectionSettings {
        wait: Duration::from_millis(1000),
        retry_period: Duration::from_millis(200),
        ..ElectionSettings::new(Duration::from_millis(500))
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn defaults_follow_the_ttl() {
    let s = ElectionSettings::new(Duration::from_secs(15));
    assert_eq!(s.leading_margin, Duration::from_millis(1500));
    assert_eq!(s.wait, Duration::from_secs(10));
    assert!(s.event_capacity > 0);
}

#[test]
fn contended_after_a_full_wait_asks_again_at_once() {
    let answer = Ok(Acquire::Contended {
        retry_after_ms: 400,
        waited_ms: Some(1000),
        reason: None,
    });
    assert_eq!(after_acquire(&settings(), &answer), Next::Retry(ms(0)));
}

#[test]
fn contended_early_pauses_for_the_hint_at_most_the_retry_period() {
    let early = |retry_after_ms| {
        after_acquire(
            &settings(),
            &Ok(Acquire::Contended {
                retry_after_ms,
                waited_ms: None,
                reason: None,
            }),
        )
    };
    assert_eq!(early(30), Next::Retry(ms(30)));
    assert_eq!(early(5000), Next::Retry(ms(200)));
    let no_wait = ElectionSettings {
        wait: Duration::ZERO,
        ..settings()
    };
    let answer = Ok(Acquire::Contended {
        retry_after_ms: 80,
        waited_ms: None,
        reason: Some(ContendedReason::LockDelay),
    });
    assert_eq!(after_acquire(&no_wait, &answer), Next::Retry(ms(80)));
}

#[test]
fn unavailable_and_overloaded_back_off_by_the_hint() {
    let unavailable = Err(Error::Unavailable {
        retry_after: Some(ms(700)),
        cause: Cause::Service,
    });
    assert_eq!(
        after_acquire(&settings(), &unavailable),
        Next::Retry(ms(700))
    );
    let refused = Err(Error::Unavailable {
        retry_after: None,
        cause: Cause::Connect,
    });
    assert_eq!(after_acquire(&settings(), &refused), Next::Retry(ms(200)));
    let overloaded = Err(Error::Overloaded {
        retry_after: Some(ms(50)),
    });
    assert_eq!(after_acquire(&settings(), &overloaded), Next::Retry(ms(50)));
}

#[test]
fn indeterminate_retries_the_same_attempt_soon() {
    let answer = Err(Error::Indeterminate {
        operation_id: OperationId::parse("campaign-0").expect("op"),
        cause: Cause::Timeout,
    });
    assert_eq!(
        after_acquire(&settings(), &answer),
        Next::SameAttempt(SAME_ATTEMPT_PAUSE)
    );
}

#[test]
fn owner_operation_conflict_takes_a_fresh_attempt() {
    let answer = Ok(Acquire::OwnerOperationConflict { retry_after_ms: 10 });
    assert_eq!(
        after_acquire(&settings(), &answer),
        Next::FreshAttempt(ms(200))
    );
}

#[test]
fn a_counting_lease_in_the_way_is_asked_again_later() {
    let answer = Ok(Acquire::LimitMismatch { limit: 3 });
    assert_eq!(after_acquire(&settings(), &answer), Next::Retry(ms(200)));
}

#[test]
fn rejection_ends_the_campaign() {
    let answer = Err(Error::Rejected(Box::new(Rejection {
        status: 400,
        outcome: "invalid_request".into(),
        detail: "ttlMs out of bounds".into(),
        errors: Vec::new(),
    })));
    assert_eq!(after_acquire(&settings(), &answer), Next::Fail);
}

#[test]
fn watchdog_ends_map_to_stop_reasons() {
    assert_eq!(StopReason::of(EndReason::Lost), StopReason::Lost);
    assert_eq!(StopReason::of(EndReason::Unknown), StopReason::Unknown);
    assert_eq!(StopReason::of(EndReason::Expired), StopReason::Expiring);
    assert_eq!(StopReason::of(EndReason::Stopped), StopReason::Lost);
}
