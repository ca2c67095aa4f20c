"""The PostgreSQL fencing guard: a paused holder whose lease was taken over is refused.

LEASEHOLD_PG is a psycopg conninfo, e.g. "host=/tmp port=5432 user=postgres".
"""

import os

import psycopg

from leasehold import Acquired, Client
from leasehold.fencing import FENCE_TABLE_DDL, StaleFencingToken, check_fencing_token

URL = os.environ.get("LEASEHOLD_URL", "http://127.0.0.1:8080")
PG = os.environ["LEASEHOLD_PG"]


def write_invoice(token: int, total: int) -> None:
    with psycopg.connect(PG) as conn, conn.transaction():
        check_fencing_token(conn, "invoice-export/customer-42", token)
        conn.execute(
            "INSERT INTO invoices (customer, total, written_by) VALUES (42, %s, %s)"
            " ON CONFLICT (customer) DO UPDATE SET total = EXCLUDED.total,"
            " written_by = EXCLUDED.written_by",
            (total, token),
        )


with psycopg.connect(PG, autocommit=True) as conn:
    conn.execute(FENCE_TABLE_DDL)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS invoices"
        " (customer int PRIMARY KEY, total int NOT NULL, written_by bigint NOT NULL)"
    )

with Client(URL) as client:
    a = client.acquire("invoice-export", "customer-42", attempt=client.attempt(), ttl=0.5)
    assert isinstance(a, Acquired)
    print("A holds, fencing token", a.lease.fencing_token)
    write_invoice(a.lease.fencing_token, 100)
    print("A wrote 100, then pauses (a GC pause, a frozen VM) and stops renewing")

    b = client.acquire("invoice-export", "customer-42", attempt=client.attempt(), ttl=30, wait=5)
    assert isinstance(b, Acquired)
    print("B waited", b.waited_ms, "ms and holds, fencing token", b.lease.fencing_token)
    write_invoice(b.lease.fencing_token, 200)
    print("B wrote 200")

    try:
        write_invoice(a.lease.fencing_token, 999)
    except StaleFencingToken as e:
        print("A wakes up and writes 999:", e)
    with psycopg.connect(PG) as conn:
        print(
            "invoices:", conn.execute("SELECT customer, total, written_by FROM invoices").fetchall()
        )
    b.handle.release()
