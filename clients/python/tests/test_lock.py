"""``client.lock``: acquire with one attempt, keep renewed, signal the loss, release."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from harness import Proxy, Service
from leasehold import (
    AsyncClient,
    AsyncLease,
    Client,
    Contended,
    LeaseBase,
    LeaseLost,
    LeaseState,
    NotAcquired,
)

P = "py-lock"


@pytest.fixture
def proxy(service: Service) -> Iterator[Proxy]:
    p = Proxy(int(service.url.rsplit(":", 1)[1]))
    yield p
    p.close()


def test_lock_renews_and_releases(client: Client, raw_id: str) -> None:
    # A TTL of 1.5 s, not less: a loaded CI machine stalled a 0.6 s lease's
    # renewals long enough to lose it once.
    with client.lock(P, raw_id, ttl=1.5, holder="py-worker") as lease:
        first_valid_until = lease.valid_until
        # Held for three TTLs: only renewals keep it.
        assert not lease.lost.wait(4.5)
        lease.check()
        assert lease.valid_until > first_valid_until + 1.0
        seen = client.inspect(P, raw_id)
        assert seen.held and seen.fencing_token == lease.fencing_token
        assert seen.holder == "py-worker"
    assert lease.state is LeaseState.RELEASED
    assert not client.inspect(P, raw_id).held


def test_lock_not_acquired_when_held(client: Client, raw_id: str) -> None:
    with client.lock(P, raw_id, ttl=30), pytest.raises(NotAcquired) as caught:  # noqa: SIM117
        with client.lock(P, raw_id, ttl=30):
            pytest.fail("two holders")
    assert isinstance(caught.value.outcome, Contended)


def test_lock_waits_for_the_holder(client: Client, raw_id: str) -> None:
    held = threading.Event()
    done = threading.Event()

    def holder() -> None:
        with client.lock(P, raw_id, ttl=30):
            held.set()
            done.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    assert held.wait(5)
    timer = threading.Timer(0.3, done.set)
    timer.start()
    with client.lock(P, raw_id, ttl=30, wait=10) as lease:
        assert lease.is_valid()
    t.join(5)


def test_lock_signals_unknown_when_renewals_go_unanswered(
    service: Service, proxy: Proxy, raw_id: str
) -> None:
    signalled: list[tuple[float, LeaseState]] = []

    def on_lost(lease: LeaseBase) -> None:
        signalled.append((time.monotonic(), lease.state))

    with Client(proxy.url) as c, c.lock(P, raw_id, ttl=1.0, on_lost=on_lost) as lease:
        valid_until = lease.valid_until
        proxy.drop_replies("PATCH", 100)
        assert lease.lost.wait(2)
        with pytest.raises(LeaseLost):
            lease.check()
    assert signalled and signalled[0][0] < valid_until
    assert signalled[0][1] is LeaseState.UNKNOWN


async def test_async_lock_renews_and_releases(aclient: AsyncClient, raw_id: str) -> None:
    async with aclient.lock(P, raw_id, ttl=1.5) as lease:
        first = lease.valid_until
        await asyncio.sleep(3.5)  # the work; renewals keep the lease meanwhile
        lease.check()
        assert lease.valid_until > first + 0.8
    assert lease.state is LeaseState.RELEASED
    assert not (await aclient.inspect(P, raw_id)).held


async def test_async_lock_cancels_the_body_before_validity_ends(
    service: Service, proxy: Proxy, raw_id: str
) -> None:
    called: list[float] = []

    async def on_lost(lease: LeaseBase) -> None:
        called.append(time.monotonic())

    cancelled_at = 0.0
    valid_until = 0.0
    lease: AsyncLease | None = None
    async with AsyncClient(proxy.url) as c:
        with pytest.raises(LeaseLost) as caught:
            async with c.lock(P, raw_id, ttl=1.0, on_lost=on_lost) as lease:
                valid_until = lease.valid_until
                proxy.drop_replies("PATCH", 100)
                try:
                    await asyncio.sleep(30)  # the protected work
                except asyncio.CancelledError:
                    cancelled_at = time.monotonic()
                    raise
    assert lease is not None
    assert caught.value.state is LeaseState.UNKNOWN
    assert 0 < cancelled_at < valid_until
    await asyncio.sleep(0)
    assert called and called[0] < valid_until
    # The task itself is not left cancelled.
    await asyncio.sleep(0.01)


async def test_async_lock_outside_cancellation_is_not_swallowed(
    aclient: AsyncClient, raw_id: str
) -> None:
    entered = asyncio.Event()

    async def work() -> None:
        async with aclient.lock(P, raw_id, ttl=5):
            entered.set()
            await asyncio.sleep(30)

    task = asyncio.ensure_future(work())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not (await aclient.inspect(P, raw_id)).held


def test_a_hung_renew_does_not_delay_the_signal(proxy: Proxy, raw_id: str) -> None:
    """Renew replies held back (the request in flight for longer than the lease): the
    watchdog gives the lease up before local validity ends all the same."""
    with Client(proxy.url, timeout=10) as c, c.lock(P, raw_id, ttl=1.0) as lease:
        proxy.stall_replies("PATCH", 100)
        # One renew may have landed before the stall: take the deadline after it.
        valid_until = lease.valid_until
        while not lease.lost.wait(0.05):
            valid_until = lease.valid_until
        signalled = time.monotonic()
        assert lease.state is LeaseState.LOST and lease.expired_locally
        assert signalled < valid_until
        assert any(r.stalled for r in proxy.seen)


async def test_async_a_hung_renew_does_not_delay_the_cancellation(
    proxy: Proxy, raw_id: str
) -> None:
    async with AsyncClient(proxy.url, timeout=10) as c:
        with pytest.raises(LeaseLost) as caught:
            async with c.lock(P, raw_id, ttl=1.0) as lease:
                proxy.stall_replies("PATCH", 100)
                deadline = lease.valid_until
                try:
                    while True:
                        deadline = lease.valid_until  # as far as a landed renew took it
                        await asyncio.sleep(0.02)
                except asyncio.CancelledError:
                    cancelled = time.monotonic()
                    raise
        assert caught.value.state is LeaseState.LOST
        assert cancelled < deadline
