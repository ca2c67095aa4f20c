"""``client.session``: one liveness for many leases (docs/design.md §18, §19), against the
real service: leases kept by the keep-alive stream and by PATCH renewals, freed by the
session's end; one signal for a session ended from outside and one per lease; the
stream's close freeing every lease; a lost create reply retried with the same attempt."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from harness import Proxy, Service
from leasehold import (
    Acquired,
    Client,
    Contended,
    LeaseBase,
    LeaseState,
    Session,
    SessionLease,
    session_id_of,
)

P = "py-session"


def raw_ids(n: int) -> list[str]:
    return ["shard-" + uuid.uuid4().hex for _ in range(n)]


def attach(session: Session, raws: list[str]) -> list[SessionLease]:
    leases = []
    for raw in raws:
        got = session.acquire(P, raw)
        assert isinstance(got, Acquired), got
        leases.append(got.handle)
    return leases


def renewed_past(session: Session, at: float) -> int:
    """Waits on the session's renewals until ``at`` has passed; how many there were."""
    seen = 0
    while time.monotonic() <= at:
        seen += 1
        assert session.wait_renewals(seen, 30), f"renewal {seen} in time"
    return seen


@pytest.mark.parametrize("keep_alive", ["stream", "renew"])
def test_three_leases_are_kept_alive_and_freed_by_the_end(client: Client, keep_alive: str) -> None:
    ttl = 2.0
    start = time.monotonic()
    raws = raw_ids(3)
    with client.session(ttl=ttl, keep_alive=keep_alive) as session:  # type: ignore[arg-type]
        leases = attach(session, raws)
        tokens = [lease.fencing_token for lease in leases]
        assert all(t > 0 for t in tokens), tokens
        # Past the first TTL every lease is still valid: the session's renewals kept them.
        assert renewed_past(session, start + ttl) >= 2
        for lease in leases:
            assert lease.is_valid(), lease
            assert not lease.lost.is_set()
        other = client.attempt()
        assert isinstance(client.acquire(P, raws[0], attempt=other, ttl=5), Contended)
        page = client.read_session(session.id, limit=10)
        assert page is not None
        assert page[0].leases == 3
        assert sorted(d for _, d in page[1]) == sorted(lease.digest for lease in leases)
        # The end releases every lease (RELEASED, no loss signal).
        assert session.end() == 3
        assert session.state is LeaseState.RELEASED
        for lease in leases:
            assert lease.state is LeaseState.RELEASED
            assert not lease.lost.is_set()
    assert not session.lost.is_set()
    for raw in raws:
        got = client.acquire(P, raw, attempt=client.attempt(), ttl=5)
        assert isinstance(got, Acquired), got
    assert client.read_session(session.id) is None


def test_a_session_ended_from_outside_signals_once_and_once_per_lease(
    client: Client, service: Service
) -> None:
    attempt = client.attempt()
    session = client.session(ttl=30, attempt=attempt)
    try:
        raws = raw_ids(3)
        leases = attach(session, raws)
        calls: dict[int, int] = {}

        def count(lease: LeaseBase) -> None:
            calls[lease.fencing_token] = calls.get(lease.fencing_token, 0) + 1

        for lease in leases:
            lease.add_lost_callback(count)
        deleted = httpx.delete(
            f"{service.url}/sessions/{session.id}",
            headers={"Lease-Owner-Token": attempt.owner_token},
        )
        assert deleted.status_code == 200, deleted.text
        # The keep-alive stream hears `lost`: the session's one signal, one per lease.
        assert session.lost.wait(30)
        assert session.end_reason == "session_ended"
        for lease in leases:
            assert lease.lost.wait(30)
            assert lease.state is LeaseState.LOST
            assert lease.lost_reason == "session_ended"
        assert calls == {lease.fencing_token: 1 for lease in leases}
        for raw in raws:
            got = client.acquire(P, raw, attempt=client.attempt(), ttl=5)
            assert isinstance(got, Acquired), got
    finally:
        session.close()


def test_one_lease_released_alone_leaves_the_others(client: Client) -> None:
    with client.session(ttl=30, keep_alive="manual") as session:
        raws = raw_ids(3)
        leases = attach(session, raws)
        assert leases[0].release().outcome == "released"
        assert leases[0].state is LeaseState.RELEASED
        got = client.acquire(P, raws[0], attempt=client.attempt(), ttl=5)
        assert isinstance(got, Acquired), got
        renewed = session.renew()
        assert renewed.outcome == "renewed"
        for lease in leases[1:]:
            assert lease.is_valid()
        assert session.end() == 2


def test_closing_a_streamed_session_frees_its_leases_long_before_the_ttl(
    client: Client,
) -> None:
    session = client.session(ttl=30)
    raws = raw_ids(2)
    attach(session, raws)
    assert session.wait_renewals(1, 30), "the stream's first renewal"
    waiter = client.attempt()
    closed = time.monotonic()
    session.close()
    for raw in raws:
        got = client.acquire(P, raw, attempt=waiter, ttl=5, wait=20)
        assert isinstance(got, Acquired), got
    took = time.monotonic() - closed
    assert took < 10, f"freed after {took:.1f} s (TTL 30 s)"


@pytest.fixture
def proxy(service: Service) -> Iterator[Proxy]:
    p = Proxy(int(service.url.rsplit(":", 1)[1]))
    yield p
    p.close()


def test_a_lost_create_reply_is_retried_with_the_same_attempt(client: Client, proxy: Proxy) -> None:
    attempt = client.attempt()
    proxy.drop_replies("POST", 1)
    with Client(proxy.url) as proxied:
        session = proxied.session(ttl=30, attempt=attempt, keep_alive="manual")
        try:
            assert session.id == session_id_of(attempt.owner_token)
            posts = [r for r in proxy.seen if r.method == "POST" and r.path == "/sessions"]
            assert len(posts) == 2, posts
            page = client.read_session(session.id)
            assert page is not None and page[0].id == session.id
        finally:
            session.close()
    assert client.read_session(session.id) is not None, "close does not end a PATCH session"


def test_a_keep_alive_stream_that_does_not_open_falls_back_to_patch(
    client: Client, proxy: Proxy
) -> None:
    # The first keep-alive request reaches the service, its answer is held back: the
    # session is renewed by PATCH meanwhile, past its first TTL.
    proxy.stall_replies("GET", 1)
    ttl = 2.0
    start = time.monotonic()
    with Client(proxy.url) as proxied, proxied.session(ttl=ttl) as session:
        leases = attach(session, raw_ids(2))
        assert renewed_past(session, start + ttl) >= 2
        for lease in leases:
            assert lease.is_valid(), lease
        patches = [r for r in proxy.seen if r.method == "PATCH"]
        assert patches, "renewed by PATCH while the stream did not open"
        assert session.end() == 2
