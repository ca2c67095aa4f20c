"""The session answers as the client reads them (docs/design.md §18, §19): a session,
the leases a renewal no longer holds, the outcomes, and the id a secret names. No I/O."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Optional

__all__ = [
    "GONE_REASONS",
    "LostLease",
    "SessionFull",
    "SessionGone",
    "SessionInfo",
    "SessionRenewed",
    "renewal_of",
    "session_id_of",
    "session_info",
]


def session_id_of(owner_token: str) -> str:
    """The id of the session whose secret is ``owner_token``."""
    digest = hashlib.sha256(b"leasehold-session\x1f" + owner_token.encode("ascii")).hexdigest()
    return "s1." + digest[:32]


@dataclass(frozen=True)
class SessionInfo:
    """A session as the service shows it (never its secret)."""

    id: str
    ttl_ms: int
    remaining_ms: int
    expires_at: str
    created_at: str
    renewed_at: str
    leases: int
    holder: Optional[str] = None


@dataclass(frozen=True)
class LostLease:
    """An attached lease a session renewal no longer holds (``reason``: ``revoked``,
    ``max_hold``, ``not_owner`` or ``absent``)."""

    purpose: str
    digest: str
    reason: str


@dataclass(frozen=True)
class SessionRenewed:
    """``renewed``: the session now, and the attached leases it no longer holds."""

    session: SessionInfo
    lost: tuple[LostLease, ...]
    outcome: str = "renewed"


@dataclass(frozen=True)
class SessionGone:
    """``lost``: the session is gone (``reason``: ``session_ended``, ``session_expired``
    or ``absent``)."""

    reason: str
    outcome: str = "lost"


@dataclass(frozen=True)
class SessionFull:
    """``session_full`` (409): the session holds its maximum number of leases."""

    outcome: str = "session_full"


def session_info(raw: Any) -> SessionInfo:
    if not isinstance(raw, dict):
        raise ValueError("not a session")
    holder = raw.get("holder")
    values = [raw.get(k) for k in ("ttlMs", "remainingMs", "leases")]
    texts = [raw.get(k) for k in ("id", "expiresAt", "createdAt", "renewedAt")]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError("not a session")
    if not all(isinstance(t, str) for t in texts) or not isinstance(holder, (str, type(None))):
        raise ValueError("not a session")
    return SessionInfo(
        id=raw["id"],
        ttl_ms=raw["ttlMs"],
        remaining_ms=raw["remainingMs"],
        expires_at=raw["expiresAt"],
        created_at=raw["createdAt"],
        renewed_at=raw["renewedAt"],
        leases=raw["leases"],
        holder=holder,
    )


def _lost_leases(raw: Any) -> tuple[LostLease, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError("not a list")
    out = []
    for item in raw:
        if not isinstance(item, dict) or not all(
            isinstance(item.get(k), str) for k in ("purpose", "digest", "reason")
        ):
            raise ValueError("not a lost lease")
        out.append(LostLease(item["purpose"], item["digest"], item["reason"]))
    return tuple(out)


def renewal_of(body: dict[str, Any]) -> SessionRenewed:
    """A renew answer (or a keep-alive ``renewed`` event's data); ``ValueError`` when off
    the contract."""
    return SessionRenewed(session_info(body.get("session")), _lost_leases(body.get("lost")))


GONE_REASONS = ("session_ended", "session_expired", "absent")
