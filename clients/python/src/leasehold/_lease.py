"""Lease handles (``Lease``, ``AsyncLease``): one held lease, its fencing token, its local
validity counted from the *send* of the acquire or renew, and the closed state machine of
``_machine.HandleCore`` around the HTTP calls; and the watchdogs that keep them."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import threading
import time
from typing import Callable, Optional, Protocol, Union

from ._machine import HandleCore, ReleaseReply, RenewReply
from ._types import (
    AlreadyAbsent,
    Attempt,
    Indeterminate,
    LeaseLost,
    LeaseRecord,
    LeaseState,
    Lost,
    NotOwner,
    Refused,
    Released,
    ReleaseOutcome,
    Renewed,
    RenewOutcome,
)


class LeaseCalls(Protocol):
    """The calls a ``Lease`` makes, all it knows of the ``Client`` that made it."""

    def renew(
        self,
        purpose: str,
        *,
        attempt: Attempt,
        ttl: float,
        holder: Optional[str] = None,
        digest: str,
    ) -> RenewOutcome: ...

    def release(self, purpose: str, *, attempt: Attempt, digest: str) -> ReleaseOutcome: ...


class AsyncLeaseCalls(Protocol):
    """The calls an ``AsyncLease`` makes, all it knows of the ``AsyncClient`` that made it."""

    async def renew(
        self,
        purpose: str,
        *,
        attempt: Attempt,
        ttl: float,
        holder: Optional[str] = None,
        digest: str,
    ) -> RenewOutcome: ...

    async def release(self, purpose: str, *, attempt: Attempt, digest: str) -> ReleaseOutcome: ...


log = logging.getLogger("leasehold")

#: The shortest pause between two renewals of one lease.
MIN_PAUSE = 0.005

LostCallback = Callable[["LeaseBase"], object]


class LeaseBase:
    """What both handles share: identity, state, validity and the loss signal."""

    def __init__(
        self,
        attempt: Attempt,
        record: LeaseRecord,
        sent: float,
        ttl: float,
        drift: float,
        hold_from: Optional[float] = None,
    ) -> None:
        self._attempt = attempt
        self._record = record
        self._mutex = threading.Lock()
        self._core = HandleCore(sent, ttl, record.remaining_ms / 1000, drift)
        if record.max_hold_ms is not None:
            # A bounded hold. From an acquire's send (``hold_from``) its end is known; a
            # replay's is not (the first acquire was sent earlier) until a capped renew.
            if hold_from is not None:
                self._core.limit_hold(hold_from + record.max_hold_ms / 1000 - drift)
            if _capped(record, ttl):  # granted less than asked: the hold ends with it
                self._core.reach_hold_end()
        self._published = LeaseState.ACTIVE
        self._callbacks: list[LostCallback] = []
        self._lost_reason: Optional[str] = None

    # -- identity -----------------------------------------------------------------------

    @property
    def fencing_token(self) -> int:
        """Present it with every effect; the resource rejects tokens lower than one it saw."""
        return self._record.fencing_token

    @property
    def record(self) -> LeaseRecord:
        """The lease as the acquire answered it."""
        return self._record

    @property
    def purpose(self) -> str:
        return self._record.purpose

    @property
    def digest(self) -> str:
        return self._record.digest

    @property
    def attempt(self) -> Attempt:
        return self._attempt

    @property
    def operation_id(self) -> str:
        return self._attempt.operation_id

    @property
    def ttl(self) -> float:
        """The TTL (seconds) asked for on acquire and on every renew."""
        return self._core.ttl

    # -- state --------------------------------------------------------------------------

    @property
    def state(self) -> LeaseState:
        """The state now (an ACTIVE handle past its validity becomes LOST here)."""
        with self._mutex:
            state = self._core.observe(time.monotonic())
        self._publish(state)
        return state

    def is_valid(self) -> bool:
        """Whether the lease is ACTIVE and locally valid now."""
        return self.state is LeaseState.ACTIVE

    def valid_for(self) -> float:
        """Local validity left now, in seconds; zero unless ACTIVE."""
        with self._mutex:
            now = time.monotonic()
            state = self._core.observe(now)
            left = self._core.valid_for(now)
        self._publish(state)
        return left

    @property
    def valid_until(self) -> float:
        """The end of local validity, a ``time.monotonic()`` instant:
        ``send + min(ttl, remainingMs) - drift budget`` of the last acquire or renew."""
        with self._mutex:
            return self._core.valid_until

    @property
    def drift(self) -> float:
        """The drift budget (seconds) taken off this lease's validity."""
        return self._core.drift

    @property
    def lost_reason(self) -> Optional[str]:
        """The service's ``reason`` when a renew answered ``lost``: ``absent``, ``not_owner``,
        ``revoked`` (an operator broke the lease) or ``max_hold`` (its bounded hold ran
        out); ``max_hold`` too when the handle stopped at its bounded hold's end before a
        renew could say so; ``None`` otherwise."""
        with self._mutex:
            if self._lost_reason is not None:
                return self._lost_reason
            if self._core.expired_locally and self._core.at_hold_end:
                return "max_hold"
            return None

    @property
    def hold_until(self) -> Optional[float]:
        """For a bounded hold (``max_hold``), the ``time.monotonic()`` instant past which
        no renew extends local validity (the hold's end less the drift budget), once
        known: from the acquire, or from the first renew the service cut short."""
        with self._mutex:
            return self._core.hold_until

    @property
    def at_hold_end(self) -> bool:
        """Whether local validity already reaches the bounded hold's end: renewals can no
        longer extend it, and the lease ends at ``valid_until``."""
        with self._mutex:
            return self._core.at_hold_end

    @property
    def expired_locally(self) -> bool:
        """Whether it became LOST because local validity ran out (not by the server's word)."""
        with self._mutex:
            return self._core.expired_locally

    def check(self) -> None:
        """Raises ``LeaseLost`` unless the lease is ACTIVE and locally valid now."""
        state = self.state
        if state is not LeaseState.ACTIVE:
            raise LeaseLost(state, self.fencing_token, self.lost_reason)

    def add_lost_callback(self, callback: LostCallback) -> None:
        """Calls ``callback(lease)`` once when the lease becomes LOST or UNKNOWN (at once if
        it already is). A release never calls it."""
        with self._mutex:
            state = self._published
            if state is LeaseState.ACTIVE:
                self._callbacks.append(callback)
                return
        if state in (LeaseState.LOST, LeaseState.UNKNOWN):
            callback(self)

    def _give_up(self) -> None:
        with self._mutex:
            state = self._core.give_up(time.monotonic())
        self._publish(state)

    def _publish(self, state: LeaseState) -> None:
        with self._mutex:
            if state is self._published or self._published is not LeaseState.ACTIVE:
                return
            self._published = state
            callbacks, self._callbacks = self._callbacks, []
        if state in (LeaseState.LOST, LeaseState.UNKNOWN):
            self._signal_lost()
            for callback in callbacks:
                try:
                    callback(self)
                except Exception:  # one callback's failure must not silence the others
                    log.exception("a lease-lost callback raised")
        else:
            self._signal_released()

    def _signal_lost(self) -> None:
        raise NotImplementedError

    def _signal_released(self) -> None:
        pass

    # -- shared halves of renew and release ---------------------------------------------

    def _begin_renew(self) -> float:
        with self._mutex:
            state = self._core.begin_renew(time.monotonic())
        self._publish(state)
        if state is not LeaseState.ACTIVE:
            raise Refused(state)
        return time.monotonic()

    def _finish_renew(self, sent: float, result: Union[RenewOutcome, BaseException]) -> None:
        remaining, capped = 0.0, False
        if isinstance(result, Renewed):
            reply, remaining = RenewReply.RENEWED, result.lease.remaining_ms / 1000
            # Validity comes from the answered remainingMs; a grant shorter than asked
            # (the hold's end) also says that no later renew will extend it.
            capped = result.lease.max_hold_ms is not None and _capped(result.lease, self.ttl)
        elif isinstance(result, Lost):
            reply = RenewReply.LOST
            with self._mutex:
                self._lost_reason = result.reason
        elif isinstance(result, (Indeterminate, asyncio.CancelledError)):
            reply = RenewReply.INDETERMINATE
        else:
            reply = RenewReply.NOT_APPLIED
        with self._mutex:
            state = self._core.finish_renew(time.monotonic(), sent, reply, remaining, capped)
        self._publish(state)

    def _begin_release(self) -> None:
        with self._mutex:
            allowed = self._core.begin_release(time.monotonic())
        if not allowed:
            raise Refused(LeaseState.RELEASED)

    def _finish_release(self, result: Union[ReleaseOutcome, BaseException]) -> None:
        if isinstance(result, (Released, AlreadyAbsent)):
            reply = ReleaseReply.RELEASED
        elif isinstance(result, NotOwner):
            reply = ReleaseReply.NOT_OWNER
        elif isinstance(result, (Indeterminate, asyncio.CancelledError)):
            reply = ReleaseReply.INDETERMINATE
        else:
            reply = ReleaseReply.NOT_APPLIED
        with self._mutex:
            state = self._core.finish_release(time.monotonic(), reply)
        self._publish(state)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.purpose}/{self.digest[:11]}… "
            f"fencing_token={self.fencing_token} state={self.state} "
            f"valid_for={self.valid_for():.3f}s>"
        )


