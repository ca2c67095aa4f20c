"""Names, outcomes and errors: plain data, no I/O.

Every answer of the service is one of the dataclasses below (an *outcome*),
or one of the exceptions (what the caller may assume is in each one's
docstring). Durations that come from the wire keep the wire's milliseconds
(``retry_after_ms``); durations a caller passes in are seconds (``ttl=30.0``).
"""

from __future__ import annotations

import base64
import enum
import hashlib
import re
import secrets
from dataclasses import dataclass, field
from typing import Generic, Optional, TypeVar, Union

PURPOSE_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
DIGEST_PATTERN = re.compile(r"^v1\.[0-9a-f]{64}$")
OPERATION_ID_PATTERN = re.compile(r"^[A-Za-z0-9._~-]{1,128}$")
OWNER_TOKEN_PATTERN = re.compile(r"^[A-Za-z0-9_-]{32}$")


def digest(raw_id: str) -> str:
    """The resource digest of a raw id: ``v1.`` + SHA-256 hex (the service never sees raw ids)."""
    return "v1." + hashlib.sha256(raw_id.encode("utf-8")).hexdigest()


def check_purpose(purpose: str) -> str:
    """Returns ``purpose`` if it matches ``^[a-z][a-z0-9-]{0,62}$``, else raises ``ValueError``."""
    if not PURPOSE_PATTERN.match(purpose):
        raise ValueError(f"purpose {purpose!r} must match {PURPOSE_PATTERN.pattern}")
    return purpose


def check_digest(value: str) -> str:
    """Returns ``value`` if it is a ``v1.<64 hex>`` digest, else raises ``ValueError``."""
    if not DIGEST_PATTERN.match(value):
        raise ValueError(f"digest {value!r} must match {DIGEST_PATTERN.pattern}")
    return value


def check_operation_id(value: str) -> str:
    """Returns ``value`` if it is 1-128 characters of ``[A-Za-z0-9._~-]``."""
    if not OPERATION_ID_PATTERN.match(value):
        raise ValueError(f"operation id {value!r} must match {OPERATION_ID_PATTERN.pattern}")
    return value


def check_holder(value: str) -> str:
    """Returns a public holder label if it is 1-256 characters without control characters."""
    if not 1 <= len(value) <= 256 or any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in value):
        raise ValueError("holder must be 1-256 characters without control characters")
    return value


@dataclass(frozen=True)
class Attempt:
    """Owner token + operation id, created *before* the first acquire.

    A retry with the same attempt after a lost reply is answered
    ``replayed_same_operation`` (it already holds the lease) instead of
    taking a second lease. The owner token is a bearer secret: ``repr``
    redacts it.
    """

    owner_token: str = field(repr=False)
    operation_id: str

    @staticmethod
    def generate(operation_id: str) -> Attempt:
        """A fresh attempt made locally, as the Rust client's elections do:
        24 bytes from the OS CSPRNG, base64url without padding."""
        token = base64.urlsafe_b64encode(secrets.token_bytes(24)).rstrip(b"=").decode("ascii")
        return Attempt(owner_token=token, operation_id=check_operation_id(operation_id))

    def __post_init__(self) -> None:
        if not OWNER_TOKEN_PATTERN.match(self.owner_token):
            raise ValueError("owner token must be 32 characters of base64url")
        check_operation_id(self.operation_id)


class LeaseState(str, enum.Enum):
    """Where a lease handle stands. LOST, RELEASED and UNKNOWN are terminal."""

    ACTIVE = "active"
    LOST = "lost"
    RELEASED = "released"
    UNKNOWN = "unknown"

    @property
    def terminal(self) -> bool:
        return self is not LeaseState.ACTIVE

    def __str__(self) -> str:
        return self.value.upper()


@dataclass(frozen=True)
class LeaseRecord:
    """A lease as an acquire, replay or renew answered it."""

    purpose: str
    digest: str
    fencing_token: int
    ttl_ms: int
    remaining_ms: int
    guarantee: str
    acquired_at: str
    renewed_at: str
    holder: Optional[str] = None
    replication: Optional[dict[str, int]] = None
    #: A bounded hold (acquired with ``max_hold``): its bound in ms, and when it ends
    #: (RFC 3339, ``acquired_at + max_hold_ms``). Renewals never reach past it.
    max_hold_ms: Optional[int] = None
    hold_ends_at: Optional[str] = None


