"""``Client`` (sync, ``httpx.Client``): one method per verb, each answering a typed outcome
or raising what the caller may assume. ``AsyncClient`` is its asyncio twin
(``_async_client.py``); what both share is in ``_base.py``."""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator
from typing import Any, Optional, Union

import httpx

from . import _wire as wire
from ._base import WATCH_READ_TIMEOUT, ClientBase, new_operation_id, resource_of
from ._lease import Lease
from ._lock import LockContext, LostCallback
from ._session import KeepAlive, Session
from ._session_wire import SessionInfo, session_id_of, session_info
from ._sse import SseParser
from ._types import (
    Acquired,
    AcquireOutcome,
    Attempt,
    Indeterminate,
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

__all__ = ["Client"]

#: ``Client.read_session``'s answer: the session, a page of its leases as ``(purpose,
#: digest)``, the next page's cursor.
SessionPage = tuple[SessionInfo, list[tuple[str, str]], Optional[str]]


class Client(ClientBase):
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
        op = operation_id or new_operation_id("op")
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
        purpose, digest = resource_of(purpose, raw_id, digest)
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
        purpose, digest = resource_of(purpose, raw_id, digest)
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
        purpose, digest = resource_of(purpose, raw_id, digest)
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
        purpose, digest = resource_of(purpose, raw_id, digest)
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

    def session(
        self,
        *,
        ttl: float,
        holder: Optional[str] = None,
        keep_alive: KeepAlive = "stream",
        operation_id: Optional[str] = None,
        attempt: Optional[Attempt] = None,
        create_retries: int = 3,
        stop_margin: Optional[float] = None,
    ) -> Session:
        """``POST /sessions``: a session of ``ttl`` seconds (1 s to 1 h) made with
        ``attempt`` (a fresh one for ``operation_id`` when None; its owner token is the
        session's secret). A create without certain reply is sent again with the same
        attempt up to ``create_retries`` times (the service finds the same session).
        ``keep_alive``: ``stream`` (the keep-alive stream, ``PATCH`` when it is not
        there), ``renew`` (``PATCH`` every third of the validity) or ``manual``. The
        session ends (``lost`` set) ``stop_margin`` (default TTL/10, at least the drift
        budget) before its local validity runs out unrenewed."""
        if attempt is None:
            attempt = self.attempt(operation_id or new_operation_id("session"))
        return create_session(self, attempt, ttl, holder, keep_alive, create_retries, stop_margin)

    def read_session(
        self, session_id: str, *, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> Optional[SessionPage]:
        """``GET /sessions/{id}``: the session, a page of its leases (``(purpose,
        digest)``) and the next page's cursor; ``None`` when it is gone."""
        params: dict[str, Union[str, int]] = {}
        if limit is not None:
            params["limit"] = limit
        if cursor is not None:
            params["cursor"] = cursor
        reply = self._call(
            "GET", f"{self.base_url}/sessions/{session_id}", "session", params=params
        )
        if reply.status == 404 and reply.outcome in ("lost", "not_found"):
            return None
        if reply.outcome != "session":
            raise reply.failure("session")
        try:
            info = session_info(reply.body.get("session"))
            leases = [(str(x["purpose"]), str(x["digest"])) for x in reply.body.get("leases") or []]
        except (ValueError, KeyError, TypeError):
            raise reply.unexpected("session") from None
        next_cursor = reply.body.get("nextCursor")
        return info, leases, next_cursor if isinstance(next_cursor, str) else None

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
        purpose, digest = resource_of(purpose, raw_id, digest)
        return LockContext(
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


def create_session(
    client: Client,
    attempt: Attempt,
    ttl: float,
    holder: Optional[str],
    keep_alive: KeepAlive,
    retries: int,
    stop_margin: Optional[float],
) -> Session:
    """``POST /sessions``, a create without certain reply sent again with the same attempt."""
    body: dict[str, Any] = {"ttlMs": wire.ms(ttl)}
    if holder is not None:
        body["holder"] = check_holder(holder)
    op = attempt.operation_id
    tries = 0
    while True:
        sent = time.monotonic()
        try:
            response = client._http.request(
                "POST",
                f"{client.base_url}/sessions",
                headers=wire.headers(client._api_key, attempt),
                json=body,
                timeout=client._timeout(),
            )
            reply = wire.Reply.of(response)
            if reply.outcome not in ("session_created", "replayed_same_operation"):
                raise reply.failure(op)
            try:
                info = session_info(reply.body.get("session"))
            except ValueError:
                raise reply.unexpected(op) from None
            if info.id != session_id_of(attempt.owner_token):
                raise reply.unexpected(op)
            return Session(client, attempt, info, sent, ttl, keep_alive, stop_margin)
        except httpx.TransportError as e:
            error: LeaseholdError = wire.transport_error(e, op)
        except Indeterminate as e:
            error = e
        if not isinstance(error, Indeterminate) or tries >= retries:
            raise error
        tries += 1
        time.sleep(0.05 * 2**tries)
