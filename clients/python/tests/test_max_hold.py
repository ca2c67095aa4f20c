"""Bounded holds (``maxHoldMs``) on the client side, against a scripted service
(``httpx.MockTransport``): the option is sent, the fields are parsed, a renew granted
less than asked cuts local validity to what it answered, and the hold's end (said by
the service or reached locally) ends the keep-alive with ``reason: max_hold``."""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from typing import Any, Optional

import httpx
import pytest

from leasehold import (
    Acquired,
    AlreadyAbsent,
    AsyncClient,
    Attempt,
    Client,
    LeaseLost,
    LeaseState,
    Lost,
    Renewed,
    Replayed,
    digest,
)
from leasehold.election import Election, StopReason

P = "py-max-hold"
RAW = "order-42"
URL = "http://leasehold.test"


def lease_body(
    ttl_ms: int, remaining_ms: int, max_hold_ms: Optional[int] = None, **extra: Any
) -> dict[str, Any]:
    lease: dict[str, Any] = {
        "purpose": P,
        "digest": digest(RAW),
        "fencingToken": 7,
        "ttlMs": ttl_ms,
        "remainingMs": remaining_ms,
        "guarantee": "fenced",
        "acquiredAt": "2026-12-04T16:00:00.000Z",
        "renewedAt": "2026-12-04T16:00:00.000Z",
        **extra,
    }
    if max_hold_ms is not None:
        lease["maxHoldMs"] = max_hold_ms
        lease["holdEndsAt"] = "2026-12-04T16:00:40.000Z"
    return lease


class Script:
    """The service's answers per method, in order; the last one of each repeats. Every
    request is kept (method, JSON body)."""

    def __init__(self, **answers: list[tuple[int, dict[str, Any]]]) -> None:
        self.answers = {method: deque(replies) for method, replies in answers.items()}
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        self.requests.append((request.method, body))
        queue = self.answers[request.method]
        status, reply = queue.popleft() if len(queue) > 1 else queue[0]
        return httpx.Response(status, json=reply)

    def sent(self, method: str) -> list[dict[str, Any]]:
        return [body for m, body in self.requests if m == method]


def acquired(ttl_ms: int, remaining_ms: int, max_hold_ms: Optional[int]) -> tuple[int, Any]:
    return (201, {"outcome": "acquired", "lease": lease_body(ttl_ms, remaining_ms, max_hold_ms)})


def renewed(ttl_ms: int, remaining_ms: int, max_hold_ms: int) -> tuple[int, Any]:
    return (200, {"outcome": "renewed", "lease": lease_body(ttl_ms, remaining_ms, max_hold_ms)})


LOST_MAX_HOLD = (404, {"outcome": "lost", "reason": "max_hold"})
ABSENT_MAX_HOLD = (200, {"outcome": "already_absent", "reason": "max_hold"})


def client_for(script: Script) -> Client:
    return Client(URL, transport=httpx.MockTransport(script))


def test_max_hold_is_sent_in_ms_and_only_when_given() -> None:
    script = Script(PUT=[acquired(30_000, 30_000, 40_000)])
    with client_for(script) as client:
        client.acquire(P, RAW, attempt=Attempt.generate("a"), ttl=30, max_hold=40)
        client.acquire(P, RAW, attempt=Attempt.generate("b"), ttl=30)
    with_bound, without = script.sent("PUT")
    assert with_bound == {"ttlMs": 30_000, "maxHoldMs": 40_000}
    assert without == {"ttlMs": 30_000}


def test_lock_sends_max_hold() -> None:
    script = Script(
        PUT=[acquired(30_000, 30_000, 3_600_000)],
        DELETE=[(200, {"outcome": "released"})],
        PATCH=[renewed(30_000, 30_000, 3_600_000)],
    )
    with client_for(script) as client, client.lock(P, RAW, ttl=30, max_hold=3600) as lease:
        assert lease.record.max_hold_ms == 3_600_000
    assert script.sent("PUT") == [{"ttlMs": 30_000, "maxHoldMs": 3_600_000}]


