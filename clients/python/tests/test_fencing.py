"""The fencing guard against a real PostgreSQL: a paused old holder whose lease was
taken over has its write rejected."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from harness import Postgres, start_postgres
from leasehold import Acquired, Client, LeaseState
from leasehold.fencing import (
    FENCE_TABLE_DDL,
    StaleFencingToken,
    acheck_fencing_token,
    check_fencing_token,
    fence_sql,
)

P = "py-fencing"


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    pg = start_postgres()
    try:
        with psycopg.connect(pg.conninfo, autocommit=True) as conn:
            conn.execute(FENCE_TABLE_DDL)
            conn.execute(
                "CREATE TABLE invoices (customer text PRIMARY KEY, total bigint NOT NULL,"
                " written_by bigint NOT NULL)"
            )
        yield pg
    finally:
        pg.stop()


def write_invoice(pg: Postgres, resource: str, token: int, total: int) -> None:
    """The protected work: one transaction, the guard first."""
    with psycopg.connect(pg.conninfo) as conn, conn.transaction():
        check_fencing_token(conn, resource, token)
        conn.execute(
            "INSERT INTO invoices (customer, total, written_by) VALUES (%s, %s, %s)"
            " ON CONFLICT (customer) DO UPDATE SET total = EXCLUDED.total,"
            " written_by = EXCLUDED.written_by",
            (resource, total, token),
        )


def test_a_paused_holder_is_fenced_off(client: Client, postgres: Postgres, raw_id: str) -> None:
    resource = f"{P}/{raw_id}"
    # A acquires, writes once, then pauses (a GC pause, a frozen VM): it stops renewing.
    a = client.acquire(P, raw_id, attempt=client.attempt("holder-a"), ttl=0.3)
    assert isinstance(a, Acquired)
    write_invoice(postgres, resource, a.lease.fencing_token, 100)
    # B waits server-side and takes the lease over when A's lease expires.
    b = client.acquire(P, raw_id, attempt=client.attempt("holder-b"), ttl=30, wait=5)
    assert isinstance(b, Acquired)
    assert b.lease.fencing_token > a.lease.fencing_token
    write_invoice(postgres, resource, b.lease.fencing_token, 200)
    # A wakes up and, not having looked at its lease, writes: refused.
    with pytest.raises(StaleFencingToken) as caught:
        write_invoice(postgres, resource, a.lease.fencing_token, 999)
    assert caught.value.current == b.lease.fencing_token
    assert caught.value.token == a.lease.fencing_token
    with psycopg.connect(postgres.conninfo) as conn:
        row = conn.execute(
            "SELECT total, written_by FROM invoices WHERE customer = %s", (resource,)
        ).fetchone()
    assert row == (200, b.lease.fencing_token)
    # Its own handle would have told it, had it looked.
    assert a.handle.state is LeaseState.LOST
    # B writes again with the same token: allowed.
    write_invoice(postgres, resource, b.lease.fencing_token, 300)
    b.handle.release()


def test_the_older_transaction_blocks_the_newer_until_it_ends(postgres: Postgres) -> None:
    """The guard's row lock serialises holders: a newer holder's guard waits for an
    older holder's open transaction, so their writes cannot interleave."""
    resource = "py-fencing/serialised"
    order: list[str] = []

    def newer() -> None:
        write_invoice(postgres, resource, 11, 11)
        order.append("newer wrote")

    with psycopg.connect(postgres.conninfo) as old:
        with old.transaction():
            check_fencing_token(old, resource, 10)
            thread = threading.Thread(target=newer)
            thread.start()
            # Until the newer holder's guard waits on the row lock (seen by the server).
            with psycopg.connect(postgres.conninfo, autocommit=True) as watcher:
                for _ in range(500):
                    waiting = watcher.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    ).fetchone()
                    if waiting is not None and waiting[0] >= 1:
                        break
                    time.sleep(0.01)
                else:
                    pytest.fail("the newer holder's guard never waited")
            assert thread.is_alive() and order == []
            order.append("older committed")
        thread.join(5)
    assert order == ["older committed", "newer wrote"]
    with psycopg.connect(postgres.conninfo) as conn, pytest.raises(StaleFencingToken):  # noqa: SIM117
        with conn.transaction():
            check_fencing_token(conn, resource, 10)


async def test_async_guard(postgres: Postgres) -> None:
    resource = "py-fencing/async"
    async with await psycopg.AsyncConnection.connect(postgres.conninfo) as conn:
        async with conn.transaction():
            await acheck_fencing_token(conn, resource, 5)
        with pytest.raises(StaleFencingToken):
            async with conn.transaction():
                await acheck_fencing_token(conn, resource, 4)
        async with conn.transaction():
            await acheck_fencing_token(conn, resource, 5)


def test_guard_arguments() -> None:
    with pytest.raises(ValueError):
        fence_sql("fence; DROP TABLE x")
    assert "WHERE fence.token <= EXCLUDED.token" in fence_sql("app.fence")
