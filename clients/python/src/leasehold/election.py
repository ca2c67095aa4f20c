"""Leader election on one lease (asyncio), after client-go's ``leaderelection`` and etcd's
``concurrency.Election``; the Rust client's ``Election`` and ``Observer`` in Python.

| election | lease verb |
| --- | --- |
| campaign | acquire with ``waitMs`` and ``holder`` = the candidate's label, again and again |
| leader | inspect's ``holder`` and ``fencingToken`` |
| observe | inspect long-poll, ``?changedSince=<version>&waitMs=N`` |
| proclaim | renew with a new ``holder`` (the fencing token stays) |
| resign | release |

Safety comes from the lease, not from the callbacks: a term's work (the coroutine
``on_started_leading`` returns) is cancelled, and ``term.ended`` set, before the lease's
local validity ends; present ``term.fencing_token`` with every effect.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import itertools
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

from ._async_client import AsyncClient
from ._base import resource_of
from ._lease import AsyncKeeper, AsyncLease
from ._types import (
    Acquired,
    AcquireOutcome,
    Attempt,
    Contended,
    Indeterminate,
    Leader,
    LeaseholdError,
    LeaseState,
    LimitMismatch,
    Lost,
    Overloaded,
    OwnerOperationConflict,
    Rejected,
    Replayed,
    Unavailable,
    check_holder,
)

__all__ = ["Election", "NotLeader", "StopReason", "Term", "observe"]

log = logging.getLogger("leasehold.election")

#: The pause before asking again with the same attempt after an uncertain answer.
SAME_ATTEMPT_PAUSE = 0.05


class StopReason(str, enum.Enum):
    """Why a term ended."""

    #: ``resign()`` was called or the campaign was cancelled; the lease was released.
    RESIGNED = "resigned"
    #: The service said the lease is gone (expired, or taken over).
    LOST = "lost"
    #: A renew got no certain reply: the lease is no longer ours to use.
    UNKNOWN = "unknown"
    #: Local validity was about to run out (within ``leading_margin``) unrenewed.
    EXPIRING = "expiring"


class NotLeader(LeaseholdError):
    """``proclaim`` when not leading, or the lease turned out to be gone."""


@dataclass
class Term:
    """One term of leadership."""

    fencing_token: int
    holder: str
    lease: AsyncLease
    started_at: float = field(default_factory=time.monotonic)
    #: Set when the term ends, always before the lease's local validity ends.
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    reason: Optional[StopReason] = None

    @property
    def is_leading(self) -> bool:
        return not self.ended.is_set()

    @property
    def valid_until(self) -> float:
        """The lease's local validity end (``time.monotonic()``), as last extended."""
        return self.lease.valid_until


#: A plain function, or one returning an awaitable (a coroutine function).
Callback = Callable[..., Any]


async def _call(callback: Optional[Callback], *args: Any) -> None:
    if callback is None:
        return
    result = callback(*args)
    if inspect.isawaitable(result):
        await result


def _after_acquire(
    answer: Union[AcquireOutcome[AsyncLease], LeaseholdError], wait: float, retry_period: float
) -> tuple[str, float]:
    """What the campaign does after an answer that did not make it leader: ``retry``
    (same attempt), ``fresh`` (new attempt), ``same`` (same attempt; the last one may
    have taken the lease) or ``fail``, and the pause before."""
    if isinstance(answer, Contended):
        waited = (answer.waited_ms or 0) / 1000
        if wait > 0 and waited >= wait / 2:
            return ("retry", 0.0)
        return ("retry", min(answer.retry_after_ms / 1000, retry_period))
    if isinstance(answer, OwnerOperationConflict):
        return ("fresh", retry_period)
    if isinstance(answer, LimitMismatch):
        return ("retry", retry_period)
    if isinstance(answer, (Unavailable, Overloaded)):
        hint = answer.retry_after
        return ("retry", retry_period if hint is None else hint)
    if isinstance(answer, Indeterminate):
        return ("same", min(SAME_ATTEMPT_PAUSE, retry_period))
    if isinstance(answer, (Acquired, Replayed)):
        return ("retry", 0.0)
    return ("fail", 0.0)


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> bool:
    """Sleeps ``seconds`` unless ``stop`` is set first; True when stopped."""
    if stop.is_set():
        return True
    try:
        await asyncio.wait_for(stop.wait(), timeout=max(0.0, seconds))
    except asyncio.TimeoutError:
        return False
    return True


async def _follow(
    client: AsyncClient,
    purpose: str,
    digest: str,
    wait: float,
    retry_period: float,
) -> AsyncGenerator[Leader, None]:
    """The long-poll loop shared by candidates and observers: the leader found first,
    then every change (another holder label, another term, nobody)."""
    version: Optional[str] = None
    last: Optional[Leader] = None
    while True:
        asked = time.monotonic()
        try:
            inspection = await client.inspect(
                purpose, digest=digest, changed_since=version, wait=wait
            )
        except LeaseholdError as e:
            log.debug("observe long-poll failed: %s", e)
            hint = getattr(e, "retry_after", None)
            await asyncio.sleep(retry_period if hint is None else hint)
            continue
        if version == inspection.version and time.monotonic() - asked < wait / 2:
            # Unchanged well before the wait was over: a service that does not hold
            # long-polls. Poll at the retry period rather than in a tight loop.
            await asyncio.sleep(retry_period)
        version = inspection.version
        leader = Leader.of(inspection)
        if leader != last:
            last = leader
            yield leader


