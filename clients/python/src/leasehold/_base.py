"""What ``Client`` and ``AsyncClient`` share: their settings, the drift a lease gets,
URLs, a resource from a raw id or a digest, and a watch event decoded."""

from __future__ import annotations

import json
import uuid
from typing import Optional

import httpx

from . import _wire as wire
from ._sse import RawEvent
from ._types import LeaseRecord, WatchEvent, check_digest, check_purpose
from ._types import digest as digest_of

__all__ = ["WATCH_READ_TIMEOUT", "ClientBase", "new_operation_id", "resource_of"]

#: How long an SSE read may stay silent (the service sends a comment every 15 s at most).
WATCH_READ_TIMEOUT = 45.0


def resource_of(purpose: str, raw_id: Optional[str], digest: Optional[str]) -> tuple[str, str]:
    """``(purpose, digest)`` from a raw id (hashed here) or a digest: exactly one."""
    check_purpose(purpose)
    if (raw_id is None) == (digest is None):
        raise ValueError("give exactly one of raw_id and digest")
    return purpose, digest_of(raw_id) if raw_id is not None else check_digest(digest or "")


def new_operation_id(prefix: str) -> str:
    """A fresh operation id: ``<prefix>-<random hex>``."""
    return f"{prefix}-{uuid.uuid4().hex}"


class ClientBase:
    """The settings and helpers of both clients; no I/O."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: Optional[str],
        timeout: float,
        connect_timeout: float,
        drift_budget: float,
        drift_fraction: float,
    ) -> None:
        self.base_url = wire.check_base_url(base_url)
        if api_key is not None and not (api_key.isascii() and api_key.isprintable()):
            raise ValueError("the API key must be visible ASCII")
        self._api_key = api_key
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.drift_budget = drift_budget
        self.drift_fraction = drift_fraction if 0.0 <= drift_fraction <= 0.5 else 0.01

    def drift_for(self, ttl: float) -> float:
        """The drift allowed a lease of ``ttl`` seconds: ``max(drift_budget,
        drift_fraction * ttl)`` (by default max(10 ms, 1 % of the TTL), DESIGN §14)."""
        return max(self.drift_budget, self.drift_fraction * ttl)

    def _drift(self, record: LeaseRecord, ttl: float) -> float:
        # Proportional to the TTL the store granted (a replay reports the replayed
        # acquisition's, which may be shorter than the one asked), as the Rust client.
        granted = record.ttl_ms / 1000
        return self.drift_for(min(granted, ttl) if granted > 0 else ttl)

    def _timeout(self, extra: float = 0.0) -> httpx.Timeout:
        total = self.timeout + extra
        return httpx.Timeout(total, connect=min(self.connect_timeout, total))

    def _lease_url(self, purpose: str, digest: str) -> str:
        return f"{self.base_url}/leases/{purpose}/{digest}"

    def _watch_event(self, raw: RawEvent) -> WatchEvent:
        try:
            body = json.loads(raw.data)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise wire.Reply(200, {}).unexpected("watch")
        state = wire.inspection_of(body, wire.Reply(200, body), "watch")
        return WatchEvent(raw.event, raw.id, state)
