"""The shared conformance table (clients/conformance/scenarios.json, DESIGN §15), run
against the real service: each ``fault.kind`` maps to a harness, each ``expect`` member
to a check. A kind or an expectation this runner does not know fails the test."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

from harness import REPO_ROOT, Proxy, Service, start_redis, start_service
from leasehold import AsyncClient, AsyncLease, Election, Term, digest

TABLE = REPO_ROOT / "clients" / "conformance" / "scenarios.json"
SCENARIOS: list[dict[str, Any]] = json.loads(TABLE.read_text())["scenarios"]
P = "py-conformance"

Observed = dict[str, Any]


def cases() -> Iterator[Any]:
    for scenario in SCENARIOS:
        stores = ["memory", "redis"] if scenario["store"] == "any" else [scenario["store"]]
        for store in stores:
            yield pytest.param(scenario, store, id=f"{scenario['id']}-{store}")


def port_of(service: Service) -> int:
    return int(service.url.rsplit(":", 1)[1])


async def drop_reply(scenario: dict[str, Any], service: Service) -> Observed:
    """A proxy forwards the acquire, lets the service answer, and cuts the connection
    instead of relaying the answer (``times`` times)."""
    fault = scenario["fault"]
    assert fault["verb"] == "acquire"
    proxy = Proxy(port_of(service))
    proxy.drop_replies("PUT", int(fault["times"]))
    ttl = scenario["lease"]["ttlMs"] / 1000
    raw_id = uuid.uuid4().hex
    try:
        async with AsyncClient(proxy.url) as client:
            lock = client.lock(P, raw_id, ttl=ttl)
            async with lock as lease:
                holds = lease.is_valid()
                seen = await client.inspect(P, raw_id, attempt=lease.attempt)
                holds = holds and seen.held_by == "caller"
        acquires = proxy.acquires()
        return {
            "holds": holds,
            "attemptsCreated": len({(r.owner_token, r.operation_id) for r in acquires})
            + sum(1 for r in proxy.seen if r.path == "/attempts"),
            "acquireRequests": len(acquires),
            "finalOutcome": lock.outcome,
            "dropped": sum(1 for r in acquires if r.dropped),
        }
    finally:
        proxy.close()


async def freeze_store(scenario: dict[str, Any], service: Service) -> Observed:
    """SIGSTOP the redis-server ``afterMs`` into the lease, SIGCONT ``forMs`` later."""
    assert service.redis is not None
    fault = scenario["fault"]
    ttl = scenario["lease"]["ttlMs"] / 1000
    signals: list[float] = []
    loop = asyncio.get_running_loop()
    thawed = asyncio.Event()
    async with AsyncClient(service.url) as client:
        lease_ref: list[AsyncLease] = []
        try:
            async with client.lock(
                P, uuid.uuid4().hex, ttl=ttl, on_lost=lambda _: signals.append(time.monotonic())
            ) as lease:
                lease_ref.append(lease)
                await asyncio.sleep(fault["afterMs"] / 1000)
                service.redis.freeze()
                redis = service.redis

                def thaw() -> None:
                    redis.thaw()
                    thawed.set()

                loop.call_later(fault["forMs"] / 1000, thaw)
                valid_until = lease.valid_until  # as last extended before the freeze
                await asyncio.wait_for(lease.lost.wait(), ttl * 2)
                await asyncio.sleep(ttl)  # the body would be cancelled here
        except Exception as e:  # LeaseLost: the body was cancelled
            assert type(e).__name__ == "LeaseLost", e
        await thawed.wait()
    lease = lease_ref[0]
    return {
        "state": lease.state.value,
        "signalled": bool(signals),
        "signalledBeforeValidityEnds": bool(signals) and signals[0] < valid_until,
        "signalledMsBeforeValidityEnds": (valid_until - signals[0]) * 1000 if signals else None,
    }


async def delete_lease_key(scenario: dict[str, Any], service: Service) -> Observed:
    """The lease record is deleted behind the holder; its next renew answers ``lost``."""
    assert service.redis is not None
    ttl = scenario["lease"]["ttlMs"] / 1000
    raw_id = uuid.uuid4().hex
    signals: list[float] = []
    async with AsyncClient(service.url) as client:
        lease_ref: list[AsyncLease] = []
        try:
            async with client.lock(
                P, raw_id, ttl=ttl, on_lost=lambda _: signals.append(time.monotonic())
            ) as lease:
                lease_ref.append(lease)
                key = service.lease_key(P, digest(raw_id))
                assert service.redis.cli("DEL", key) == "1", key
                await asyncio.wait_for(lease.lost.wait(), ttl)
                await asyncio.sleep(ttl)
        except Exception as e:
            assert type(e).__name__ == "LeaseLost", e
    lease = lease_ref[0]
    return {"state": lease.state.value, "signalled": bool(signals)}


async def _second_candidate(
    client: AsyncClient, raw_id: str, ttl: float
) -> tuple[Election, asyncio.Future[None], asyncio.Event, list[float]]:
    started_at: list[float] = []
    leading = asyncio.Event()

    def started(term: Term) -> None:
        started_at.append(time.monotonic())
        leading.set()

    election = Election(
        client, P, raw_id, holder="second", ttl=ttl, wait=10, on_started_leading=started
    )
    return election, asyncio.ensure_future(election.campaign()), leading, started_at


async def _campaigning(client: AsyncClient, raw_id: str) -> None:
    """Until the second candidate's acquire waits server-side (the service's gauge)."""
    import httpx

    async with httpx.AsyncClient() as http:
        for _ in range(500):
            ready = (await http.get(client.base_url + "/readyz")).json()
            if ready.get("waiters", 0) >= 1:
                return
            await asyncio.sleep(0.01)
    raise TimeoutError("the second candidate never waited")


async def kill_leader_process(scenario: dict[str, Any], service: Service) -> Observed:
    """The leader runs in its own process and gets SIGKILL while leading."""
    ttl = scenario["lease"]["ttlMs"] / 1000
    raw_id = uuid.uuid4().hex
    script = Path(__file__).with_name("leader_process.py")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(script.parent), env.get("PYTHONPATH", "")])
    leader = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        service.url,
        P,
        raw_id,
        str(ttl),
        "first",
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert leader.stdout is not None
        line = await asyncio.wait_for(leader.stdout.readline(), 10)
        assert line.startswith(b"leading "), line
        async with AsyncClient(service.url) as client:
            election, campaign, leading, started_at = await _second_candidate(client, raw_id, ttl)
            await _campaigning(client, raw_id)
            assert not leading.is_set()
            leader.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            await leader.wait()
            await asyncio.wait_for(leading.wait(), ttl * 3)
            await election.resign()
            await campaign
        return {"nextLeaderWithinMs": (started_at[0] - killed_at) * 1000}
    finally:
        if leader.returncode is None:
            leader.kill()
            await leader.wait()


async def resign(scenario: dict[str, Any], service: Service) -> Observed:
    """The leader resigns in process; the second candidate waits server-side."""
    ttl = scenario["lease"]["ttlMs"] / 1000
    raw_id = uuid.uuid4().hex
    async with AsyncClient(service.url) as client:
        first_leading = asyncio.Event()
        first = Election(
            client,
            P,
            raw_id,
            holder="first",
            ttl=ttl,
            on_started_leading=lambda t: first_leading.set(),
        )
        first_campaign = asyncio.ensure_future(first.campaign())
        await asyncio.wait_for(first_leading.wait(), 5)
        election, campaign, leading, started_at = await _second_candidate(client, raw_id, ttl)
        await _campaigning(client, raw_id)
        await first.resign()
        resigned_at = time.monotonic()
        await first_campaign
        await asyncio.wait_for(leading.wait(), 5)
        await election.resign()
        await campaign
    # The new leader's acquire may be answered before `resign` returns: negative.
    signed = (started_at[0] - resigned_at) * 1000
    return {"nextLeaderWithinMs": max(0.0, signed), "signedMs": signed}


HARNESSES: dict[str, Callable[[dict[str, Any], Service], Awaitable[Observed]]] = {
    "drop_reply": drop_reply,
    "freeze_store": freeze_store,
    "delete_lease_key": delete_lease_key,
    "kill_leader_process": kill_leader_process,
    "resign": resign,
}


def check(expect: dict[str, Any], observed: Observed) -> None:
    for name, wanted in expect.items():
        assert name in observed, f"this runner does not observe {name!r}"
        got = observed[name]
        if name == "stateIn":
            continue
        if name.endswith("WithinMs"):
            assert got <= wanted, f"{name}: {got:.1f} ms > {wanted} ms"
        else:
            assert got == wanted, f"{name}: {got!r} != {wanted!r} ({observed})"
    if "stateIn" in expect:
        assert observed["state"] in expect["stateIn"], observed


@pytest.mark.parametrize(("scenario", "store"), list(cases()))
async def test_scenario(
    scenario: dict[str, Any], store: str, request: pytest.FixtureRequest
) -> None:
    kind = scenario["fault"]["kind"]
    assert kind in HARNESSES, f"no harness for fault kind {kind!r}"
    fresh = kind in ("freeze_store", "delete_lease_key")
    if store == "memory":
        service: Service = request.getfixturevalue("memory_service")
        observed = await HARNESSES[kind](scenario, service)
    elif not fresh:
        service = request.getfixturevalue("redis_service")
        observed = await HARNESSES[kind](scenario, service)
    else:
        redis = start_redis()
        service = start_service(redis)
        try:
            observed = await HARNESSES[kind](scenario, service)
        finally:
            service.stop()
            redis.stop()
    observed.setdefault("stateIn", observed.get("state"))
    print(f"{scenario['id']} [{store}]: {observed}")
    check(scenario["expect"], observed)
