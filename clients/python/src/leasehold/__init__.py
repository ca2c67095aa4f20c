"""leasehold: a Python client for the leasehold lease service.

* ``Client`` (sync) and ``AsyncClient``: ``attempt``, ``acquire``, ``renew``,
  ``release``, ``inspect`` (and its long-poll), ``list``, ``watch`` (the SSE stream,
  resumed with ``Last-Event-ID``), each answering a typed outcome or raising
  ``Unavailable`` / ``Overloaded`` (not applied), ``Indeterminate`` (may have applied:
  retry with the same attempt) or ``Rejected`` / ``InvalidRequest``.
* ``Lease`` / ``AsyncLease``: the closed state machine (ACTIVE → LOST / RELEASED /
  UNKNOWN), local validity counted from the *send*, the fencing token.
* ``client.lock(...)``: acquire, keep renewed in the background, signal the loss
  (``lease.lost``, ``on_lost``, in async code the body's task is cancelled), release.
* ``client.session(ttl=...)``: one liveness for many leases (a keep-alive stream, PATCH
  when it is not there); ``session.acquire(...)`` attaches leases that end with it, each
  with its own fencing token and ``lost`` event; ``session.lost`` is set once.
* ``leasehold.election.Election``: campaign, resign, proclaim, leader, observe.
* ``leasehold.fencing``: the PostgreSQL guard and the ``FencedStore`` recipe.
"""

from ._async_client import AsyncClient
from ._client import Client
from ._lease import AsyncLease, Lease, LeaseBase
from ._lock import AsyncLockContext, LockContext
from ._session import Session, SessionLease
from ._session_wire import (
    LostLease,
    SessionFull,
    SessionGone,
    SessionInfo,
    SessionRenewed,
    session_id_of,
)
from ._types import (
    Acquired,
    AcquireOutcome,
    AlreadyAbsent,
    Attempt,
    Contended,
    FieldError,
    Indeterminate,
    Inspected,
    InvalidRequest,
    Leader,
    LeaseholdError,
    LeaseLost,
    LeaseRecord,
    LeaseState,
    LimitMismatch,
    Listed,
    ListedLease,
    Lost,
    NotAcquired,
    NotOwner,
    Overloaded,
    OwnerOperationConflict,
    Permit,
    Refused,
    Rejected,
    Released,
    ReleaseOutcome,
    Renewed,
    RenewOutcome,
    Replayed,
    Unavailable,
    WatchEvent,
    digest,
    may_have_applied,
)
from .election import Election, StopReason, Term

__version__ = "0.1.0"

__all__ = [
    "AcquireOutcome",
    "Acquired",
    "AlreadyAbsent",
    "AsyncClient",
    "AsyncLease",
    "AsyncLockContext",
    "Attempt",
    "Client",
    "Contended",
    "Election",
    "FieldError",
    "Indeterminate",
    "Inspected",
    "InvalidRequest",
    "Leader",
    "Lease",
    "LeaseBase",
    "LeaseLost",
    "LeaseRecord",
    "LeaseState",
    "LeaseholdError",
    "LimitMismatch",
    "Listed",
    "ListedLease",
    "LockContext",
    "Lost",
    "LostLease",
    "NotAcquired",
    "NotOwner",
    "Overloaded",
    "OwnerOperationConflict",
    "Permit",
    "Refused",
    "Rejected",
    "ReleaseOutcome",
    "Released",
    "RenewOutcome",
    "Renewed",
    "Replayed",
    "Session",
    "SessionFull",
    "SessionGone",
    "SessionInfo",
    "SessionLease",
    "SessionRenewed",
    "StopReason",
    "Term",
    "Unavailable",
    "WatchEvent",
    "digest",
    "may_have_applied",
    "session_id_of",
]
