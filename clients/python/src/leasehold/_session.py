"""``Session``: one liveness for many leases (docs/design.md §18, §19), sync.

``client.session(ttl=30)`` makes a session with an attempt (its owner token is the
session's secret; a create that got no certain reply is sent again with the same attempt
and finds the same session) and keeps it alive in a daemon thread: the keep-alive stream
``GET /sessions/{id}/keepalive`` while it works (if this process dies the connection
closes and the service ends the session at once), ``PATCH`` every third of the validity
left when the stream cannot be opened or drops. ``session.acquire(...)`` attaches leases
that end with the session: each a ``SessionLease`` with its own fencing token, the
session's validity, and its own ``lost`` event; ``session.lost`` is set once when the
session is lost.

Validity follows §5: ``min(ttl, remainingMs) - drift`` from the instant a renewal was
*sent*; a stream renewal is timed by the service, so it counts from when the previous
event (or the request opening the stream) arrived, an instant before the renewal.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Literal, Optional, Union

import httpx

from . import _wire as wire
from ._base import resource_of
from ._lease import LeaseBase
from ._machine import HandleCore, ReleaseReply, RenewReply
from ._session_wire import (
    GONE_REASONS,
    LostLease,
    SessionFull,
    SessionGone,
    SessionInfo,
    SessionRenewed,
    renewal_of,
    session_id_of,
)
from ._sse import SseParser
from ._types import (
    Acquired,
    AcquireOutcome,
    Attempt,
    Indeterminate,
    LeaseholdError,
    LeaseRecord,
    LeaseState,
    Refused,
    ReleaseOutcome,
    Replayed,
    check_holder,
)

if TYPE_CHECKING:
    from ._client import Client

__all__ = [
    "KeepAlive",
    "LostLease",
    "Session",
    "SessionFull",
    "SessionGone",
    "SessionInfo",
    "SessionLease",
    "SessionRenewed",
    "session_id_of",
]

log = logging.getLogger("leasehold")

KeepAlive = Literal["stream", "renew", "manual"]

#: The shortest pause between two renew attempts.
MIN_PAUSE = 0.005


class SessionLease(LeaseBase):
    """A lease held on a ``Session``: its own fencing token, the session's validity
    (every session renewal extends it), ``lost`` (a ``threading.Event``) set once when it
    is LOST or UNKNOWN: the session lost, the lease broken or at its hold's end. Renew
    the session, not the lease; ``release()`` frees this lease alone."""

    def __init__(
        self,
        session: Session,
        attempt: Attempt,
        record: LeaseRecord,
        sent: float,
        hold_from: Optional[float],
    ) -> None:
        super().__init__(attempt, record, sent, session.ttl, session._drift, hold_from=hold_from)
        self._session = session
        self.lost = threading.Event()

    def _signal_lost(self) -> None:
        self.lost.set()

    def _renewed(self, sent: float, remaining: float) -> None:
        with self._mutex:
            state = self._core.finish_renew(time.monotonic(), sent, RenewReply.RENEWED, remaining)
        self._publish(state)

    def _ended(self, reason: Optional[str], reply: Union[RenewReply, ReleaseReply]) -> None:
        with self._mutex:
            if reason is not None and self._lost_reason is None:
                self._lost_reason = reason
            now = time.monotonic()
            if isinstance(reply, ReleaseReply):
                state = self._core.finish_release(now, reply)
            else:
                state = self._core.finish_renew(now, now, reply)
        self._publish(state)

    def release(self) -> ReleaseOutcome:
        """``DELETE /sessions/{id}/leases/{purpose}/{digest}``: this lease alone is released
        and taken off the session. ``released``/``already_absent`` → RELEASED,
        ``not_owner`` → LOST, indeterminate → UNKNOWN."""
        self._begin_release()
        session = self._session
        op = self._attempt.operation_id
        try:
            reply = session._call("DELETE", session._lease_url(self), op, attempt=self._attempt)
            result = wire.release_answer(reply, op)
        except BaseException as e:
            self._finish_release(e)
            raise
        self._finish_release(result)
        session._detach(self)
        return result


class Session:
    """A live session (sync): see the module documentation. ``with`` ends it on exit."""

    def __init__(
        self,
        client: Client,
        attempt: Attempt,
        info: SessionInfo,
        sent: float,
        ttl: float,
        keep_alive: KeepAlive = "stream",
        stop_margin: Optional[float] = None,
    ) -> None:
        self._client = client
        self._attempt = attempt
        self.id = info.id
        self.ttl = ttl
        self._drift = client.drift_for(ttl)
        self._margin = min(
            max(self._drift, ttl / 10 if stop_margin is None else stop_margin), ttl / 2
        )
        self._mutex = threading.Lock()
        self._core = HandleCore(sent, ttl, info.remaining_ms / 1000, self._drift)
        self._info = info
        self._leases: list[SessionLease] = []
        self._renewed = threading.Condition(self._mutex)
        self.renewals = 0
        self.lost = threading.Event()
        self.end_reason: Optional[str] = None
        self._stop = threading.Event()
        self._ending = False
        self._stream: Optional[httpx.Response] = None
        self._rng = random.Random()
        self.keep_alive = keep_alive
        self._streaming = False
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leasehold-session", daemon=True)
        self._thread.start()
        if keep_alive == "stream":
            threading.Thread(
                target=self._streamer, name="leasehold-session-stream", daemon=True
            ).start()

    # -- state --------------------------------------------------------------------------

    @property
    def operation_id(self) -> str:
        return self._attempt.operation_id

    @property
    def info(self) -> SessionInfo:
        """The session as the last answer or event showed it."""
        with self._mutex:
            return self._info

    @property
    def state(self) -> LeaseState:
        """ACTIVE while locally valid; LOST, RELEASED (ended here) or UNKNOWN otherwise."""
        with self._mutex:
            return self._core.observe(time.monotonic())

    def valid_for(self) -> float:
        with self._mutex:
            return self._core.valid_for(time.monotonic())

    def wait_renewals(self, count: int, timeout: float) -> bool:
        """Waits until ``count`` renewals have been applied since the session was made."""
        with self._renewed:
            return self._renewed.wait_for(lambda: self.renewals >= count, timeout)

    @property
    def leases(self) -> list[SessionLease]:
        with self._mutex:
            return list(self._leases)

    # -- verbs --------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        url: str,
        op: str,
        *,
        attempt: Optional[Attempt] = None,
        body: Optional[dict[str, Any]] = None,
        timeout: Optional[float] = None,
    ) -> wire.Reply:
        client = self._client
        try:
            response = client._http.request(
                method,
                url,
                headers=wire.headers(client._api_key, attempt or self._attempt),
                json=body,
                timeout=client._timeout() if timeout is None else httpx.Timeout(timeout),
            )
        except httpx.TransportError as e:
            raise wire.transport_error(e, op) from e
        return wire.Reply.of(response)

    def _url(self) -> str:
        return f"{self._client.base_url}/sessions/{self.id}"

    def _lease_url(self, lease: LeaseBase) -> str:
        return f"{self._url()}/leases/{lease.purpose}/{lease.digest}"

    def acquire(
        self,
        purpose: str,
        raw_id: Optional[str] = None,
        *,
        operation_id: Optional[str] = None,
        wait: float = 0.0,
        holder: Optional[str] = None,
        limit: int = 1,
        mode: str = "exclusive",
        lock_delay: float = 0.0,
        max_hold: Optional[float] = None,
        digest: Optional[str] = None,
    ) -> Union[AcquireOutcome[SessionLease], SessionFull, SessionGone]:
        """``PUT /sessions/{id}/leases/{purpose}/{digest}`` with the session's secret and
        ``operation_id`` (one per lease; a fresh one when None): the lease has no TTL of
        its own and ends when the session does. Refused locally once the session ended."""
        purpose, digest = resource_of(purpose, raw_id, digest)
        if holder is not None:
            check_holder(holder)
        state = self.state
        if state is not LeaseState.ACTIVE:
            raise Refused(state)
        body = wire.acquire_body(0, wait, holder, limit, mode, lock_delay, max_hold)
        del body["ttlMs"]
        attempt = Attempt(self._attempt.owner_token, operation_id or f"{self.operation_id}-lease")
        op = attempt.operation_id
        url = f"{self._url()}/leases/{purpose}/{digest}"
        sent = time.monotonic()
        reply = self._call(
            "PUT", url, op, attempt=attempt, body=body, timeout=self._client.timeout + wait
        )
        if reply.outcome == "session_full":
            return SessionFull()
        if reply.outcome == "lost":
            reason = reply.body.get("reason")
            if reason not in GONE_REASONS:
                raise reply.unexpected(op)
            self._finish(str(reason))
            return SessionGone(str(reason))
        answer = wire.acquire_answer(reply, purpose, digest, op)
        if not isinstance(answer, tuple):
            return answer
        outcome, record, waited_ms = answer
        start = sent + (waited_ms or 0) / 1000 if outcome == "acquired" else sent
        lease = SessionLease(self, attempt, record, start, start if outcome == "acquired" else None)
        self._attach(lease)
        if outcome == "acquired":
            return Acquired(record, lease, waited_ms)
        return Replayed(record, lease)

    def renew(self) -> Union[SessionRenewed, SessionGone]:
        """``PATCH /sessions/{id}``: renews the session and every attached lease in one
        call. ``renewed`` extends local validity from this call's send (the session's and
        each lease's); leases in ``lost`` end; ``lost`` ends the session. A failure
        changes nothing (the next renew tells). Refused locally once the session ended."""
        return self._renew(None)

    def _renew(self, timeout: Optional[float]) -> Union[SessionRenewed, SessionGone]:
        state = self.state
        if state is not LeaseState.ACTIVE:
            raise Refused(state)
        op = self.operation_id
        sent = time.monotonic()
        reply = self._call("PATCH", self._url(), op, body={}, timeout=timeout)
        if reply.status == 200 and reply.outcome == "renewed":
            try:
                renewed = renewal_of(reply.body)
            except ValueError:
                raise reply.unexpected(op) from None
            self._apply(sent, renewed)
            return renewed
        if reply.status == 404 and reply.outcome == "lost":
            reason = reply.body.get("reason")
            if reason not in GONE_REASONS:
                raise reply.unexpected(op)
            self._finish(str(reason))
            return SessionGone(str(reason))
        raise reply.failure(op)

    def end(self) -> Optional[int]:
        """``DELETE /sessions/{id}``: ends it; the service releases every attached lease.
        Answers how many (``None``: it was gone already). Every lease becomes RELEASED;
        an uncertain answer makes the session and its leases UNKNOWN."""
        op = self.operation_id
        self._ending = True
        try:
            reply = self._call("DELETE", self._url(), op)
            if reply.outcome == "ended":
                released = reply.body.get("released")
                count: Optional[int] = released if isinstance(released, int) else 0
            elif reply.outcome == "already_absent":
                count = None
            else:
                raise reply.failure(op)
        except LeaseholdError as e:
            if isinstance(e, Indeterminate):
                self._finish("unknown", ReleaseReply.INDETERMINATE)
            else:
                self._ending = False
            raise
        self._finish("ended", ReleaseReply.RELEASED)
        return count

    def close(self) -> None:
        """Stops keeping it alive without ending it: with the stream, closing it makes the
        service end the session at once; otherwise it ends at its TTL."""
        self._stop.set()
        stream = self._stream
        if stream is not None:
            # The keep-alive thread is blocked reading it: shut the socket down so that
            # the read ends (and the service sees the close) now, not at the next event.
            network = stream.extensions.get("network_stream")
            sock = network.get_extra_info("socket") if network is not None else None
            if isinstance(sock, socket.socket):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        self._finish("closed", None)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.end_reason is None:
                self.end()
        finally:
            self.close()

    # -- what renewals and the end do ---------------------------------------------------

    def _attach(self, lease: SessionLease) -> None:
        with self._mutex:
            ended = self.end_reason
            if ended is None:
                self._leases.append(lease)
        if ended is not None:
            self._settle(lease, ended)

    def _detach(self, lease: SessionLease) -> None:
        with self._mutex:
            if lease in self._leases:
                self._leases.remove(lease)

    def _apply(self, sent: float, renewed: SessionRenewed) -> None:
        remaining = renewed.session.remaining_ms / 1000
        with self._mutex:
            state = self._core.finish_renew(time.monotonic(), sent, RenewReply.RENEWED, remaining)
            self._info = renewed.session
            leases = list(self._leases)
        if state is not LeaseState.ACTIVE:
            self._finish("expired")
            return
        gone = {(lost.purpose, lost.digest): lost.reason for lost in renewed.lost}
        for lease in leases:
            reason = gone.get((lease.purpose, lease.digest))
            if reason is None:
                lease._renewed(sent, remaining)
            else:
                lease._ended(reason, RenewReply.LOST)
                self._detach(lease)
        with self._renewed:
            self.renewals += 1
            self._renewed.notify_all()

    def _finish(self, reason: str, reply: Optional[ReleaseReply] = None) -> None:
        """The session's end, once: the session and every lease settled, then ``lost``
        set (unless this process ended it)."""
        with self._mutex:
            if self.end_reason is not None:
                return
            self.end_reason = reason
            now = time.monotonic()
            if reply is not None:
                self._core.finish_release(now, reply)
            elif reason != "closed":
                self._core.finish_renew(now, now, RenewReply.LOST)
            leases, self._leases = self._leases, []
        self._stop.set()
        self._wake.set()
        for lease in leases:
            self._settle(lease, reason)
        if reason != "ended":
            self.lost.set()
        with self._renewed:
            self._renewed.notify_all()

    @staticmethod
    def _settle(lease: SessionLease, reason: str) -> None:
        if reason == "ended":
            lease._ended(None, ReleaseReply.RELEASED)
        elif reason == "unknown":
            lease._ended(None, ReleaseReply.INDETERMINATE)
        elif reason != "closed":
            lease._ended(reason if reason in GONE_REASONS else None, RenewReply.LOST)

    # -- the keep-alive threads ---------------------------------------------------------

    def _stop_at(self) -> float:
        with self._mutex:
            return self._core.valid_until - self._margin

    def _live(self) -> bool:
        return not self._stop.is_set() and not self._ending and self.end_reason is None

    def _run(self) -> None:
        try:
            self._renewer()
        except Exception:  # the keeper must never die silently with the session alive
            log.exception("the session keep-alive failed")
            self._finish("expired")

    def _renewer(self) -> None:
        """Ends the session when its validity is about to run out, and renews by PATCH:
        every third of the validity left while no stream is open (``renew`` mode, or the
        stream cannot be opened or dropped); with an open stream only when its renewals
        stop coming (less than half the TTL left). The stream is never abandoned for
        being slow: closing it would end the session."""
        renew_at: Optional[float] = None
        while self._live():
            now = time.monotonic()
            stop_at = self._stop_at()
            if now >= stop_at:
                self._finish("expired")
                return
            if self.keep_alive == "manual":
                self._stop.wait(stop_at - now)
                continue
            if self._streaming:
                with self._mutex:
                    due = self._core.valid_until - self.ttl / 2
                renew_at = None
            else:
                if renew_at is None:
                    renew_at = self._next_renew(now)
                due = renew_at
            if now < due:
                # A stream opening or closing wakes this wait early.
                self._wake.wait(min(due, stop_at) - now)
                self._wake.clear()
                continue
            renew_at = None
            try:
                self._renew(max(0.05, min(self._client.timeout, stop_at - now)))
            except Refused:
                return
            except LeaseholdError as e:
                log.debug("session renew failed: %s", e)
                renew_at = self._next_renew(time.monotonic())

    def _next_renew(self, now: float) -> float:
        left = self._stop_at() - now
        return now + max(MIN_PAUSE, left / 3 * self._rng.uniform(0.8, 1.0))

    def _streamer(self) -> None:
        """Follows the keep-alive stream, opening it again (a third of the TTL later)
        when it cannot be opened or drops, until the session ends."""
        try:
            while self._live():
                outcome = self._follow()
                if outcome in ("over", "unsupported"):
                    return
                self._stop.wait(self.ttl / 3)
        except Exception:
            log.exception("the session keep-alive stream failed")

    def _set_streaming(self, on: bool) -> None:
        self._streaming = on
        self._wake.set()

    def _follow(self) -> str:
        """Follows the keep-alive stream: ``over`` (the session ended), ``dropped``,
        ``unsupported`` or ``failed`` (not opened)."""
        client = self._client
        headers = wire.headers(client._api_key, self._attempt)
        headers["Accept"] = "text/event-stream"
        timeout = httpx.Timeout(client.timeout, connect=client.connect_timeout, read=None)
        mark = time.monotonic()
        opened = False
        try:
            with client._http.stream(
                "GET", f"{self._url()}/keepalive", headers=headers, timeout=timeout
            ) as response:
                if response.status_code != 200:
                    response.read()
                    reply = wire.Reply.of(response)
                    reason = reply.body.get("reason")
                    if reply.status == 404 and reply.outcome == "lost" and reason in GONE_REASONS:
                        self._finish(str(reason))
                        return "over"
                    return "failed" if reply.status >= 500 or reply.status == 429 else "unsupported"
                opened = True
                self._stream = response
                self._set_streaming(True)
                if not self._live():
                    return "over"
                parser = SseParser()
                for line in response.iter_lines():
                    raw = parser.feed(line)
                    if raw is None:
                        continue
                    if raw.event == "renewed":
                        try:
                            renewed = renewal_of(json.loads(raw.data))
                        except ValueError:
                            return "dropped"
                        if renewed.session.id != self.id:
                            return "dropped"
                        arrived = time.monotonic()
                        if self.state is LeaseState.ACTIVE:
                            self._apply(mark, renewed)
                        mark = arrived
                    elif raw.event == "lost":
                        try:
                            reason = json.loads(raw.data).get("reason")
                        except (ValueError, AttributeError):
                            return "dropped"
                        if not self._ending and reason in GONE_REASONS:
                            self._finish(str(reason))
                        return "over"
                    if not self._live():
                        return "over"
        except httpx.HTTPError:
            pass
        finally:
            self._stream = None
            self._set_streaming(False)
        if not self._live():
            return "over"
        return "dropped" if opened else "failed"