def observe(
    client: AsyncClient,
    purpose: str,
    raw_id: Optional[str] = None,
    *,
    digest: Optional[str] = None,
    wait: float = 10.0,
    retry_period: float = 1.0,
) -> AsyncGenerator[Leader, None]:
    """Follows the leader of an election without campaigning (the Rust ``Observer``):
    ``async for leader in observe(client, "leader-demo", "cron"): ...``."""
    purpose, digest = resource_of(purpose, raw_id, digest)
    return _follow(client, purpose, digest, wait, retry_period)


class Election:
    """A candidate for leadership of one resource.

    ``await election.campaign()`` runs until ``resign()`` (or until its task is
    cancelled, which resigns too): it acquires with ``wait`` and ``holder``; when it
    wins it calls ``on_started_leading(term)`` (a coroutine it returns runs as the term's
    work, cancelled when the term ends), keeps the lease renewed, and when the term ends
    calls ``on_stopped_leading(term, reason)``; a term that ended by itself is followed
    by a new campaign. With ``follow`` (default) every change of leader is passed to
    ``on_new_leader(leader)``. Callbacks may be plain functions or coroutine functions.

    A process that dies releases nothing: the next candidate leads when the lease
    expires (``ttl``), or ``lock_delay`` after that. With ``max_hold`` a term lasts at
    most that long (it ends ``EXPIRING``, ``leading_margin`` before the hold's end) and
    the candidate campaigns again.
    """

    def __init__(
        self,
        client: AsyncClient,
        purpose: str,
        raw_id: Optional[str] = None,
        *,
        holder: str,
        ttl: float = 15.0,
        wait: float = 10.0,
        retry_period: float = 1.0,
        leading_margin: Optional[float] = None,
        lock_delay: float = 0.0,
        max_hold: Optional[float] = None,
        follow: bool = True,
        digest: Optional[str] = None,
        on_started_leading: Optional[Callback] = None,
        on_stopped_leading: Optional[Callback] = None,
        on_new_leader: Optional[Callback] = None,
    ) -> None:
        self._client = client
        self.purpose, self.digest = resource_of(purpose, raw_id, digest)
        self._holder = check_holder(holder)
        self.ttl = ttl
        self.wait = wait
        self.retry_period = retry_period
        margin = ttl / 10 if leading_margin is None else leading_margin
        self.leading_margin = min(max(0.0, margin), ttl / 2)
        self.lock_delay = lock_delay
        self.max_hold = max_hold
        self.follow = follow
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.on_new_leader = on_new_leader
        self._term: Optional[Term] = None
        self._stop: Optional[asyncio.Event] = None
        self._done: Optional[asyncio.Event] = None
        self._rounds = itertools.count()

    @property
    def holder(self) -> str:
        """The label this candidate campaigns with now."""
        return self._holder

    @property
    def term(self) -> Optional[Term]:
        """The current term, while leading."""
        term = self._term
        return term if term is not None and term.is_leading else None

    @property
    def is_leader(self) -> bool:
        return self.term is not None

    async def leader(self) -> Leader:
        """Who leads now, by one plain inspect."""
        return Leader.of(await self._client.inspect(self.purpose, digest=self.digest))

    def observe(self) -> AsyncGenerator[Leader, None]:
        """An async iterator of leaders: the one found first, then every change."""
        return _follow(self._client, self.purpose, self.digest, self.wait, self.retry_period)

    async def campaign(self) -> None:
        """Runs the election until ``resign()`` or cancellation (both release the lease).
        Raises ``Rejected`` when the service refuses the requests as sent (TTL or wait out
        of its bounds, a bad API key), ``RuntimeError`` when already campaigning."""
        if self._stop is not None:
            raise RuntimeError("a campaign is already running on this election")
        stop = self._stop = asyncio.Event()
        done = self._done = asyncio.Event()
        follower: Optional[asyncio.Task[None]] = None
        if self.follow:
            follower = asyncio.ensure_future(self._follow(stop))
        try:
            await self._lead_loop(stop)
        except asyncio.CancelledError:
            stop.set()
            raise
        finally:
            stop.set()
            if follower is not None:
                follower.cancel()
                await asyncio.wait([follower])
            self._stop = None
            self._done = None
            done.set()

    async def resign(self) -> None:
        """Ends a running campaign: the term ends (its work cancelled), the lease is
        released, ``on_stopped_leading(term, RESIGNED)`` is called and ``campaign``
        returns. Waits until it has; returns at once without a campaign."""
        stop, done = self._stop, self._done
        if stop is None or done is None:
            return
        stop.set()
        await done.wait()

    async def proclaim(self, label: str) -> None:
        """Renews with ``holder`` = ``label`` (the fencing token stays; observers see a new
        leader label). Raises ``NotLeader`` when not leading or when the lease is gone."""
        term = self.term
        if term is None:
            raise NotLeader("not the leader")
        outcome = await self._client.renew(
            self.purpose,
            digest=self.digest,
            attempt=term.lease.attempt,
            ttl=self.ttl,
            holder=check_holder(label),
        )
        if isinstance(outcome, Lost):
            raise NotLeader(f"the lease is gone ({outcome.reason})")
        self._holder = label
        term.holder = label

    # -- the campaign ------------------------------------------------------------------

    async def _follow(self, stop: asyncio.Event) -> None:
        async for leader in self.observe():
            if stop.is_set():
                return
            try:
                await _call(self.on_new_leader, leader)
            except Exception:
                log.exception("on_new_leader raised")

    def _new_attempt(self) -> Attempt:
        return Attempt.generate(f"campaign-{next(self._rounds)}")

    async def _lead_loop(self, stop: asyncio.Event) -> None:
        while True:
            won = await self._win(stop)
            if won is None:
                return
            if await self._lead(stop, won) is StopReason.RESIGNED:
                return

    async def _clean_up(self, attempt: Attempt) -> None:
        try:
            await self._client.release(self.purpose, digest=self.digest, attempt=attempt)
        except LeaseholdError as e:
            log.debug("campaign clean-up release failed: %s", e)

    async def _win(self, stop: asyncio.Event) -> Optional[AsyncLease]:
        attempt = self._new_attempt()
        may_hold = False
        while True:
            request = asyncio.ensure_future(
                self._client.acquire(
                    self.purpose,
                    digest=self.digest,
                    attempt=attempt,
                    ttl=self.ttl,
                    wait=self.wait,
                    holder=self._holder,
                    lock_delay=self.lock_delay,
                    max_hold=self.max_hold,
                )
            )
            stopped = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait([request, stopped], return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                request.cancel()
                stopped.cancel()
                await asyncio.shield(self._clean_up(attempt))
                raise
            stopped.cancel()
            if not request.done():
                # Stopped with the acquire in flight: it may have acquired just before.
                request.cancel()
                await asyncio.wait([request])
                await asyncio.shield(self._clean_up(attempt))
                return None
            answer: Union[AcquireOutcome[AsyncLease], LeaseholdError]
            try:
                answer = request.result()
            except LeaseholdError as e:
                answer = e
            if isinstance(answer, (Acquired, Replayed)):
                return answer.handle
            if isinstance(answer, (Contended, LimitMismatch)):
                may_hold = False
            elif isinstance(answer, Indeterminate):
                may_hold = True
            action, pause = _after_acquire(answer, self.wait, self.retry_period)
            if action == "fresh":
                attempt, may_hold = self._new_attempt(), False
            elif action == "fail":
                if may_hold:
                    await self._clean_up(attempt)
                assert isinstance(answer, (Rejected, LeaseholdError))
                raise answer
            if await _sleep_unless(stop, pause):
                if may_hold:
                    await asyncio.shield(self._clean_up(attempt))
                return None

    async def _lead(self, stop: asyncio.Event, lease: AsyncLease) -> StopReason:
        keeper = AsyncKeeper(lease, stop_margin=self.leading_margin)
        term = Term(
            fencing_token=lease.fencing_token,
            holder=lease.record.holder or self._holder,
            lease=lease,
        )
        self._term = term
        keeper.start()
        work: Optional[asyncio.Future[Any]] = None
        reason = StopReason.RESIGNED
        try:
            try:
                result = (
                    self.on_started_leading(term) if self.on_started_leading is not None else None
                )
                if inspect.isawaitable(result):
                    work = asyncio.ensure_future(result)
            except Exception:
                log.exception("on_started_leading raised")
            stopped = asyncio.ensure_future(stop.wait())
            lost = asyncio.ensure_future(lease.lost.wait())
            try:
                await asyncio.wait([stopped, lost], return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopped.cancel()
                lost.cancel()
            if lease.state is LeaseState.ACTIVE:
                reason = StopReason.RESIGNED
            elif lease.state is LeaseState.UNKNOWN:
                reason = StopReason.UNKNOWN
            elif lease.expired_locally:
                reason = StopReason.EXPIRING
            else:
                reason = StopReason.LOST
        finally:
            # The term is over before anything else happens.
            term.reason = reason
            term.ended.set()
            if work is not None and not work.done():
                work.cancel()
            await keeper.stop()
            if reason is not StopReason.LOST:
                # Resigning gives the lease back; a term that ended with the lease
                # possibly still ours gives it back too, so the next leader need not
                # wait for the expiry.
                try:
                    await asyncio.shield(lease.release())
                except LeaseholdError as e:
                    log.debug("leadership release failed: %s", e)
            self._term = None
            if work is not None:
                await asyncio.wait([work])
                if not work.cancelled() and work.exception() is not None:
                    log.error("the term's work raised", exc_info=work.exception())
        try:
            await _call(self.on_stopped_leading, term, reason)
        except Exception:
            log.exception("on_stopped_leading raised")
        return reason
