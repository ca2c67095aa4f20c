"""``client.lock(...)``: acquire with one attempt (retried, never replaced, while its
outcome is uncertain), keep the lease with a watchdog, signal its loss, release on exit."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sys
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Optional

from ._lease import AsyncKeeper, AsyncLease, Keeper, Lease, LeaseBase
from ._types import (
    Acquired,
    AcquireOutcome,
    Attempt,
    Indeterminate,
    LeaseholdError,
    LeaseLost,
    LeaseState,
    NotAcquired,
    Overloaded,
    Replayed,
    Unavailable,
)

if TYPE_CHECKING:
    from ._async_client import AsyncClient
    from ._client import Client

#: The pause before asking again with the same attempt after an uncertain answer.
SAME_ATTEMPT_PAUSE = 0.05

LostCallback = Callable[[Any], object]


class _Plan:
    """The acquire loop's decisions, shared by the sync and async locks."""

    def __init__(self, wait: float, retry_budget: float) -> None:
        self.started = time.monotonic()
        self.wait = wait
        self.deadline = self.started + wait + retry_budget
        self.requests = 0
        self.may_hold = False
        self.outcome: Optional[str] = None

    def wait_left(self) -> float:
        return max(0.0, self.started + self.wait - time.monotonic())

    def pause_after(self, error: LeaseholdError) -> Optional[float]:
        """How long to pause before asking again with the same attempt, or None to give up."""
        if isinstance(error, Indeterminate):
            self.may_hold = True
            pause = SAME_ATTEMPT_PAUSE
        elif isinstance(error, (Unavailable, Overloaded)):
            pause = error.retry_after if error.retry_after is not None else SAME_ATTEMPT_PAUSE
            pause = min(max(pause, SAME_ATTEMPT_PAUSE), 1.0)
        else:
            return None
        if time.monotonic() + pause >= self.deadline:
            return None
        return pause

    def held(self, answer: AcquireOutcome[Any]) -> Any:
        self.outcome = answer.outcome
        if isinstance(answer, (Acquired, Replayed)):
            return answer.handle
        # Someone else holds it (or the owner token holds it for another operation):
        # our attempt does not.
        self.may_hold = False
        raise NotAcquired(answer)


class LockContext:
    """What ``Client.lock`` returns; ``with`` it to hold the lease."""

    def __init__(
        self,
        client: Client,
        purpose: str,
        digest: str,
        *,
        ttl: float,
        wait: float,
        holder: Optional[str],
        operation_id: str,
        retry_budget: float,
        stop_margin: Optional[float],
        on_lost: Optional[LostCallback],
        limit: int,
        mode: str,
        lock_delay: float,
        max_hold: Optional[float] = None,
    ) -> None:
        self._client = client
        self.purpose = purpose
        self.digest = digest
        self._args = dict(
            ttl=ttl,
            holder=holder,
            limit=limit,
            mode=mode,
            lock_delay=lock_delay,
            max_hold=max_hold,
        )
        self._wait = wait
        self._retry_budget = retry_budget
        self._stop_margin = stop_margin
        self._on_lost = on_lost
        #: The one attempt this lock acquires with.
        self.attempt = Attempt.generate(operation_id)
        #: Acquire requests sent, and the outcome of the last one.
        self.acquire_requests = 0
        self.outcome: Optional[str] = None
        self.lease: Optional[Lease] = None
        self._keeper: Optional[Keeper] = None

    def __enter__(self) -> Lease:
        plan = _Plan(self._wait, self._retry_budget)
        while True:
            plan.requests += 1
            self.acquire_requests = plan.requests
            try:
                answer = self._client.acquire(
                    self.purpose,
                    digest=self.digest,
                    attempt=self.attempt,
                    wait=plan.wait_left(),
                    **self._args,  # type: ignore[arg-type]
                )
            except LeaseholdError as error:
                pause = plan.pause_after(error)
                if pause is None:
                    self._clean_up(plan)
                    raise
                time.sleep(pause)
                continue
            try:
                lease: Lease = plan.held(answer)
            finally:
                self.outcome = plan.outcome
            break
        self.lease = lease
        if self._on_lost is not None:
            lease.add_lost_callback(self._on_lost)
        self._keeper = Keeper(lease, self._stop_margin)
        self._keeper.start()
        return lease

    def _clean_up(self, plan: _Plan) -> None:
        if plan.may_hold:
            with contextlib.suppress(LeaseholdError):
                self._client.release(self.purpose, digest=self.digest, attempt=self.attempt)

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._keeper is not None:
            self._keeper.stop()
        lease = self.lease
        if lease is not None and lease.state is not LeaseState.RELEASED:
            with contextlib.suppress(LeaseholdError):  # else it expires by itself
                lease.release()


