"""``Election``: campaign, leader, proclaim, observe, resign, callbacks."""

from __future__ import annotations

import asyncio
from typing import Optional

from leasehold import AsyncClient, Election, Leader, StopReason, Term
from leasehold.election import observe

P = "py-election"


async def test_campaign_proclaim_resign_and_follow(aclient: AsyncClient, raw_id: str) -> None:
    events: list[tuple[str, object]] = []
    leading = asyncio.Event()
    work_cancelled = asyncio.Event()
    leaders: asyncio.Queue[Leader] = asyncio.Queue()

    async def work(term: Term) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            work_cancelled.set()
            raise

    def started(term: Term) -> object:
        events.append(("started", term.fencing_token))
        leading.set()
        return work(term)

    def stopped(term: Term, reason: StopReason) -> None:
        events.append(("stopped", reason))

    alpha = Election(
        aclient,
        P,
        raw_id,
        holder="alpha",
        ttl=2,
        wait=1,
        on_started_leading=started,
        on_stopped_leading=stopped,
        on_new_leader=leaders.put_nowait,
    )
    campaign = asyncio.ensure_future(alpha.campaign())
    await asyncio.wait_for(leading.wait(), 5)
    term = alpha.term
    assert term is not None and alpha.is_leader
    leader = await alpha.leader()
    assert leader.holder == "alpha" and leader.fencing_token == term.fencing_token

    # The follower reports the leader, then every change of label.
    async def next_leader(holder: Optional[str]) -> Leader:
        while True:
            seen = await asyncio.wait_for(leaders.get(), 5)
            if seen.holder == holder:
                return seen

    await next_leader("alpha")
    observer = observe(aclient, P, raw_id, wait=1)
    assert (await observer.__anext__()).holder == "alpha"
    await alpha.proclaim("alpha@host-2")
    proclaimed = await next_leader("alpha@host-2")
    assert proclaimed.fencing_token == term.fencing_token
    assert (await observer.__anext__()).holder == "alpha@host-2"

    # Renewals keep it past its TTL.
    await asyncio.sleep(2.5)
    assert alpha.is_leader and term.is_leading

    await alpha.resign()
    await asyncio.wait_for(campaign, 5)
    assert work_cancelled.is_set() and term.ended.is_set()
    assert events == [("started", term.fencing_token), ("stopped", StopReason.RESIGNED)]
    assert not (await alpha.leader()).is_held
    assert (await observer.__anext__()) == Leader()
    await observer.aclose()


async def test_cancelling_the_campaign_resigns(aclient: AsyncClient, raw_id: str) -> None:
    leading = asyncio.Event()
    election = Election(
        aclient, P, raw_id, holder="solo", ttl=5, on_started_leading=lambda t: leading.set()
    )
    campaign = asyncio.ensure_future(election.campaign())
    await asyncio.wait_for(leading.wait(), 5)
    campaign.cancel()
    await asyncio.wait([campaign])
    assert campaign.cancelled()
    assert not (await election.leader()).is_held