class Lease(LeaseBase):
    """A lease held through a sync ``Client``. ``lost`` is a ``threading.Event`` set once
    when the lease becomes LOST or UNKNOWN."""

    def __init__(
        self,
        client: LeaseCalls,
        attempt: Attempt,
        record: LeaseRecord,
        sent: float,
        ttl: float,
        drift: float,
        hold_from: Optional[float] = None,
    ) -> None:
        super().__init__(attempt, record, sent, ttl, drift, hold_from)
        self._client = client
        self.lost = threading.Event()

    def _signal_lost(self) -> None:
        self.lost.set()

    def renew(self, holder: Optional[str] = None) -> RenewOutcome:
        """Renews with the handle's TTL (and a new public ``holder`` label when given).
        Refused locally (``Refused``) on a terminal handle; ``renewed`` restarts local
        validity from this call's send; ``lost`` → LOST; indeterminate → UNKNOWN."""
        sent = self._begin_renew()
        try:
            result = self._client.renew(
                self.purpose, digest=self.digest, attempt=self._attempt, ttl=self.ttl, holder=holder
            )
        except BaseException as e:
            self._finish_renew(sent, e)
            raise
        self._finish_renew(sent, result)
        return result

    def release(self) -> ReleaseOutcome:
        """Releases. ``released``/``already_absent`` → RELEASED, ``not_owner`` → LOST,
        indeterminate → UNKNOWN. A LOST or UNKNOWN handle still sends it (clean-up)."""
        self._begin_release()
        try:
            result = self._client.release(self.purpose, digest=self.digest, attempt=self._attempt)
        except BaseException as e:
            self._finish_release(e)
            raise
        self._finish_release(result)
        return result