def test_the_lease_and_the_permits_carry_the_bound() -> None:
    permit = {
        "fencingToken": 7,
        "remainingMs": 900,
        "ttlMs": 1000,
        "acquiredAt": "2026-12-04T16:00:00.000Z",
        "renewedAt": "2026-12-04T16:00:00.000Z",
        "maxHoldMs": 40_000,
        "holdEndsAt": "2026-12-04T16:00:40.000Z",
    }
    inspected = {
        "outcome": "inspected",
        "held": True,
        "version": "3.1",
        "holders": 1,
        "permits": [
            permit,
            {k: v for k, v in permit.items() if k not in ("maxHoldMs", "holdEndsAt")},
        ],
    }
    script = Script(PUT=[acquired(30_000, 30_000, 40_000)], GET=[(200, inspected)])
    with client_for(script) as client:
        got = client.acquire(P, RAW, attempt=Attempt.generate("a"), ttl=30, max_hold=40)
        assert isinstance(got, Acquired)
        assert got.lease.max_hold_ms == 40_000
        assert got.lease.hold_ends_at == "2026-12-04T16:00:40.000Z"
        bounded, unbounded = client.inspect(P, RAW).permits
    assert (bounded.max_hold_ms, bounded.hold_ends_at) == (40_000, "2026-12-04T16:00:40.000Z")
    assert (unbounded.max_hold_ms, unbounded.hold_ends_at) == (None, None)


def test_an_unbounded_lease_has_no_bound() -> None:
    script = Script(PUT=[acquired(30_000, 30_000, None)])
    with client_for(script) as client:
        got = client.acquire(P, RAW, attempt=Attempt.generate("a"), ttl=30)
    assert isinstance(got, Acquired)
    assert (got.lease.max_hold_ms, got.lease.hold_ends_at) == (None, None)
    assert got.handle.hold_until is None and not got.handle.at_hold_end


def test_a_bound_below_the_ttl_is_the_granted_ttl() -> None:
    """``maxHoldMs`` < ``ttlMs``: granted ``maxHoldMs``; validity from it, at the hold's end."""
    script = Script(PUT=[acquired(2_000, 2_000, 2_000)])
    with client_for(script) as client:
        got = client.acquire(P, RAW, attempt=Attempt.generate("a"), ttl=30, max_hold=2)
        answered = time.monotonic()
    assert isinstance(got, Acquired)
    lease = got.handle
    assert lease.at_hold_end
    assert lease.valid_until <= answered + 2.0 - lease.drift
    assert lease.valid_for() > 1.5


def test_a_capped_renew_gives_validity_from_what_it_answered() -> None:
    """A replay 25 s into a 30 s lease bounded to 40 s, then a renew asking 30 s: the
    service grants the 15 s left of the hold. Validity runs from the renew's send for
    the 15 s answered, not the 30 s asked, and no renew can extend it further."""
    replayed = {"outcome": "replayed_same_operation", "lease": lease_body(30_000, 5_000, 40_000)}
    script = Script(PUT=[(200, replayed)], PATCH=[renewed(15_000, 15_000, 40_000)])
    with client_for(script) as client:
        got = client.acquire(P, RAW, attempt=Attempt.generate("a"), ttl=30, max_hold=40)
        assert isinstance(got, Replayed)
        lease = got.handle
        assert 4 < lease.valid_for() <= 5
        # The replay cannot tell when the first acquire was sent: the hold's end is not
        # known locally yet.
        assert lease.hold_until is None and not lease.at_hold_end
        sent = time.monotonic()
        answer = lease.renew()
        answered = time.monotonic()
    assert isinstance(answer, Renewed) and answer.lease.ttl_ms == 15_000
    assert script.sent("PATCH") == [{"ttlMs": 30_000}]
    assert sent + 15.0 - lease.drift <= lease.valid_until <= answered + 15.0 - lease.drift
    assert lease.at_hold_end, "a grant shorter than asked is the hold's end"
    assert lease.hold_until == lease.valid_until
    assert lease.state is LeaseState.ACTIVE and lease.lost_reason is None


def test_lost_and_already_absent_say_max_hold() -> None:
    script = Script(
        PUT=[acquired(30_000, 30_000, 40_000)], PATCH=[LOST_MAX_HOLD], DELETE=[ABSENT_MAX_HOLD]
    )
    with client_for(script) as client:
        got = client.acquire(P, RAW, attempt=Attempt.generate("a"), ttl=30, max_hold=40)
        assert isinstance(got, Acquired)
        lease = got.handle
        assert lease.renew() == Lost("max_hold")
        assert lease.state is LeaseState.LOST and lease.lost_reason == "max_hold"
        with pytest.raises(LeaseLost) as lost:
            lease.check()
        assert lost.value.reason == "max_hold" and "max_hold" in str(lost.value)
        assert lease.release() == AlreadyAbsent("max_hold")


def test_the_keep_alive_ends_on_a_max_hold_lost() -> None:
    script = Script(
        PUT=[acquired(1_500, 1_500, 60_000)],
        PATCH=[LOST_MAX_HOLD],
        DELETE=[ABSENT_MAX_HOLD],
    )
    with client_for(script) as client, client.lock(P, RAW, ttl=1.5, max_hold=60) as lease:
        assert lease.lost.wait(5), "the first renew answers lost"
        assert lease.state is LeaseState.LOST and not lease.expired_locally
        assert lease.lost_reason == "max_hold"
        with pytest.raises(LeaseLost) as lost:
            lease.check()
        assert lost.value.reason == "max_hold"
    assert len(script.sent("PATCH")) == 1, "no renew after lost"


