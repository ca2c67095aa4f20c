"""A checked history: sync and async workers contend for one resource through locks,
with replies dropped on the way (acquires replayed, renewals left UNKNOWN). Each worker
records when it believed it held the lease; no two beliefs overlap, and fencing tokens
grow in the order the beliefs began."""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from harness import Proxy, Service
from leasehold import AsyncClient, Client, LeaseBase, LeaseholdError, NotAcquired

P = "py-history"
RUN_FOR = 3.0
TTL = 0.4


@dataclass
class Belief:
    worker: str
    token: int
    start: float
    end: float
    lost: bool


def stamp(sink: list[float]) -> Callable[[LeaseBase], None]:
    """An on_lost callback that records when it was called into this lock's own list."""
    return lambda _: sink.append(time.monotonic())


def check(beliefs: list[Belief]) -> None:
    beliefs.sort(key=lambda b: b.start)
    assert len(beliefs) >= 4, beliefs
    for before, after in zip(beliefs, beliefs[1:]):
        assert before.end <= after.start, f"overlap: {before} and {after}"
        assert before.token < after.token, f"token went back: {before} then {after}"


def test_no_two_beliefs_overlap(service: Service) -> None:
    proxy = Proxy(int(service.url.rsplit(":", 1)[1]))
    proxy.drop_every("PUT", 5)
    proxy.drop_every("PATCH", 7)
    raw_id = uuid.uuid4().hex
    beliefs: list[Belief] = []
    guard = threading.Lock()
    stop_at = time.monotonic() + RUN_FOR

    def record(
        worker: str, lease: LeaseBase, start: float, lost_at: list[float], end: float
    ) -> None:
        end = min([end, *lost_at])
        with guard:
            beliefs.append(Belief(worker, lease.fencing_token, start, end, bool(lost_at)))

    def sync_worker(name: str) -> None:
        rng = random.Random(name)
        with Client(proxy.url) as client:
            while time.monotonic() < stop_at:
                lost_at: list[float] = []
                try:
                    with client.lock(
                        P,
                        raw_id,
                        ttl=TTL,
                        wait=1,
                        on_lost=stamp(lost_at),
                    ) as lease:
                        start = time.monotonic()
                        # The work: longer than the TTL at times, stopping when told.
                        lease.lost.wait(rng.uniform(0.05, 0.6))
                        record(name, lease, start, lost_at, time.monotonic())
                except (NotAcquired, LeaseholdError):
                    pass

    async def async_worker(name: str) -> None:
        rng = random.Random(name)
        async with AsyncClient(proxy.url) as client:
            while time.monotonic() < stop_at:
                lost_at: list[float] = []
                lease_ref: list[LeaseBase] = []
                start = 0.0
                body_end = [float("inf")]
                try:
                    async with client.lock(
                        P,
                        raw_id,
                        ttl=TTL,
                        wait=1,
                        on_lost=stamp(lost_at),
                    ) as lease:
                        start = time.monotonic()
                        lease_ref.append(lease)
                        await asyncio.sleep(rng.uniform(0.05, 0.6))
                        body_end[0] = time.monotonic()  # the belief ends with the body
                except (NotAcquired, LeaseholdError):
                    pass
                if lease_ref:
                    record(name, lease_ref[0], start, lost_at, body_end[0])

    threads = [threading.Thread(target=sync_worker, args=(f"sync-{i}",)) for i in range(3)]
    threads.append(
        threading.Thread(
            target=lambda: asyncio.run(_gather(async_worker("async-0"), async_worker("async-1")))
        )
    )
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(RUN_FOR + 10)
    finally:
        proxy.close()
    check(beliefs)
    dropped = sum(1 for r in proxy.seen if r.dropped)
    lost = sum(1 for b in beliefs if b.lost)
    print(
        f"{len(beliefs)} beliefs by 5 workers, {dropped} replies dropped,",
        f"{lost} ended by a loss signal",
    )
    assert any(r.dropped for r in proxy.seen), "no fault was injected"


async def _gather(*workers: Coroutine[Any, Any, None]) -> None:
    await asyncio.gather(*workers)
