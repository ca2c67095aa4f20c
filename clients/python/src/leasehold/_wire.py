"""The wire: what each verb sends, and how every reply (or its absence) becomes an
outcome or an error. Shared by the sync and async clients; no I/O here."""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from typing import Any, Optional, Union
from urllib.parse import urlsplit

import httpx

from ._types import (
    AlreadyAbsent,
    Attempt,
    Contended,
    FieldError,
    Indeterminate,
    Inspected,
    InvalidRequest,
    LeaseholdError,
    LeaseRecord,
    LimitMismatch,
    Listed,
    ListedLease,
    Lost,
    NotOwner,
    Overloaded,
    OwnerOperationConflict,
    Permit,
    Rejected,
    Released,
    ReleaseOutcome,
    Renewed,
    RenewOutcome,
    Unavailable,
)

OWNER_TOKEN_HEADER = "Lease-Owner-Token"
OPERATION_ID_HEADER = "Lease-Operation-Id"


def ms(seconds: float) -> int:
    """Whole milliseconds of a duration in seconds (never negative)."""
    return max(0, round(seconds * 1000))


def check_base_url(base_url: str) -> str:
    """The base URL without a trailing slash; ``ValueError`` unless absolute http(s)."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise ValueError(
            f"base URL {base_url!r} must be an absolute http:// or https:// URL "
            "without query or fragment"
        )
    return base_url.rstrip("/")


def ssl_context(
    ca_file: Optional[str], client_cert: Optional[tuple[str, str]]
) -> Union[ssl.SSLContext, bool]:
    """``verify=`` for httpx: the system roots, or only ``ca_file``; with a client cert."""
    if ca_file is None and client_cert is None:
        return True
    context = ssl.create_default_context(cafile=ca_file)
    if client_cert is not None:
        context.load_cert_chain(client_cert[0], client_cert[1])
    return context


def headers(api_key: Optional[str], attempt: Optional[Attempt]) -> dict[str, str]:
    out: dict[str, str] = {}
    if api_key is not None:
        out["Authorization"] = f"Bearer {api_key}"
    if attempt is not None:
        out[OWNER_TOKEN_HEADER] = attempt.owner_token
        out[OPERATION_ID_HEADER] = attempt.operation_id
    return out


def transport_error(error: Exception, operation_id: str) -> LeaseholdError:
    """A failed exchange, classified: nothing written → ``Unavailable``; written (or
    possibly written) → ``Indeterminate``."""
    if isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)):
        text = str(error).lower()
        cause = "tls" if "ssl" in text or "certificate" in text else "connect"
        return Unavailable(cause)
    if isinstance(error, (httpx.UnsupportedProtocol, httpx.LocalProtocolError)):
        return Unavailable("connect")
    if isinstance(error, httpx.TimeoutException):
        return Indeterminate(operation_id, "timeout")
    return Indeterminate(operation_id, "connection_lost")


@dataclass(frozen=True)
class Reply:
    """A reply that arrived: its status and, when it was a JSON object, its members."""

    status: int
    body: dict[str, Any]

    @staticmethod
    def of(response: httpx.Response) -> Reply:
        try:
            body = json.loads(response.content)
        except ValueError:
            body = {}
        return Reply(response.status_code, body if isinstance(body, dict) else {})

    @property
    def outcome(self) -> str:
        value = self.body.get("outcome")
        return value if isinstance(value, str) else ""

    def unexpected(self, operation_id: str) -> Indeterminate:
        """A reply off the contract: as uncertain as no reply."""
        return Indeterminate(operation_id, "unexpected_reply", self.status)

    def failure(self, operation_id: str) -> LeaseholdError:
        """The shared failures, a rejection, or (anything else) an unexpected reply."""
        outcome = self.outcome
        retry_after = self.opt_int("retryAfterMs")
        if outcome == "unavailable":
            return Unavailable("service", retry_after)
        if outcome == "overloaded":
            return Overloaded(retry_after)
        if outcome in ("indeterminate", "request_timeout"):
            # A request that overran the service's own request timeout may have reached
            # the store: as ambiguous as `indeterminate`.
            return Indeterminate(operation_id, "service", self.status)
        if 400 <= self.status < 500:
            detail = self.body.get("detail")
            errors = tuple(
                FieldError(str(e.get("field", "")), str(e.get("message", "")))
                for e in self.body.get("errors") or ()
                if isinstance(e, dict)
            )
            kind = InvalidRequest if outcome == "invalid_request" else Rejected
            return kind(
                self.status,
                outcome or "<none>",
                detail if isinstance(detail, str) else "",
                errors,
            )
        return self.unexpected(operation_id)

    def opt_int(self, name: str, body: Optional[dict[str, Any]] = None) -> Optional[int]:
        value = (self.body if body is None else body).get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Off
        return value

    def req_int(self, name: str, body: Optional[dict[str, Any]] = None) -> int:
        value = self.opt_int(name, body)
        if value is None:
            raise _Off
        return value

    def opt_str(self, name: str, body: Optional[dict[str, Any]] = None) -> Optional[str]:
        value = (self.body if body is None else body).get(name)
        if value is None:
            return None
        if not isinstance(value, str):
            raise _Off
        return value

    def req_str(self, name: str, body: Optional[dict[str, Any]] = None) -> str:
        value = self.opt_str(name, body)
        if value is None:
            raise _Off
        return value


class _Off(Exception):
    """A member is missing or of the wrong type: the reply is off the contract."""


def _permits(reply: Reply, raw: Any) -> tuple[Permit, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _Off
    out = []
    for p in raw:
        if not isinstance(p, dict):
            raise _Off
        out.append(
            Permit(
                fencing_token=reply.req_int("fencingToken", p),
                remaining_ms=reply.req_int("remainingMs", p),
                ttl_ms=reply.req_int("ttlMs", p),
                acquired_at=reply.req_str("acquiredAt", p),
                renewed_at=reply.req_str("renewedAt", p),
                holder=reply.opt_str("holder", p),
                max_hold_ms=reply.opt_int("maxHoldMs", p),
                hold_ends_at=reply.opt_str("holdEndsAt", p),
            )
        )
    return tuple(out)


def lease_record(reply: Reply, purpose: str, digest: str, operation_id: str) -> LeaseRecord:
    """The ``lease`` member, checked against the resource asked for."""
    raw = reply.body.get("lease")
    try:
        if not isinstance(raw, dict):
            raise _Off
        record = LeaseRecord(
            purpose=reply.req_str("purpose", raw),
            digest=reply.req_str("digest", raw),
            fencing_token=reply.req_int("fencingToken", raw),
            ttl_ms=reply.req_int("ttlMs", raw),
            remaining_ms=reply.req_int("remainingMs", raw),
            guarantee=reply.req_str("guarantee", raw),
            acquired_at=reply.req_str("acquiredAt", raw),
            renewed_at=reply.req_str("renewedAt", raw),
            holder=reply.opt_str("holder", raw),
            replication=raw.get("replication"),
            max_hold_ms=reply.opt_int("maxHoldMs", raw),
            hold_ends_at=reply.opt_str("holdEndsAt", raw),
        )
    except _Off:
        raise reply.unexpected(operation_id) from None
    if record.purpose != purpose or record.digest != digest or record.guarantee != "fenced":
        raise reply.unexpected(operation_id)
    return record


AcquireAnswer = Union[
    tuple[str, LeaseRecord, Optional[int]], OwnerOperationConflict, Contended, LimitMismatch
]


def acquire_body(
    ttl: float,
    wait: float,
    holder: Optional[str],
    limit: int,
    mode: str,
    lock_delay: float,
    max_hold: Optional[float] = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"ttlMs": ms(ttl)}
    if ms(wait) > 0:
        body["waitMs"] = ms(wait)
    if holder is not None:
        body["holder"] = holder
    if limit != 1:
        body["limit"] = limit
    if mode != "exclusive":
        body["mode"] = mode
    if ms(lock_delay) > 0:
        body["lockDelayMs"] = ms(lock_delay)
    if max_hold is not None:
        body["maxHoldMs"] = ms(max_hold)
    return body


def acquire_answer(reply: Reply, purpose: str, digest: str, operation_id: str) -> AcquireAnswer:
    """``("acquired"|"replayed_same_operation", record, waited_ms)`` or a refusal outcome."""
    outcome = reply.outcome
    try:
        if outcome in ("acquired", "replayed_same_operation"):
            record = lease_record(reply, purpose, digest, operation_id)
            return (outcome, record, reply.opt_int("waitedMs"))
        if outcome == "owner_operation_conflict":
            return OwnerOperationConflict(reply.req_int("retryAfterMs"))
        if outcome == "contended":
            return Contended(
                retry_after_ms=reply.req_int("retryAfterMs"),
                waited_ms=reply.opt_int("waitedMs"),
                reason=reply.opt_str("reason"),
            )
        if outcome == "limit_mismatch":
            return LimitMismatch(reply.req_int("limit"))
    except _Off:
        raise reply.unexpected(operation_id) from None
    raise reply.failure(operation_id)


def renew_answer(reply: Reply, purpose: str, digest: str, operation_id: str) -> RenewOutcome:
    if reply.outcome == "renewed":
        return Renewed(lease_record(reply, purpose, digest, operation_id))
    if reply.outcome == "lost":
        reason = reply.body.get("reason")
        if not isinstance(reason, str):
            raise reply.unexpected(operation_id)
        return Lost(reason)
    raise reply.failure(operation_id)


def release_answer(reply: Reply, operation_id: str) -> ReleaseOutcome:
    if reply.outcome == "released":
        return Released()
    if reply.outcome == "already_absent":
        reason = reply.body.get("reason")
        return AlreadyAbsent(reason if isinstance(reason, str) else None)
    if reply.outcome == "not_owner":
        return NotOwner()
    raise reply.failure(operation_id)


def inspected(reply: Reply, operation_id: str) -> Inspected:
    if reply.outcome != "inspected":
        raise reply.failure(operation_id)
    return inspection_of(reply.body, reply, operation_id)


def inspection_of(body: dict[str, Any], reply: Reply, operation_id: str) -> Inspected:
    try:
        held = body.get("held")
        if not isinstance(held, bool):
            raise _Off
        held_by = reply.opt_str("heldBy", body)
        if held_by not in (None, "caller", "caller_other_operation", "other"):
            raise _Off
        return Inspected(
            held=held,
            version=reply.req_str("version", body),
            holders=reply.opt_int("holders", body) or 0,
            remaining_ms=reply.opt_int("remainingMs", body),
            fencing_token=reply.opt_int("fencingToken", body),
            held_by=held_by,
            holder=reply.opt_str("holder", body),
            ttl_ms=reply.opt_int("ttlMs", body),
            acquired_at=reply.opt_str("acquiredAt", body),
            renewed_at=reply.opt_str("renewedAt", body),
            limit=reply.opt_int("limit", body),
            mode=reply.opt_str("mode", body),
            permits=_permits(reply, body.get("permits")),
            lock_delay_remaining_ms=reply.opt_int("lockDelayRemainingMs", body),
        )
    except _Off:
        raise reply.unexpected(operation_id) from None


def listed(reply: Reply, operation_id: str) -> Listed:
    if reply.outcome != "listed":
        raise reply.failure(operation_id)
    try:
        raw = reply.body.get("leases")
        if not isinstance(raw, list):
            raise _Off
        leases = []
        for item in raw:
            if not isinstance(item, dict):
                raise _Off
            leases.append(
                ListedLease(
                    digest=reply.req_str("digest", item),
                    fencing_token=reply.req_int("fencingToken", item),
                    remaining_ms=reply.req_int("remainingMs", item),
                    ttl_ms=reply.req_int("ttlMs", item),
                    acquired_at=reply.req_str("acquiredAt", item),
                    renewed_at=reply.req_str("renewedAt", item),
                    holders=reply.req_int("holders", item),
                    limit=reply.req_int("limit", item),
                    mode=reply.req_str("mode", item),
                    holder=reply.opt_str("holder", item),
                    permits=_permits(reply, item.get("permits")),
                )
            )
        return Listed(tuple(leases), reply.opt_str("nextCursor"))
    except _Off:
        raise reply.unexpected(operation_id) from None


def attempt_created(reply: Reply, operation_id: str) -> Attempt:
    if reply.outcome != "attempt_created":
        raise reply.failure(operation_id)
    token = reply.body.get("ownerToken")
    if not isinstance(token, str) or reply.body.get("operationId") != operation_id:
        raise reply.unexpected(operation_id)
    try:
        return Attempt(owner_token=token, operation_id=operation_id)
    except ValueError:
        raise reply.unexpected(operation_id) from None