class AsyncLockContext:
    """What ``AsyncClient.lock`` returns; ``async with`` it to hold the lease."""

    def __init__(
        self,
        client: AsyncClient,
        purpose: str,
        digest: str,
        *,
        ttl: float,
        wait: float,
        holder: Optional[str],
        operation_id: str,
        retry_budget: float,
        stop_margin: Optional[float],
        on_lost: Optional[LostCallback],
        limit: int,
        mode: str,
        lock_delay: float,
        max_hold: Optional[float] = None,
    ) -> None:
        self._client = client
        self.purpose = purpose
        self.digest = digest
        self._args = dict(
            ttl=ttl,
            holder=holder,
            limit=limit,
            mode=mode,
            lock_delay=lock_delay,
            max_hold=max_hold,
        )
        self._wait = wait
        self._retry_budget = retry_budget
        self._stop_margin = stop_margin
        self._on_lost = on_lost
        self.attempt = Attempt.generate(operation_id)
        self.acquire_requests = 0
        self.outcome: Optional[str] = None
        self.lease: Optional[AsyncLease] = None
        self._keeper: Optional[AsyncKeeper] = None
        self._task: Optional[asyncio.Task[Any]] = None
        self._in_body = False
        self._cancel_pending = False
        self._callback_tasks: set[asyncio.Future[Any]] = set()

    async def __aenter__(self) -> AsyncLease:
        plan = _Plan(self._wait, self._retry_budget)
        while True:
            plan.requests += 1
            self.acquire_requests = plan.requests
            try:
                answer = await self._client.acquire(
                    self.purpose,
                    digest=self.digest,
                    attempt=self.attempt,
                    wait=plan.wait_left(),
                    **self._args,  # type: ignore[arg-type]
                )
            except LeaseholdError as error:
                pause = plan.pause_after(error)
                if pause is None:
                    await self._clean_up(plan)
                    raise
                await asyncio.sleep(pause)
                continue
            except asyncio.CancelledError:
                # Cancelled with the request in flight: it may have acquired.
                plan.may_hold = True
                await asyncio.shield(self._clean_up(plan))
                raise
            try:
                lease: AsyncLease = plan.held(answer)
            finally:
                self.outcome = plan.outcome
            break
        self.lease = lease
        self._task = asyncio.current_task()
        self._in_body = True
        lease.add_lost_callback(self._lost)
        self._keeper = AsyncKeeper(lease, self._stop_margin)
        self._keeper.start()
        return lease

    def _lost(self, lease: LeaseBase) -> None:
        if self._on_lost is not None:
            result = self._on_lost(lease)
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                self._callback_tasks.add(task)
                task.add_done_callback(self._callback_tasks.discard)
        if self._in_body and self._task is not None and not self._task.done():
            self._cancel_pending = True
            self._task.cancel()

    async def _clean_up(self, plan: _Plan) -> None:
        if plan.may_hold:
            with contextlib.suppress(LeaseholdError):
                await self._client.release(self.purpose, digest=self.digest, attempt=self.attempt)

    async def _finish(self) -> None:
        if self._keeper is not None:
            await self._keeper.stop()
        lease = self.lease
        if lease is not None and lease.state is not LeaseState.RELEASED:
            with contextlib.suppress(LeaseholdError):  # else it expires by itself
                await lease.release()

    def _consume_cancel(self) -> bool:
        """Takes back the cancellation this lock requested. False when someone else
        cancelled the task too (then the cancellation must go on)."""
        self._cancel_pending = False
        task = self._task
        if sys.version_info >= (3, 11) and task is not None:
            return task.uncancel() == 0
        # Before 3.11 a task does not count cancellations (third-party task classes
        # that emulate it do not count reliably): take it as ours.
        return True

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Optional[bool]:
        self._in_body = False
        ours = False
        if exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
            ours = self._cancel_pending and self._consume_cancel()
        for _ in range(2):
            try:
                await self._finish()
                break
            except asyncio.CancelledError:
                # Our cancellation arrived after the body ended: it was meant for the body.
                if not (self._cancel_pending and self._consume_cancel()):
                    raise
        if ours:
            lease = self.lease
            assert lease is not None
            state = lease.state
            raise LeaseLost(
                state if state is not LeaseState.RELEASED else LeaseState.LOST,
                lease.fencing_token,
                lease.lost_reason,
            ) from exc
        return None
