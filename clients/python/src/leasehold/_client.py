"""``Client`` (sync, ``httpx.Client``) and ``AsyncClient`` (``httpx.AsyncClient``): one
method per verb, each answering a typed outcome or raising what the caller may assume."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from typing import Any, Optional, Union

import httpx

from . import _wire as wire
from ._lease import AsyncLease, Lease
from ._lock import AsyncLockContext, LockContext, LostCallback
from ._sse import RawEvent, SseParser
from ._types import (
    Acquired,
    AcquireOutcome,
    Attempt,
    Inspected,
    LeaseholdError,
    LeaseRecord,
    Listed,
    ListedLease,
    ReleaseOutcome,
    RenewOutcome,
    Replayed,
    WatchEvent,
    check_digest,
    check_holder,
    check_purpose,
)
from ._types import (
    digest as digest_of,
)

__all__ = ["AsyncClient", "Client"]

#: How long an SSE read may stay silent (the service sends a comment every 15 s at most).
WATCH_READ_TIMEOUT = 45.0


def _resource(purpose: str, raw_id: Optional[str], digest: Optional[str]) -> tuple[str, str]:
    check_purpose(purpose)
    if (raw_id is None) == (digest is None):
        raise ValueError("give exactly one of raw_id and digest")
    return purpose, digest_of(raw_id) if raw_id is not None else check_digest(digest or "")


def _new_operation_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


class _Base:
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


class Client(_Base):
    """A leasehold client over one keep-alive connection pool (sync).

    ``timeout``: seconds one request may take (an acquire adds its ``wait``);
    ``connect_timeout``: seconds connecting may take (a connect failure is
    ``Unavailable``); ``api_key``: sent as ``Authorization: Bearer <key>``;
    ``ca_file`` / ``client_cert``: for ``https://`` (default: the system roots);
    ``drift_budget`` (seconds, the service's ``--drift-budget-ms``) and
    ``drift_fraction``: each lease's local validity is ``min(ttl, remainingMs) -
    max(drift_budget, drift_fraction * ttl)`` from the send (default max(10 ms, 1 %)).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: Optional[str] = None,
        timeout: float = 5.0,
        connect_timeout: float = 1.0,
        ca_file: Optional[str] = None,
        client_cert: Optional[tuple[str, str]] = None,
        drift_budget: float = 0.010,
        drift_fraction: float = 0.01,
        transport: Optional[httpx.BaseTransport] = None,
    ) -> None:
        super().__init__(
            base_url,
            api_key=api_key,
            timeout=timeout,
            connect_timeout=connect_timeout,
            drift_budget=drift_budget,
            drift_fraction=drift_fraction,
        )
        self._http = httpx.Client(
            verify=wire.ssl_context(ca_file, client_cert),
            follow_redirects=False,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(
        self,
        method: str,
        url: str,
        op: str,
        *,
        attempt: Optional[Attempt] = None,
        body: Optional[dict[str, Any]] = None,
        params: Optional[dict[str, Union[str, int]]] = None,
        extra: float = 0.0,
    ) -> wire.Reply:
        try:
            response = self._http.request(
                method,
                url,
                headers=wire.headers(self._api_key, attempt),
                json=body,
                params=params,
                timeout=self._timeout(extra),
            )
        except httpx.TransportError as e:
            raise wire.transport_error(e, op) from e
        return wire.Reply.of(response)

    def attempt(self, operation_id: Optional[str] = None) -> Attempt:
        """``POST /attempts``: a fresh owner token for ``operation_id`` (a random one when
        None). Stateless on the server, so safe to retry on any failure.
        ``Attempt.generate`` makes one locally without a round trip."""
        op = operation_id or _new_operation_id("op")
        reply = self._call("POST", f"{self.base_url}/attempts", op, body={"operationId": op})
        return wire.attempt_created(reply, op)

    def acquire(
        self,
        purpose: str,
        raw_id: Optional[str] = None,
        *,
        attempt: Attempt,
        ttl: float,
        wait: float = 0.0,
        holder: Optional[str] = None,
        limit: int = 1,
        mode: str = "exclusive",
        lock_delay: float = 0.0,
        max_hold: Optional[float] = None,
        digest: Optional[str] = None,
    ) -> AcquireOutcome[Lease]:
        """``PUT /leases/{purpose}/{digest}``: acquire for ``ttl`` seconds, waiting up to
        ``wait`` seconds server-side while someone else holds it. A held lease comes back
        with a ``Lease`` handle whose local validity counts from this request's send (plus
        ``waitedMs``). ``max_hold`` (seconds, 0.02 s to 30 days) bounds the hold: renewals
        never extend the lease past acquisition + ``max_hold`` (a lease of a shorter
        ``max_hold`` than ``ttl`` is granted ``max_hold``); then renew answers ``lost`` with
        ``reason: max_hold``. Raises ``Indeterminate`` when it may have applied: retry with
        the *same* attempt."""
        purpose, digest = _resource(purpose, raw_id, digest)
        if holder is not None:
            check_holder(holder)
        body = wire.acquire_body(ttl, wait, holder, limit, mode, lock_delay, max_hold)
        op = attempt.operation_id
        sent = time.monotonic()
        reply = self._call(
            "PUT", self._lease_url(purpose, digest), op, attempt=attempt, body=body, extra=wait
        )
        answer = wire.acquire_answer(reply, purpose, digest, op)
        if not isinstance(answer, tuple):
            return answer
        outcome, record, waited_ms = answer
        ttl_s = body["ttlMs"] / 1000
        if outcome == "acquired":
            start = sent + (waited_ms or 0) / 1000
            handle = Lease(
                self, attempt, record, start, ttl_s, self._drift(record, ttl_s), hold_from=start
            )
            return Acquired(record, handle, waited_ms)
        handle = Lease(self, attempt, record, sent, ttl_s, self._drift(record, ttl_s))
        return Replayed(record, handle)

    def renew(
        self,
        purpose: str,
        raw_id: Optional[str] = None,
        *,
        attempt: Attempt,
        ttl: float,
        holder: Optional[str] = None,
        digest: Optional[str] = None,
    ) -> RenewOutcome:
        """``PATCH``: reset the TTL (and the public ``holder`` label when given). A lease
        handle calls this for you and tracks the result."""
        purpose, digest = _resource(purpose, raw_id, digest)
        body: dict[str, Any] = {"ttlMs": wire.ms(ttl)}
        if holder is not None:
            body["holder"] = check_holder(holder)
        op = attempt.operation_id
        reply = self._call(
            "PATCH", self._lease_url(purpose, digest), op, attempt=attempt, body=body
        )
        return wire.renew_answer(reply, purpose, digest, op)

    def release(
        self,
        purpose: str,
        raw_id: Optional[str] = None,
        *,
        attempt: Attempt,
        digest: Optional[str] = None,
    ) -> ReleaseOutcome:
        """``DELETE``: release (idempotent)."""
        purpose, digest = _resource(purpose, raw_id, digest)
        op = attempt.operation_id
        reply = self._call("DELETE", self._lease_url(purpose, digest), op, attempt=attempt)
        return wire.release_answer(reply, op)

    def inspect(
        self,
        purpose: str,
        raw_id: Optional[str] = None,
        *,
        attempt: Optional[Attempt] = None,
        changed_since: Optional[str] = None,
        wait: float = 0.0,
        digest: Optional[str] = None,
    ) -> Inspected:
        """``GET``: a read-only view (``held_by`` when an ``attempt`` is given). With
        ``changed_since`` it is the long-poll: answers once the version differs, or after
        ``wait`` seconds unchanged."""
        purpose, digest = _resource(purpose, raw_id, digest)
        op = attempt.operation_id if attempt else "inspect"
        params: Optional[dict[str, Union[str, int]]] = None
        extra = 0.0
        if changed_since is not None:
            params = {"changedSince": changed_since, "waitMs": wire.ms(wait)}
            extra = wait
        reply = self._call(
            "GET", self._lease_url(purpose, digest), op, attempt=attempt, params=params, extra=extra
        )
        return wire.inspected(reply, op)

    def list(
        self, purpose: str, *, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> Listed:
        """``GET /leases/{purpose}``: one page of the leases held on ``purpose``."""
        check_purpose(purpose)
        params: dict[str, Union[str, int]] = {}
        if limit is not None:
            params["limit"] = limit
        if cursor is not None:
            params["cursor"] = cursor
        reply = self._call("GET", f"{self.base_url}/leases/{purpose}", "list", params=params)
        return wire.listed(reply, "list")

    def list_all(self, purpose: str, *, page_size: Optional[int] = None) -> Iterator[ListedLease]:
        """Every lease held on ``purpose``, page after page (on Redis a lease may appear on
        two pages; de-duplicate by digest if it matters)."""
        cursor: Optional[str] = None
        while True:
            page = self.list(purpose, limit=page_size, cursor=cursor)
            yield from page.leases
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def watch(
        self,
        purpose: str,
        raw_id: Optional[str] = None,
        *,
        digest: Optional[str] = None,
        last_event_id: Optional[str] = None,
        reconnect: bool = True,
        max_reconnects: int = 5,
        retry_period: float = 0.5,
    ) -> Generator[WatchEvent, None, None]:
        """``GET …/events``: a ``state`` event, then one per change. After a cut it
        reconnects with ``Last-Event-ID`` (the service then sends a ``state`` event only
        when something changed meanwhile); ``max_reconnects`` failed reconnections in a
        row raise. Close the generator to stop."""
        purpose, digest = _resource(purpose, raw_id, digest)
        url = self._lease_url(purpose, digest) + "/events"
        last_id, failures, connected = last_event_id, 0, False
        while True:
            headers = wire.headers(self._api_key, None)
            headers["Accept"] = "text/event-stream"
            if last_id is not None:
                headers["Last-Event-ID"] = last_id
            timeout = httpx.Timeout(
                self.timeout, connect=self.connect_timeout, read=WATCH_READ_TIMEOUT
            )
            try:
                with self._http.stream("GET", url, headers=headers, timeout=timeout) as response:
                    if response.status_code != 200:
                        response.read()
                        raise wire.Reply.of(response).failure("watch")
                    connected, failures = True, 0
                    parser = SseParser(last_id)
                    for line in response.iter_lines():
                        raw = parser.feed(line)
                        if raw is not None:
                            last_id = raw.id
                            yield self._watch_event(raw)
            except httpx.TransportError as e:
                error: LeaseholdError = wire.transport_error(e, "watch")
                if not (reconnect and connected) or failures >= max_reconnects:
                    raise error from e
                failures += 1
                time.sleep(retry_period)
                continue
            if not reconnect:
                return

    def lock(
        self,
        purpose: str,
        raw_id: Optional[str] = None,
        *,
        ttl: float,
        wait: float = 0.0,
        holder: Optional[str] = None,
        digest: Optional[str] = None,
        operation_id: Optional[str] = None,
        retry_budget: float = 5.0,
        stop_margin: Optional[float] = None,
        on_lost: Optional[LostCallback] = None,
        limit: int = 1,
        mode: str = "exclusive",
        lock_delay: float = 0.0,
        max_hold: Optional[float] = None,
    ) -> LockContext:
        """``with client.lock(...) as lease:`` acquires (an ``Indeterminate`` or a cut
        connection is retried with the *same* attempt within ``retry_budget`` seconds),
        renews in a background thread at about a third of the validity, sets ``lease.lost``
        and calls ``on_lost(lease)`` when the lease is LOST or UNKNOWN (at the latest
        ``stop_margin``, default TTL/10, before local validity ends) and releases on exit.
        With ``max_hold`` the lease ends ``stop_margin`` before the hold's end, and
        ``lease.lost_reason`` is ``max_hold``. Raises ``NotAcquired`` when someone else
        kept it through ``wait``."""
        purpose, digest = _resource(purpose, raw_id, digest)
        return LockContext(
            self,
            purpose,
            digest,
            ttl=ttl,
            wait=wait,
            holder=holder,
            operation_id=operation_id or _new_operation_id("lock"),
            retry_budget=retry_budget,
            stop_margin=stop_margin,
            on_lost=on_lost,
            limit=limit,
            mode=mode,
            lock_delay=lock_delay,
            max_hold=max_hold,
        )


class AsyncClient(_Base):
    """``Client`` for asyncio (``httpx.AsyncClient``); every verb is a coroutine,
    ``watch`` an async iterator, ``lock`` an async context manager."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: Optional[str] = None,
        timeout: float = 5.0,
        connect_timeout: float = 1.0,
        ca_file: Optional[str] = None,
        client_cert: Optional[tuple[str, str]] = None,
        drift_budget: float = 0.010,
        drift_fraction: float = 0.01,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> None:
        super().__init__(
            base_url,
            api_key=api_key,
            timeout=timeout,
            connect_timeout=connect_timeout,
            drift_budget=drift_budget,
            drift_fraction=drift_fraction,
        )
        self._http = httpx.AsyncClient(
            verify=wire.ssl_context(ca_file, client_cert),
            follow_redirects=False,
            transport=transport,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _call(
        self,
        method: str,
        url: str,
        op: str,
        *,
        attempt: Optional[Attempt] = None,
        body: Optional[dict[str, Any]] = None,
        params: Optional[dict[str, Union[str, int]]] = None,
        extra: float = 0.0,
    ) -> wire.Reply:
        try:
            response = await self._http.request(
                method,
                url,
                headers=wire.headers(self._api_key, attempt),
                json=body,
                params=params,
                timeout=self._timeout(extra),
            )
        except httpx.TransportError as e:
            raise wire.transport_error(e, op) from e
        return wire.Reply.of(response)

    async def attempt(self, operation_id: Optional[str] = None) -> Attempt:
        """As ``Client.attempt``."""
        op = operation_id or _new_operation_id("op")
        reply = await self._call("POST", f"{self.base_url}/attempts", op, body={"operationId": op})
        return wire.attempt_created(reply, op)

    async def acquire(
        self,
        purpose: str,
        raw_id: Optional[str] = None,
        *,
        attempt: Attempt,
        ttl: float,
        wait: float = 0.0,
        holder: Optional[str] = None,
        limit: int = 1,
        mode: str = "exclusive",
        lock_delay: float = 0.0,
        max_hold: Optional[float] = None,
        digest: Optional[str] = None,
    ) -> AcquireOutcome[AsyncLease]:
        """As ``Client.acquire``, with an ``AsyncLease`` handle."""
        purpose, digest = _resource(purpose, raw_id, digest)
        if holder is not None:
            check_holder(holder)
        body = wire.acquire_body(ttl, wait, holder, limit, mode, lock_delay, max_hold)
        op = attempt.operation_id
        sent = time.monotonic()
        reply = await self._call(
            "PUT", self._lease_url(purpose, digest), op, attempt=attempt, body=body, extra=wait
        )
        answer = wire.acquire_answer(reply, purpose, digest, op)
        if not isinstance(answer, tuple):
            return answer
        outcome, record, waited_ms = answer
        ttl_s = body["ttlMs"] / 1000
        if outcome == "acquired":
            start = sent + (waited_ms or 0) / 1000
            handle = AsyncLease(
                self, attempt, record, start, ttl_s, self._drift(record, ttl_s), hold_from=start
            )
            return Acquired(record, handle, waited_ms)
        handle = AsyncLease(self, attempt, record, sent, ttl_s, self._drift(record, ttl_s))
        return Replayed(record, handle)

    async def renew(
        self,
        purpose: str,
        raw_id: Optional[str] = None,
        *,
        attempt: Attempt,
        ttl: float,
        holder: Optional[str] = None,
        digest: Optional[str] = None,
    ) -> RenewOutcome:
        """As ``Client.renew``."""
        purpose, digest = _resource(purpose, raw_id, digest)
        body: dict[str, Any] = {"ttlMs": wire.ms(ttl)}
        if holder is not None:
            body["holder"] = check_holder(holder)
        op = attempt.operation_id
        reply = await self._call(
            "PATCH", self._lease_url(purpose, digest), op, attempt=attempt, body=body
        )
        return wire.renew_answer(reply, purpose, digest, op)

    async def release(
        self,
        purpose: str,
        raw_id: Optional[str] = None,
        *,
        attempt: Attempt,
        digest: Optional[str] = None,
    ) -> ReleaseOutcome:
        """As ``Client.release``."""
        purpose, digest = _resource(purpose, raw_id, digest)
        op = attempt.operation_id
        reply = await self._call("DELETE", self._lease_url(purpose, digest), op, attempt=attempt)
        return wire.release_answer(reply, op)

    async def inspect(
        self,
        purpose: str,
        raw_id: Optional[str] = None,
        *,
        attempt: Optional[Attempt] = None,
        changed_since: Optional[str] = None,
        wait: float = 0.0,
        digest: Optional[str] = None,
    ) -> Inspected:
        """As ``Client.inspect`` (``changed_since`` + ``wait``: the long-poll)."""
        purpose, digest = _resource(purpose, raw_id, digest)
        op = attempt.operation_id if attempt else "inspect"
        params: Optional[dict[str, Union[str, int]]] = None
        extra = 0.0
        if changed_since is not None:
            params = {"changedSince": changed_since, "waitMs": wire.ms(wait)}
            extra = wait
        reply = await self._call(
            "GET", self._lease_url(purpose, digest), op, attempt=attempt, params=params, extra=extra
        )
        return wire.inspected(reply, op)

    async def list(
        self, purpose: str, *, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> Listed:
        """As ``Client.list``."""
        check_purpose(purpose)
        params: dict[str, Union[str, int]] = {}
        if limit is not None:
            params["limit"] = limit
        if cursor is not None:
            params["cursor"] = cursor
        reply = await self._call("GET", f"{self.base_url}/leases/{purpose}", "list", params=params)
        return wire.listed(reply, "list")

    async def list_all(
        self, purpose: str, *, page_size: Optional[int] = None
    ) -> AsyncIterator[ListedLease]:
        """As ``Client.list_all``."""
        cursor: Optional[str] = None
        while True:
            page = await self.list(purpose, limit=page_size, cursor=cursor)
            for lease in page.leases:
                yield lease
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def watch(
        self,
        purpose: str,
        raw_id: Optional[str] = None,
        *,
        digest: Optional[str] = None,
        last_event_id: Optional[str] = None,
        reconnect: bool = True,
        max_reconnects: int = 5,
        retry_period: float = 0.5,
    ) -> AsyncGenerator[WatchEvent, None]:
        """As ``Client.watch``, an async iterator."""
        purpose, digest = _resource(purpose, raw_id, digest)
        url = self._lease_url(purpose, digest) + "/events"
        last_id, failures, connected = last_event_id, 0, False
        while True:
            headers = wire.headers(self._api_key, None)
            headers["Accept"] = "text/event-stream"
            if last_id is not None:
                headers["Last-Event-ID"] = last_id
            timeout = httpx.Timeout(
                self.timeout, connect=self.connect_timeout, read=WATCH_READ_TIMEOUT
            )
            try:
                async with self._http.stream(
                    "GET", url, headers=headers, timeout=timeout
                ) as response:
                    if response.status_code != 200:
                        await response.aread()
                        raise wire.Reply.of(response).failure("watch")
                    connected, failures = True, 0
                    parser = SseParser(last_id)
                    async for line in response.aiter_lines():
                        raw = parser.feed(line)
                        if raw is not None:
                            last_id = raw.id
                            yield self._watch_event(raw)
            except httpx.TransportError as e:
                error: LeaseholdError = wire.transport_error(e, "watch")
                if not (reconnect and connected) or failures >= max_reconnects:
                    raise error from e
                failures += 1
                await asyncio.sleep(retry_period)
                continue
            if not reconnect:
                return

    def lock(
        self,
        purpose: str,
        raw_id: Optional[str] = None,
        *,
        ttl: float,
        wait: float = 0.0,
        holder: Optional[str] = None,
        digest: Optional[str] = None,
        operation_id: Optional[str] = None,
        retry_budget: float = 5.0,
        stop_margin: Optional[float] = None,
        on_lost: Optional[LostCallback] = None,
        limit: int = 1,
        mode: str = "exclusive",
        lock_delay: float = 0.0,
        max_hold: Optional[float] = None,
    ) -> AsyncLockContext:
        """``async with client.lock(...) as lease:``: as ``Client.lock``, renewing in a
        task; when the lease is LOST or UNKNOWN (at the latest ``stop_margin`` before local
        validity ends) the task that entered the block is cancelled and the block raises
        ``LeaseLost``. ``on_lost`` may be a coroutine function."""
        purpose, digest = _resource(purpose, raw_id, digest)
        return AsyncLockContext(
            self,
            purpose,
            digest,
            ttl=ttl,
            wait=wait,
            holder=holder,
            operation_id=operation_id or _new_operation_id("lock"),
            retry_budget=retry_budget,
            stop_margin=stop_margin,
            on_lost=on_lost,
            limit=limit,
            mode=mode,
            lock_delay=lock_delay,
            max_hold=max_hold,
        )