class AsyncLease(LeaseBase):
    """A lease held through an ``AsyncClient``. ``lost`` is an ``asyncio.Event`` set once
    when the lease becomes LOST or UNKNOWN. Use it from its event loop's thread."""

    def __init__(
        self,
        client: AsyncLeaseCalls,
        attempt: Attempt,
        record: LeaseRecord,
        sent: float,
        ttl: float,
        drift: float,
        hold_from: Optional[float] = None,
    ) -> None:
        super().__init__(attempt, record, sent, ttl, drift, hold_from)
        self._client = client
        self.lost = asyncio.Event()

    def _signal_lost(self) -> None:
        self.lost.set()

    async def renew(self, holder: Optional[str] = None) -> RenewOutcome:
        """As ``Lease.renew``; a renew cancelled in flight makes the handle UNKNOWN."""
        sent = self._begin_renew()
        try:
            result = await self._client.renew(
                self.purpose, digest=self.digest, attempt=self._attempt, ttl=self.ttl, holder=holder
            )
        except BaseException as e:
            self._finish_renew(sent, e)
            raise
        self._finish_renew(sent, result)
        return result

    async def release(self) -> ReleaseOutcome:
        """As ``Lease.release``; a release cancelled in flight makes the handle UNKNOWN."""
        self._begin_release()
        try:
            result = await self._client.release(
                self.purpose, digest=self.digest, attempt=self._attempt
            )
        except BaseException as e:
            self._finish_release(e)
            raise
        self._finish_release(result)
        return result


def _capped(record: LeaseRecord, ttl: float) -> bool:
    """Whether the service granted less than the ``ttl`` (seconds) asked."""
    return record.ttl_ms < round(ttl * 1000)


def _next_renew(now: float, valid_until: float, lease: LeaseBase, rng: random.Random) -> float:
    """About a third of the validity left, jittered to 80-100 % of that. At a bounded
    hold's end renewals no longer extend the lease (they still hear a break): a third of
    the TTL, not of the shrinking time left, so they do not come ever faster."""
    if lease.at_hold_end:
        return now + lease.ttl / 3 * rng.uniform(0.8, 1.0)
    return now + max(MIN_PAUSE, (valid_until - now) / 3 * rng.uniform(0.8, 1.0))