def test_the_keep_alive_stops_at_the_hold_end_with_max_hold() -> None:
    """Granted less than asked: renewals cannot extend it, so the watchdog stops the work
    ``stop_margin`` before the hold's end (by default a tenth of the TTL *granted*), with
    ``max_hold``, and sends no renew storm."""
    script = Script(
        PUT=[acquired(600, 600, 600)],
        PATCH=[renewed(300, 300, 600)],
        DELETE=[ABSENT_MAX_HOLD],
    )
    reasons: list[Optional[str]] = []
    with client_for(script) as client:
        started = time.monotonic()
        with client.lock(
            P,
            RAW,
            ttl=3,
            max_hold=0.6,
            on_lost=lambda lease: reasons.append(lease.lost_reason),
        ) as lease:
            assert lease.at_hold_end
            assert lease.lost.wait(5)
            took = time.monotonic() - started
            assert took > 0.45, "margin: a tenth of the 0.6 s granted, not of the 3 s asked"
            assert lease.expired_locally and lease.lost_reason == "max_hold"
    assert reasons == ["max_hold"]
    assert took < 1.5, took  # at the 0.6 s hold, well before the 3 s TTL asked
    # A third of the 3 s TTL is past the hold's end: no renew was worth sending.
    assert script.sent("PATCH") == []


async def test_async_lock_raises_lease_lost_max_hold() -> None:
    script = Script(
        PUT=[acquired(1_500, 1_500, 60_000)],
        PATCH=[LOST_MAX_HOLD],
        DELETE=[ABSENT_MAX_HOLD],
    )
    async with AsyncClient(URL, transport=httpx.MockTransport(script)) as client:
        with pytest.raises(LeaseLost) as lost:
            async with client.lock(P, RAW, ttl=1.5, max_hold=60):
                await asyncio.sleep(10)
    assert lost.value.reason == "max_hold"
    assert lost.value.state is LeaseState.LOST
    assert script.sent("PUT") == [{"ttlMs": 1_500, "maxHoldMs": 60_000}]


async def test_async_capped_renew_then_hold_end() -> None:
    """A renew cut short by the hold's end keeps the handle ACTIVE until what it answered,
    then the async watchdog ends it with ``max_hold``."""
    script = Script(
        PUT=[acquired(900, 900, 1_200)],
        PATCH=[renewed(600, 600, 1_200)],
        DELETE=[ABSENT_MAX_HOLD],
    )
    async with AsyncClient(URL, transport=httpx.MockTransport(script)) as client:
        with pytest.raises(LeaseLost) as lost:
            async with client.lock(P, RAW, ttl=0.9, max_hold=1.2, stop_margin=0.1) as lease:
                await asyncio.sleep(10)
    assert lost.value.reason == "max_hold"
    assert lease.expired_locally and lease.at_hold_end
    # After the short grant renewals come at a third of the TTL (they still hear a
    # break), not ever faster as the time left shrinks.
    assert 1 <= len(script.sent("PATCH")) <= 3, script.sent("PATCH")


async def test_an_election_term_ends_at_the_hold_end() -> None:
    """``Election(max_hold=...)`` sends it; the term ends EXPIRING before the hold's end
    (the leading margin taken from the TTL granted) and the candidate campaigns again."""
    script = Script(PUT=[acquired(600, 600, 600)], DELETE=[ABSENT_MAX_HOLD])
    stopped: asyncio.Queue[StopReason] = asyncio.Queue()
    started: asyncio.Queue[int] = asyncio.Queue()
    async with AsyncClient(URL, transport=httpx.MockTransport(script)) as client:
        election = Election(
            client,
            P,
            RAW,
            holder="alpha",
            ttl=3,
            max_hold=0.6,
            follow=False,
            on_started_leading=lambda term: started.put_nowait(term.fencing_token),
            on_stopped_leading=lambda term, why: stopped.put_nowait(why),
        )
        campaign = asyncio.ensure_future(election.campaign())
        first = await asyncio.wait_for(stopped.get(), 5)
        await asyncio.wait_for(started.get(), 5)
        await asyncio.wait_for(started.get(), 5)  # a second term: it campaigned again
        await election.resign()
        await campaign
    assert first is StopReason.EXPIRING
    assert script.sent("PUT")[0] == {
        "ttlMs": 3_000,
        "waitMs": 10_000,
        "holder": "alpha",
        "maxHoldMs": 600,
    }
