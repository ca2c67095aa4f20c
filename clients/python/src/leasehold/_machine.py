"""The lease handle's state machine, without I/O (the Rust client's ``HandleCore``).

ACTIVE is the only state with a way out; LOST, RELEASED and UNKNOWN are terminal.

* renew: sent only from ACTIVE (refused locally otherwise). ``renewed`` extends local
  validity to ``renew's send + min(ttl, remainingMs) - drift``; ``lost`` → LOST;
  indeterminate → UNKNOWN (validity not extended); not applied (``unavailable``,
  ``overloaded``, rejected) → unchanged.
* release: sent from anything but RELEASED (from LOST or UNKNOWN as clean-up, the
  handle staying as it is). ``released`` / ``already_absent`` → RELEASED;
  ``not_owner`` → LOST; indeterminate → UNKNOWN; not applied → unchanged.
* local validity runs out → LOST.

A bounded hold (``maxHoldMs``) puts a ceiling on local validity, ``hold_until``: known
from the acquire's send + ``maxHoldMs`` - drift, or from a grant shorter than asked
(the service caps a renew, or an acquire, at the hold's end: validity can go no
further than that grant). ``at_hold_end`` says no renew can extend the lease any more.

Every input first *observes* the clock: an ACTIVE handle past its local validity is
stored as LOST before the input applies, so a late ``renewed`` never revives it.
Instants are ``time.monotonic()`` seconds.
"""

from __future__ import annotations

import enum
from typing import Optional

from ._types import LeaseState


class RenewReply(enum.Enum):
    RENEWED = "renewed"
    LOST = "lost"
    INDETERMINATE = "indeterminate"
    NOT_APPLIED = "not_applied"


class ReleaseReply(enum.Enum):
    RELEASED = "released"
    NOT_OWNER = "not_owner"
    INDETERMINATE = "indeterminate"
    NOT_APPLIED = "not_applied"


def validity_end(sent: float, ttl: float, remaining: float, drift: float) -> float:
    """``sent + min(ttl, remaining) - drift``, never before ``sent``."""
    return sent + max(0.0, min(ttl, remaining) - drift)


class HandleCore:
    """The state machine of one lease handle, driven by explicit instants."""

    def __init__(
        self,
        sent: float,
        ttl: float,
        remaining: float,
        drift: float,
        hold_until: Optional[float] = None,
    ) -> None:
        self.state = LeaseState.ACTIVE
        self.ttl = ttl
        self.drift = drift
        self.valid_until = validity_end(sent, ttl, remaining, drift)
        self.expired_locally = False
        #: Local validity never goes past this instant (a bounded hold's end); None: unbounded
        #: or not known yet.
        self.hold_until: Optional[float] = None
        if hold_until is not None:
            self.limit_hold(hold_until)

    def limit_hold(self, until: float) -> None:
        """The hold ends at ``until`` at the latest: validity is cut to it."""
        if self.hold_until is None or until < self.hold_until:
            self.hold_until = until
        self.valid_until = min(self.valid_until, self.hold_until)

    def reach_hold_end(self) -> None:
        """A grant shorter than asked: the hold ends where validity ends now."""
        self.limit_hold(self.valid_until)

    @property
    def at_hold_end(self) -> bool:
        """Whether validity reaches the hold's end: no renew can extend it further."""
        return self.hold_until is not None and self.valid_until >= self.hold_until

    def observe(self, now: float) -> LeaseState:
        if self.state is LeaseState.ACTIVE and now >= self.valid_until:
            self.state = LeaseState.LOST
            self.expired_locally = True
        return self.state

    def valid_for(self, now: float) -> float:
        if self.observe(now) is LeaseState.ACTIVE:
            return max(0.0, self.valid_until - now)
        return 0.0

    def give_up(self, now: float) -> LeaseState:
        """Stops treating the lease as ours before its validity ends (a watchdog whose
        renewals did not land in time): ACTIVE → LOST, as a local expiry."""
        if self.observe(now) is LeaseState.ACTIVE:
            self.state = LeaseState.LOST
            self.expired_locally = True
        return self.state

    def begin_renew(self, now: float) -> LeaseState:
        """ACTIVE if a renew may be sent, else the (terminal) state that refuses it."""
        return self.observe(now)

    def finish_renew(
        self,
        now: float,
        sent: float,
        reply: RenewReply,
        remaining: float = 0.0,
        capped: bool = False,
    ) -> LeaseState:
        """``capped``: the service granted less than asked (the hold's end is reached);
        validity then comes from ``remaining`` alone, as always, and stops there."""
        if self.observe(now) is not LeaseState.ACTIVE:
            return self.state
        if reply is RenewReply.RENEWED:
            end = validity_end(sent, self.ttl, remaining, self.drift)
            self.valid_until = max(self.valid_until, end)
            if self.hold_until is not None:
                self.valid_until = min(self.valid_until, self.hold_until)
            if capped:
                self.reach_hold_end()
        elif reply is RenewReply.LOST:
            self.state = LeaseState.LOST
        elif reply is RenewReply.INDETERMINATE:
            self.state = LeaseState.UNKNOWN
        return self.observe(now)

    def begin_release(self, now: float) -> bool:
        """Whether a release may be sent: from anything but RELEASED."""
        return self.observe(now) is not LeaseState.RELEASED

    def finish_release(self, now: float, reply: ReleaseReply) -> LeaseState:
        if self.observe(now) is not LeaseState.ACTIVE:
            return self.state
        if reply is ReleaseReply.RELEASED:
            self.state = LeaseState.RELEASED
        elif reply is ReleaseReply.NOT_OWNER:
            self.state = LeaseState.LOST
        elif reply is ReleaseReply.INDETERMINATE:
            self.state = LeaseState.UNKNOWN
        return self.state
