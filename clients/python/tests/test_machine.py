"""The handle state machine (pure; every transition of the table in _machine.py)."""

from __future__ import annotations

from leasehold import Client, LeaseState
from leasehold._machine import HandleCore, ReleaseReply, RenewReply

A, L, R, U = LeaseState.ACTIVE, LeaseState.LOST, LeaseState.RELEASED, LeaseState.UNKNOWN


def core() -> HandleCore:
    # Sent at t=100, TTL 10 s, server says 9 s left, drift 0.1 s: valid until 108.9.
    return HandleCore(100.0, 10.0, 9.0, 0.1)


def test_validity_counts_from_the_send() -> None:
    c = core()
    assert c.valid_until == 108.9
    assert c.observe(108.8) is A and c.observe(108.9) is L and c.expired_locally


def test_drift_is_a_floor_or_one_percent_of_the_ttl() -> None:
    with Client("http://127.0.0.1:1") as c:
        assert c.drift_for(0.3) == 0.010
        assert c.drift_for(30) == 0.3
        assert c.drift_for(7 * 24 * 3600) == 6048.0
    with Client("http://127.0.0.1:1", drift_budget=0.05, drift_fraction=float("nan")) as odd:
        assert odd.drift_fraction == 0.01 and odd.drift_for(1) == 0.05


def test_renew_transitions() -> None:
    c = core()
    assert c.finish_renew(101.0, 100.5, RenewReply.RENEWED, 10.0) is A
    assert c.valid_until == 100.5 + 10.0 - 0.1  # from the renew's send
    assert c.finish_renew(102.0, 101.5, RenewReply.NOT_APPLIED) is A
    assert c.valid_until == 110.4
    assert c.finish_renew(103.0, 102.0, RenewReply.INDETERMINATE) is U
    for reply in RenewReply:
        assert c.finish_renew(104.0, 103.0, reply, 10.0) is U  # terminal
    c2 = core()
    assert c2.finish_renew(101.0, 100.5, RenewReply.LOST) is L
    assert c2.begin_renew(101.0) is L


def test_a_late_renewed_does_not_revive() -> None:
    c = core()
    assert c.finish_renew(109.0, 108.0, RenewReply.RENEWED, 10.0) is L
    assert c.expired_locally


def test_release_transitions() -> None:
    for reply, state in [
        (ReleaseReply.RELEASED, R),
        (ReleaseReply.NOT_OWNER, L),
        (ReleaseReply.INDETERMINATE, U),
        (ReleaseReply.NOT_APPLIED, A),
    ]:
        c = core()
        assert c.begin_release(101.0)
        assert c.finish_release(101.0, reply) is state
    released = core()
    released.finish_release(101.0, ReleaseReply.RELEASED)
    assert not released.begin_release(101.0)
    lost = core()
    lost.finish_renew(101.0, 100.5, RenewReply.LOST)
    assert lost.begin_release(101.0)  # clean-up allowed
    assert lost.finish_release(101.0, ReleaseReply.RELEASED) is L  # stays terminal


def test_give_up_is_a_local_expiry() -> None:
    c = core()
    assert c.give_up(105.0) is L and c.expired_locally


def test_a_bounded_hold_caps_validity() -> None:
    # Acquired at 100 for 10 s, the hold ending at 105 (less drift): validity stops there.
    c = HandleCore(100.0, 10.0, 10.0, 0.1, hold_until=104.9)
    assert c.valid_until == 104.9 and c.at_hold_end
    assert c.finish_renew(101.0, 100.5, RenewReply.RENEWED, 10.0) is A
    assert c.valid_until == 104.9, "no renew goes past the hold's end"
    assert c.observe(104.9) is L and c.expired_locally


def test_a_capped_renew_is_the_hold_end() -> None:
    # 30 s asked, the renew sent at 125 granted the 14.8 s left of the hold: validity
    # from what it answered (139.5), not the 30 s asked (154.7); nothing extends it after.
    c = HandleCore(100.0, 30.0, 30.0, 0.3)
    assert not c.at_hold_end and c.hold_until is None
    assert c.finish_renew(125.5, 125.0, RenewReply.RENEWED, 14.8, capped=True) is A
    assert c.valid_until == 125.0 + 14.8 - 0.3
    assert c.at_hold_end and c.hold_until == c.valid_until
    assert c.finish_renew(131.0, 130.0, RenewReply.RENEWED, 30.0) is A
    assert c.valid_until == 125.0 + 14.8 - 0.3
    # A capped answer shorter than what an earlier answer granted never shortens it.
    d = HandleCore(100.0, 30.0, 30.0, 0.3)
    d.finish_renew(101.0, 100.5, RenewReply.RENEWED, 20.0, capped=True)
    assert d.valid_until == 129.7 and d.at_hold_end
