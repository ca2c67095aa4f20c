"""Every verb and outcome against the real service, on the embedded store and on Redis."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Optional

import pytest

from harness import Service, free_port, start_service
from leasehold import (
    Acquired,
    AcquireOutcome,
    AlreadyAbsent,
    AsyncClient,
    Attempt,
    Client,
    Contended,
    InvalidRequest,
    Lease,
    LeaseLost,
    LeaseState,
    LimitMismatch,
    Lost,
    NotOwner,
    Overloaded,
    OwnerOperationConflict,
    Refused,
    Rejected,
    Released,
    Renewed,
    RenewOutcome,
    Replayed,
    Unavailable,
    digest,
)

P = "py-contract"


def acquired(outcome: AcquireOutcome[Lease]) -> Acquired[Lease]:
    assert isinstance(outcome, Acquired), outcome
    return outcome


def test_attempt_from_the_service_and_made_locally(client: Client) -> None:
    attempt = client.attempt("export-1")
    assert attempt.operation_id == "export-1"
    assert len(attempt.owner_token) == 32
    assert "owner_token" not in repr(attempt)
    local = Attempt.generate("export-2")
    assert len(local.owner_token) == 32 and local.owner_token != attempt.owner_token
    with pytest.raises(ValueError):
        Attempt.generate("has space")


def test_acquire_replay_renew_inspect_release(client: Client, raw_id: str) -> None:
    attempt = client.attempt()
    sent = time.monotonic()
    first = client.acquire(P, raw_id, attempt=attempt, ttl=30, holder="worker-7")
    got = acquired(first)
    lease = got.handle
    assert got.lease.digest == digest(raw_id) and got.lease.purpose == P
    assert got.lease.ttl_ms == 30000 and got.lease.guarantee == "fenced"
    assert got.lease.holder == "worker-7"
    # Local validity counts from the send, minus max(10 ms, 1 % of the TTL).
    assert sent <= lease.valid_until - (30 - 0.3) <= time.monotonic()
    assert lease.state is LeaseState.ACTIVE and lease.fencing_token == got.lease.fencing_token

    again = client.acquire(P, raw_id, attempt=attempt, ttl=30, holder="worker-7")
    assert isinstance(again, Replayed)
    assert again.lease.fencing_token == lease.fencing_token
    assert again.lease.remaining_ms <= 30000

    renewed = lease.renew()
    assert isinstance(renewed, Renewed)
    assert renewed.lease.fencing_token == lease.fencing_token

    mine = client.inspect(P, raw_id, attempt=attempt)
    assert mine.held and mine.held_by == "caller" and mine.holder == "worker-7"
    assert mine.fencing_token == lease.fencing_token and mine.holders == 1
    assert len(mine.permits) == 1
    theirs = client.inspect(P, raw_id, attempt=client.attempt())
    assert theirs.held_by == "other"
    anyone = client.inspect(P, raw_id)
    assert anyone.held_by is None and anyone.version

    assert isinstance(lease.release(), Released)
    assert lease.state is LeaseState.RELEASED  # type: ignore[comparison-overlap]
    assert not lease.lost.is_set()
    assert isinstance(client.release(P, raw_id, attempt=attempt), AlreadyAbsent)
    with pytest.raises(Refused):
        lease.renew()
    with pytest.raises(Refused):
        lease.release()
    assert not client.inspect(P, raw_id).held


def test_refusals(client: Client, raw_id: str) -> None:
    holder = client.attempt()
    lease = acquired(client.acquire(P, raw_id, attempt=holder, ttl=30, limit=1)).handle
    other = client.attempt()
    contended = client.acquire(P, raw_id, attempt=other, ttl=30)
    assert isinstance(contended, Contended)
    assert 0 < contended.retry_after_ms <= 30000 and contended.reason is None
    same_owner = Attempt(holder.owner_token, "another-operation")
    conflict = client.acquire(P, raw_id, attempt=same_owner, ttl=30)
    assert isinstance(conflict, OwnerOperationConflict) and conflict.retry_after_ms > 0
    mismatch = client.acquire(P, raw_id, attempt=other, ttl=30, limit=3)
    assert isinstance(mismatch, LimitMismatch) and mismatch.limit == 1
    assert isinstance(client.release(P, raw_id, attempt=other), NotOwner)
    not_owner = client.renew(P, raw_id, attempt=other, ttl=30)
    assert isinstance(not_owner, Lost) and not_owner.reason == "not_owner"
    lease.release()
    absent = client.renew(P, raw_id, attempt=holder, ttl=30)
    assert isinstance(absent, Lost) and absent.reason == "absent"


def test_lost_renew_makes_the_handle_lost(client: Client, raw_id: str) -> None:
    attempt = client.attempt()
    lease = acquired(client.acquire(P, raw_id, attempt=attempt, ttl=30)).handle
    client.release(P, raw_id, attempt=attempt)  # behind the handle's back
    outcome = lease.renew()
    assert isinstance(outcome, Lost) and outcome.reason == "absent"
    assert lease.state is LeaseState.LOST and lease.lost.is_set()
    with pytest.raises(Refused):
        lease.renew()


def test_local_validity_runs_out(client: Client, raw_id: str) -> None:
    lease = acquired(client.acquire(P, raw_id, attempt=client.attempt(), ttl=0.2)).handle
    assert lease.valid_for() > 0
    deadline = lease.valid_until
    while time.monotonic() < deadline:
        time.sleep(max(0.0, deadline - time.monotonic()))
    assert lease.state is LeaseState.LOST and lease.expired_locally and lease.lost.is_set()
    with pytest.raises(Refused):
        lease.renew()


def test_wait_server_side(client: Client, raw_id: str) -> None:
    first = acquired(client.acquire(P, raw_id, attempt=client.attempt(), ttl=30)).handle
    result: list[AcquireOutcome[Lease]] = []
    waiter = threading.Thread(
        target=lambda: result.append(
            client.acquire(P, raw_id, attempt=client.attempt(), ttl=30, wait=10)
        )
    )
    waiter.start()
    # Released once the waiter is queued (inspect shows nothing of waiters: poll the
    # service's waiter gauge instead of sleeping).
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        import httpx

        if httpx.get(client.base_url + "/readyz").json().get("waiters", 0) >= 1:
            break
    first.release()
    waiter.join(10)
    got = acquired(result[0])
    assert got.waited_ms is not None and got.lease.fencing_token > first.fencing_token


def test_invalid_input_names_each_field(client: Client, raw_id: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        client.acquire(P, raw_id, attempt=client.attempt(), ttl=0.001, wait=3600)
    fields = {e.field for e in caught.value.errors}
    assert {"ttlMs", "waitMs"} <= fields, caught.value.errors
    assert caught.value.status in (400, 422) and caught.value.outcome == "invalid_request"
    with pytest.raises(InvalidRequest) as listing:
        client.list(P, limit=0)
    assert [e.field for e in listing.value.errors] == ["limit"]
    with pytest.raises(ValueError):
        client.inspect("Not-A-Purpose", raw_id)


def test_list_pages(client: Client) -> None:
    purpose = "py-list-" + uuid.uuid4().hex[:8]
    ids = [f"item-{i}" for i in range(5)]
    for raw in ids:
        client.acquire(purpose, raw, attempt=client.attempt(), ttl=30, holder=raw)
    first = client.list(purpose, limit=2)
    assert first.next_cursor is not None and len(first.leases) <= 4
    seen = {lease.digest for lease in client.list_all(purpose, page_size=2)}
    assert seen == {digest(raw) for raw in ids}


def test_unavailable_when_nothing_listens() -> None:
    with Client(f"http://127.0.0.1:{free_port()}") as c, pytest.raises(Unavailable) as caught:
        c.acquire(P, "x", attempt=Attempt.generate("op"), ttl=5)
    assert caught.value.cause == "connect"


def test_api_keys(tmp_path: object) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    keys = tmp_path / "keys"
    keys.write_text("key-for-everything-0001 *\nkey-for-one-purpose-01 py-keyed\n")
    service = start_service(LEASEHOLD_API_KEYS_FILE=str(keys))
    try:
        with Client(service.url) as anonymous, pytest.raises(Rejected) as caught:
            anonymous.inspect(P, "x")
        assert caught.value.status == 401 and caught.value.outcome == "unauthorized"
        with Client(service.url, api_key="key-for-one-purpose-01") as narrow:
            with pytest.raises(Rejected) as forbidden:
                narrow.inspect(P, "x")
            assert forbidden.value.status == 403
            assert not narrow.inspect("py-keyed", "x").held
        with Client(service.url, api_key="key-for-everything-0001") as wide:
            lease = acquired(wide.acquire(P, "x", attempt=wide.attempt(), ttl=5)).handle
            assert isinstance(lease.release(), Released)
    finally:
        service.stop()


def test_overloaded_past_the_watcher_cap() -> None:
    service = start_service(LEASEHOLD_MAX_WATCHERS="1")
    try:
        with Client(service.url) as c:
            stream = c.watch(P, "x")
            next(stream)  # one watcher holds the only place
            with pytest.raises(Overloaded) as caught:
                c.inspect(P, "x", changed_since="0.0", wait=5)
            assert caught.value.retry_after is not None
            stream.close()
    finally:
        service.stop()


async def test_async_verbs(aclient: AsyncClient, raw_id: str) -> None:
    attempt = await aclient.attempt()
    got = await aclient.acquire(P, raw_id, attempt=attempt, ttl=30, holder="a")
    assert isinstance(got, Acquired)
    lease = got.handle
    assert isinstance(await aclient.acquire(P, raw_id, attempt=attempt, ttl=30), Replayed)
    other = await aclient.attempt()
    assert isinstance(await aclient.acquire(P, raw_id, attempt=other, ttl=30), Contended)
    assert isinstance(await lease.renew(holder="b"), Renewed)
    seen = await aclient.inspect(P, raw_id)
    assert seen.holder == "b" and seen.fencing_token == lease.fencing_token
    changed = await aclient.inspect(P, raw_id, changed_since="0.0", wait=5)
    assert changed.version == seen.version
    listed = await aclient.list(P, limit=1000)
    assert digest(raw_id) in {item.digest for item in listed.leases}
    assert isinstance(await lease.release(), Released)
    assert isinstance(await aclient.release(P, raw_id, attempt=attempt), AlreadyAbsent)
    lost = await aclient.renew(P, raw_id, attempt=attempt, ttl=30)
    assert isinstance(lost, Lost) and lost.reason == "absent"


def test_indeterminate_from_the_service(redis_service_fresh: Service) -> None:
    """Redis frozen with a script in flight: the service cannot know, says 504."""
    from leasehold import Indeterminate

    service = redis_service_fresh
    assert service.redis is not None
    with Client(service.url) as c:
        attempt = c.attempt("frozen-op")
        c.inspect(P, "warm-up")  # a pooled connection to Redis exists
        service.redis.freeze()
        try:
            with pytest.raises((Indeterminate, Unavailable)) as caught:
                c.acquire(P, "frozen", attempt=attempt, ttl=5)
        finally:
            service.redis.thaw()
        error = caught.value
        assert isinstance(error, Indeterminate), error
        assert error.operation_id == "frozen-op" and error.cause == "service"
        # The same attempt, asked again, tells whether it applied.
        again = c.acquire(P, "frozen", attempt=attempt, ttl=5)
        assert isinstance(again, (Acquired, Replayed))
        again.handle.release()


def test_lock_delay_and_counting_and_shared(client: Client, raw_id: str) -> None:
    # Lock-delay: the lease expires unrenewed; others are held off with a reason.
    short = acquired(client.acquire(P, raw_id, attempt=client.attempt(), ttl=0.1, lock_delay=10))
    seen = client.watch(P, raw_id)
    while next(seen).state.held:
        pass  # until the stream reports the expiry
    seen.close()
    delayed = client.acquire(P, raw_id, attempt=client.attempt(), ttl=5)
    assert isinstance(delayed, Contended) and delayed.reason == "lock_delay"
    assert short.handle.fencing_token > 0
    # Counting: two permits of limit 2, a third is contended; inspect lists both.
    counted = raw_id + "-counted"
    a = acquired(client.acquire(P, counted, attempt=client.attempt(), ttl=30, limit=2))
    b = acquired(client.acquire(P, counted, attempt=client.attempt(), ttl=30, limit=2))
    assert b.lease.fencing_token > a.lease.fencing_token
    assert isinstance(
        client.acquire(P, counted, attempt=client.attempt(), ttl=30, limit=2), Contended
    )
    view = client.inspect(P, counted)
    assert view.holders == 2 and view.limit == 2
    assert [p.fencing_token for p in view.permits] == [a.lease.fencing_token, b.lease.fencing_token]
    # Shared: readers together, a writer is refused.
    shared = raw_id + "-shared"
    r1 = acquired(client.acquire(P, shared, attempt=client.attempt(), ttl=30, mode="shared"))
    r2 = acquired(client.acquire(P, shared, attempt=client.attempt(), ttl=30, mode="shared"))
    assert isinstance(client.acquire(P, shared, attempt=client.attempt(), ttl=30), Contended)
    assert client.inspect(P, shared).mode == "shared"
    for lease in (a.handle, b.handle, r1.handle, r2.handle):
        assert isinstance(lease.release(), Released)


def test_unavailable_from_the_service(redis_service_fresh: Service) -> None:
    """Redis gone: the service answers 503 `unavailable` (nothing applied) + a hint."""
    service = redis_service_fresh
    assert service.redis is not None
    service.redis.stop()
    with Client(service.url) as c, pytest.raises(Unavailable) as caught:
        c.acquire(P, "gone", attempt=c.attempt(), ttl=5)
    assert caught.value.cause == "service"
    assert caught.value.retry_after is not None and caught.value.retry_after > 0


def test_a_broken_lease_says_revoked(client: Client, service: Service, raw_id: str) -> None:
    import json
    import urllib.request

    got = acquired(client.acquire(P, raw_id, attempt=client.attempt(), ttl=30))
    lease = got.handle
    # An operator breaks it (the service runs without keys: no admin key needed).
    url = f"{service.url}/leases/{P}/{digest(raw_id)}/break"
    req = urllib.request.Request(url, data=b'{"reason":"test"}', method="POST")
    req.add_header("content-type", "application/json")
    with urllib.request.urlopen(req) as resp:
        assert json.load(resp) == {"outcome": "broken", "permitsBroken": 1}
    renewed = lease.renew()
    assert isinstance(renewed, Lost) and renewed.reason == "revoked", renewed
    assert lease.state is LeaseState.LOST
    assert lease.lost_reason == "revoked"
    with pytest.raises(LeaseLost) as lost:
        lease.check()
    assert lost.value.reason == "revoked"
    assert "revoked" in str(lost.value)
    released = client.release(P, raw_id, attempt=lease.attempt)
    assert released == AlreadyAbsent("revoked"), released


def test_a_bounded_hold_says_max_hold(client: Client, raw_id: str) -> None:
    # A bound below the TTL is the TTL granted; the lease and inspect's permit carry it.
    got = acquired(client.acquire(P, raw_id, attempt=client.attempt(), ttl=30, max_hold=0.5))
    assert (got.lease.ttl_ms, got.lease.max_hold_ms) == (500, 500)
    assert got.lease.hold_ends_at is not None
    lease = got.handle
    assert lease.at_hold_end and lease.valid_for() <= 0.5
    (permit,) = client.inspect(P, raw_id).permits
    assert (permit.max_hold_ms, permit.hold_ends_at) == (500, got.lease.hold_ends_at)
    # The renew that would reach past the hold's end is granted the time left.
    renewed = lease.renew()
    assert isinstance(renewed, Renewed), renewed
    assert renewed.lease.ttl_ms < 30_000 and renewed.lease.remaining_ms <= 500
    assert renewed.lease.hold_ends_at == got.lease.hold_ends_at
    # Once the hold has run out: lost / max_hold, and already_absent / max_hold.
    assert _renew_past_the_hold(client, raw_id, lease.attempt, renewed) == Lost("max_hold")
    assert client.release(P, raw_id, attempt=lease.attempt) == AlreadyAbsent("max_hold")
    unbounded = acquired(client.acquire(P, raw_id, attempt=client.attempt(), ttl=30))
    assert (unbounded.lease.max_hold_ms, unbounded.lease.hold_ends_at) == (None, None)
    unbounded.handle.release()


def test_lock_with_a_bounded_hold_ends_with_max_hold(client: Client, raw_id: str) -> None:
    """The watchdog renews while the hold has room, takes the short grant at its end and
    gives the lease up before it with ``max_hold``; the service then says the same."""
    with client.lock(P, raw_id, ttl=1.0, max_hold=2.5) as lease:
        assert lease.lost.wait(8)
        assert lease.at_hold_end and lease.lost_reason == "max_hold"
        with pytest.raises(LeaseLost) as lost:
            lease.check()
        assert lost.value.reason == "max_hold"
        assert _renew_past_the_hold(client, raw_id, lease.attempt) == Lost("max_hold")


def _renew_past_the_hold(
    client: Client, raw_id: str, attempt: Attempt, last: Optional[RenewOutcome] = None
) -> RenewOutcome:
    """Renews, each time once the time the last renew granted has passed, until the
    answer is not ``renewed`` (a bounded hold grants ever less, then ``lost``)."""
    for _ in range(20):
        if isinstance(last, Renewed):
            end = time.monotonic() + last.lease.remaining_ms / 1000 + 0.02
            while time.monotonic() < end:
                time.sleep(max(0.0, end - time.monotonic()))
        elif last is not None:
            return last
        last = client.renew(P, raw_id, attempt=attempt, ttl=30)
    raise AssertionError(f"still renewed after 20 renewals: {last}")