@dataclass(frozen=True)
class Permit:
    """One holder of a resource, as anyone may see it."""

    fencing_token: int
    remaining_ms: int
    ttl_ms: int
    acquired_at: str
    renewed_at: str
    holder: Optional[str] = None
    #: Set only for a bounded hold, as on ``LeaseRecord``.
    max_hold_ms: Optional[int] = None
    hold_ends_at: Optional[str] = None


H = TypeVar("H")


@dataclass(frozen=True)
class Acquired(Generic[H]):
    """``acquired`` (201): the caller now holds the lease; ``handle`` owns it."""

    lease: LeaseRecord
    handle: H
    waited_ms: Optional[int] = None
    outcome: str = "acquired"


@dataclass(frozen=True)
class Replayed(Generic[H]):
    """``replayed_same_operation`` (200): this attempt already held it. Its TTL was not
    extended; ``lease.remaining_ms`` is the store's remaining TTL now."""

    lease: LeaseRecord
    handle: H
    outcome: str = "replayed_same_operation"


@dataclass(frozen=True)
class OwnerOperationConflict:
    """``owner_operation_conflict`` (409): the same owner token holds it for another operation."""

    retry_after_ms: int
    outcome: str = "owner_operation_conflict"


@dataclass(frozen=True)
class Contended:
    """``contended`` (409): someone else holds it (``reason``: ``lock_delay``, ``queued``)."""

    retry_after_ms: int
    waited_ms: Optional[int] = None
    reason: Optional[str] = None
    outcome: str = "contended"


@dataclass(frozen=True)
class LimitMismatch:
    """``limit_mismatch`` (409): the live holders agreed on another ``limit``."""

    limit: int
    outcome: str = "limit_mismatch"


AcquireOutcome = Union[Acquired[H], Replayed[H], OwnerOperationConflict, Contended, LimitMismatch]


@dataclass(frozen=True)
class Renewed:
    """``renewed`` (200): new ``remaining_ms``, same fencing token."""

    lease: LeaseRecord
    outcome: str = "renewed"


@dataclass(frozen=True)
class Lost:
    """``lost``: 404 ``reason: absent`` or 409 ``reason: not_owner``; 404 ``revoked`` (an
    operator broke it) or ``max_hold`` (its bounded hold ran out). Stop the work the lease
    protected."""

    reason: str
    outcome: str = "lost"


RenewOutcome = Union[Renewed, Lost]


@dataclass(frozen=True)
class Released:
    """``released`` (200)."""

    outcome: str = "released"


@dataclass(frozen=True)
class AlreadyAbsent:
    """``already_absent`` (200): nothing to release (idempotent). ``reason``: ``revoked``
    (an operator broke it) or ``max_hold`` (its bounded hold ran out); else ``None``."""

    reason: Optional[str] = None
    outcome: str = "already_absent"


@dataclass(frozen=True)
class NotOwner:
    """``not_owner`` (409): someone else holds it; nothing was released."""

    outcome: str = "not_owner"


ReleaseOutcome = Union[Released, AlreadyAbsent, NotOwner]


@dataclass(frozen=True)
class Inspected:
    """``inspected`` (200): a read-only view; never the holder's owner token.

    ``held_by`` (``caller``, ``caller_other_operation``, ``other``) only when an
    attempt was sent. ``version`` changes on acquire, release, expiry and holder change.
    """

    held: bool
    version: str
    holders: int
    remaining_ms: Optional[int] = None
    fencing_token: Optional[int] = None
    held_by: Optional[str] = None
    holder: Optional[str] = None
    ttl_ms: Optional[int] = None
    acquired_at: Optional[str] = None
    renewed_at: Optional[str] = None
    limit: Optional[int] = None
    mode: Optional[str] = None
    permits: tuple[Permit, ...] = ()
    lock_delay_remaining_ms: Optional[int] = None
    outcome: str = "inspected"


@dataclass(frozen=True)
class ListedLease:
    """One held resource of a listing."""

    digest: str
    fencing_token: int
    remaining_ms: int
    ttl_ms: int
    acquired_at: str
    renewed_at: str
    holders: int
    limit: int
    mode: str
    holder: Optional[str] = None
    permits: tuple[Permit, ...] = ()


@dataclass(frozen=True)
class Listed:
    """``listed`` (200): one page; send ``next_cursor`` back until it is None."""

    leases: tuple[ListedLease, ...]
    next_cursor: Optional[str] = None
    outcome: str = "listed"


@dataclass(frozen=True)
class WatchEvent:
    """One event of ``GET …/events``: ``event`` is ``state``, ``acquired``, ``released``,
    ``expired``, ``holder_changed`` (or a newer kind); ``id`` the version."""

    event: str
    id: Optional[str]
    state: Inspected


