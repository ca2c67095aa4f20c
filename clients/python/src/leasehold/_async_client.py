"""``AsyncClient``: ``Client`` for asyncio (``httpx.AsyncClient``), verb for verb."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Optional, Union

import httpx

from . import _wire as wire
from ._base import WATCH_READ_TIMEOUT, ClientBase, new_operation_id, resource_of
from ._lease import AsyncLease
from ._lock import AsyncLockContext, LostCallback
from ._sse import SseParser
from ._types import (
    Acquired,
    AcquireOutcome,
    Attempt,
    Inspected,
    LeaseholdError,
    Listed,
    ListedLease,
    ReleaseOutcome,
    RenewOutcome,
    Replayed,
    WatchEvent,
    check_holder,
    check_purpose,
)

__all__ = ["AsyncClient"]


class AsyncClient(ClientBase):
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
        op = operation_id or new_operation_id("op")
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
        purpose, digest = resource_of(purpose, raw_id, digest)
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
        purpose, digest = resource_of(purpose, raw_id, digest)
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
        purpose, digest = resource_of(purpose, raw_id, digest)
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
        purpose, digest = resource_of(purpose, raw_id, digest)
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
        purpose, digest = resource_of(purpose, raw_id, digest)
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
        purpose, digest = resource_of(purpose, raw_id, digest)
        return AsyncLockContext(
            self,
            purpose,
            digest,
            ttl=ttl,
            wait=wait,
            holder=holder,
            operation_id=operation_id or new_operation_id("lock"),
            retry_budget=retry_budget,
            stop_margin=stop_margin,
            on_lost=on_lost,
            limit=limit,
            mode=mode,
            lock_delay=lock_delay,
            max_hold=max_hold,
        )