def _margin(lease: LeaseBase, stop_margin: Optional[float]) -> float:
    """How long before local validity ends the work is stopped when no renew landed:
    ``stop_margin`` (default TTL/10), at least one drift budget (as the Rust watchdog,
    so the work has stopped before the store may hand the lease on), at most TTL/2; the
    TTL granted (a ``max_hold`` below the TTL asked is granted as the TTL)."""
    granted = lease.record.ttl_ms / 1000
    ttl = min(lease.ttl, granted) if granted > 0 else lease.ttl
    margin = ttl / 10 if stop_margin is None else stop_margin
    return min(max(lease.drift, margin), ttl / 2)


class Keeper:
    """The sync watchdog: a daemon thread that renews ``lease`` at about a third of its
    validity and gives it up (LOST, the loss signal fired) ``stop_margin`` before its local
    validity ends when no renew extended it. A renew in flight runs in a helper thread so
    that a hung request cannot delay the signal."""

    def __init__(self, lease: Lease, stop_margin: Optional[float] = None) -> None:
        self._lease = lease
        self._margin = _margin(lease, stop_margin)
        self._stop = threading.Event()
        self._rng = random.Random()
        self._pool = concurrent.futures.ThreadPoolExecutor(1, "leasehold-renew")
        self._thread = threading.Thread(target=self._run, name="leasehold-keeper", daemon=True)
        self.renewals = 0
        self.last_error: Optional[BaseException] = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stops renewing (does not release). Returns without waiting for a renew in flight."""
        self._stop.set()
        self._pool.shutdown(wait=False)

    def _run(self) -> None:
        lease = self._lease
        next_renew: Optional[float] = None
        while not self._stop.is_set():
            if lease.state is not LeaseState.ACTIVE:
                return
            now = time.monotonic()
            give_up_at = lease.valid_until - self._margin
            if now >= give_up_at:
                lease._give_up()
                return
            if next_renew is None:
                next_renew = _next_renew(now, give_up_at, lease, self._rng)
            if now < next_renew:
                self._stop.wait(min(next_renew, give_up_at) - now)
                continue
            next_renew = None
            try:
                future = self._pool.submit(lease.renew)
            except RuntimeError:  # shut down by stop()
                return
            done, _ = concurrent.futures.wait([future], timeout=max(0.0, give_up_at - now))
            if not done:
                continue  # the next look gives it up
            error = future.exception()
            if error is None:
                self.renewals += 1
            else:
                # The handle's state says what it meant; `unavailable` and
                # `overloaded` leave it ACTIVE and the next renew comes sooner.
                self.last_error = error


def _retrieve(task: asyncio.Future[RenewOutcome]) -> None:
    if not task.cancelled():
        task.exception()


class AsyncKeeper:
    """The async watchdog: a task doing what ``Keeper`` does."""

    def __init__(self, lease: AsyncLease, stop_margin: Optional[float] = None) -> None:
        self._lease = lease
        self._margin = _margin(lease, stop_margin)
        self._rng = random.Random()
        self._task: Optional[asyncio.Task[None]] = None
        self._renewing: Optional[asyncio.Task[RenewOutcome]] = None
        self.renewals = 0
        self.last_error: Optional[BaseException] = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Stops renewing (does not release)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            # `wait` does not raise the task's own CancelledError, only ours.
            await asyncio.wait([self._task])

    async def _run(self) -> None:
        lease = self._lease
        next_renew: Optional[float] = None
        while True:
            if lease.state is not LeaseState.ACTIVE:
                return
            now = time.monotonic()
            give_up_at = lease.valid_until - self._margin
            if now >= give_up_at:
                lease._give_up()
                return
            if next_renew is None:
                next_renew = _next_renew(now, give_up_at, lease, self._rng)
            if now < next_renew:
                await asyncio.sleep(min(next_renew, give_up_at) - now)
                continue
            next_renew = None
            renewing = asyncio.ensure_future(lease.renew())
            # Whoever stops waiting for it, its outcome is read (the handle has it).
            renewing.add_done_callback(_retrieve)
            done, _ = await asyncio.wait([renewing], timeout=max(0.0, give_up_at - now))
            if not done:
                # Abandoned: its handle goes UNKNOWN when the cancellation lands.
                lease._give_up()
                renewing.cancel()
                return
            error = renewing.exception()
            if error is None:
                self.renewals += 1
            else:
                self.last_error = error