@dataclass(frozen=True)
class Leader:
    """Who leads an election, as inspect shows it; both None when nobody leads."""

    holder: Optional[str] = None
    fencing_token: Optional[int] = None

    @property
    def is_held(self) -> bool:
        return self.fencing_token is not None

    @staticmethod
    def of(inspection: Inspected) -> Leader:
        if not inspection.held:
            return Leader()
        return Leader(holder=inspection.holder, fencing_token=inspection.fencing_token)


@dataclass(frozen=True)
class FieldError:
    """One invalid field of an ``invalid_request``."""

    field: str
    message: str


class LeaseholdError(Exception):
    """Base of every error this package raises."""


class Unavailable(LeaseholdError):
    """Definitely not applied: the store was unreachable, or no connection to the service
    could be made (``cause``: ``service``, ``connect``, ``tls``). Retry later."""

    def __init__(self, cause: str, retry_after_ms: Optional[int] = None) -> None:
        super().__init__(f"unavailable, nothing was applied ({cause})")
        self.cause = cause
        self.retry_after_ms = retry_after_ms

    @property
    def retry_after(self) -> Optional[float]:
        """The service's retry hint in seconds, when it gave one."""
        return None if self.retry_after_ms is None else self.retry_after_ms / 1000


class Overloaded(LeaseholdError):
    """Shed by the service's admission limit; nothing was applied."""

    def __init__(self, retry_after_ms: Optional[int] = None) -> None:
        super().__init__("overloaded, nothing was applied")
        self.retry_after_ms = retry_after_ms

    @property
    def retry_after(self) -> Optional[float]:
        """The service's retry hint in seconds, when it gave one."""
        return None if self.retry_after_ms is None else self.retry_after_ms / 1000


class Indeterminate(LeaseholdError):
    """Sent, and no certain reply: it may or may not have been applied. Inspect, or retry
    with the *same* attempt (``cause``: ``service``, ``timeout``, ``connection_lost``,
    ``unexpected_reply``)."""

    retry_after_ms: Optional[int] = None

    def __init__(self, operation_id: str, cause: str, status: Optional[int] = None) -> None:
        super().__init__(f"indeterminate: sent with no certain reply ({cause})")
        self.operation_id = operation_id
        self.cause = cause
        self.status = status

    @property
    def retry_after(self) -> Optional[float]:
        return None


class Rejected(LeaseholdError):
    """The service refused the request as sent (4xx other than a lease outcome):
    nothing was applied, and sending it again unchanged will not help."""

    def __init__(
        self, status: int, outcome: str, detail: str, errors: tuple[FieldError, ...] = ()
    ) -> None:
        super().__init__(f"rejected by the service: {status} {outcome}: {detail}")
        self.status = status
        self.outcome = outcome
        self.detail = detail
        self.errors = errors


class InvalidRequest(Rejected):
    """``invalid_request`` (400/422): ``errors`` names each invalid field."""


class Refused(LeaseholdError):
    """Refused locally, without a request, because the handle is terminal."""

    def __init__(self, state: LeaseState) -> None:
        super().__init__(f"refused locally: the lease handle is {state}")
        self.state = state


class LeaseLost(LeaseholdError):
    """The lease no longer protects the work (LOST, UNKNOWN, or RELEASED): stop it and
    stop presenting the fencing token."""

    def __init__(self, state: LeaseState, fencing_token: int, reason: Optional[str] = None) -> None:
        why = f" ({reason})" if reason else ""
        super().__init__(f"the lease (fencing token {fencing_token}) is {state}{why}")
        self.state = state
        self.fencing_token = fencing_token
        #: The service's ``reason`` when a renew answered ``lost`` (``absent``,
        #: ``not_owner``, ``revoked``: an operator broke it, ``max_hold``: its bounded
        #: hold ran out), also ``max_hold`` when the handle stopped at the end of its
        #: bounded hold before the service had to say so; else ``None``.
        self.reason = reason


class NotAcquired(LeaseholdError):
    """``lock`` did not get the lease within its wait; ``outcome`` is the last answer."""

    def __init__(self, outcome: Union[OwnerOperationConflict, Contended, LimitMismatch]) -> None:
        super().__init__(f"not acquired: {outcome.outcome}")
        self.outcome = outcome


def may_have_applied(error: BaseException) -> bool:
    """Whether a failed call may have changed the lease (only ``Indeterminate``)."""
    return isinstance(error, Indeterminate)
