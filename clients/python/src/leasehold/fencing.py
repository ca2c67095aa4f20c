"""Fencing at the resource: a fencing token protects only what checks it.

PostgreSQL (psycopg 3, ``pip install 'leasehold[postgres]'``): inside the caller's
transaction, ``check_fencing_token`` records the highest token seen per resource and
raises ``StaleFencingToken`` when a newer holder has already written. Create the table
once (``FENCE_TABLE_DDL``)::

    CREATE TABLE IF NOT EXISTS leasehold_fence (
        resource   text        PRIMARY KEY,
        token      bigint      NOT NULL CHECK (token > 0),
        updated_at timestamptz NOT NULL DEFAULT now()
    );

and guard every write of the protected work in the same transaction::

    with conn.transaction():
        check_fencing_token(conn, "invoice-export/customer-42", lease.fencing_token)
        conn.execute("UPDATE invoices SET ... WHERE customer = %s", (42,))

The guard is one statement::

    INSERT INTO leasehold_fence (resource, token) VALUES (%s, %s)
    ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
        WHERE leasehold_fence.token <= EXCLUDED.token
    RETURNING token

A row comes back when this token is the highest seen (or equal to it: the same holder
writing again); none when a newer holder has written, and then the transaction must not
go on. The row stays locked until the transaction ends, so an older holder's transaction
and a newer one's are serialised on it: once the newer one committed, the older one's
guard finds the newer token; while the older one is open, the newer one waits for it.

Other stores: ``FencedStore`` is the recipe, a compare-and-set on a token column kept
beside the data (``UPDATE … SET value = ?, fence = ? WHERE id = ? AND fence <= ?``, then
check one row changed), or the store's own conditional write (DynamoDB
``ConditionExpression``, etcd ``Txn`` on a key's value, S3 ``If-Match`` on an object
carrying the token).
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from ._types import LeaseholdError

__all__ = [
    "FENCE_TABLE_DDL",
    "FencedStore",
    "StaleFencingToken",
    "acheck_fencing_token",
    "check_fencing_token",
    "fence_sql",
]

FENCE_TABLE_DDL = """\
CREATE TABLE IF NOT EXISTS leasehold_fence (
    resource   text        PRIMARY KEY,
    token      bigint      NOT NULL CHECK (token > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
)"""

_TABLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}(\.[a-z_][a-z0-9_]{0,62})?$")


class StaleFencingToken(LeaseholdError):
    """A newer holder has written to ``resource``: ``token`` is older than ``current``.
    Roll the transaction back and stop the work; this holder's lease is gone."""

    def __init__(self, resource: str, token: int, current: int | None) -> None:
        super().__init__(
            f"stale fencing token {token} for {resource!r}: a newer holder wrote with {current}"
        )
        self.resource = resource
        self.token = token
        self.current = current


def fence_sql(table: str = "leasehold_fence") -> str:
    """The guard statement for ``table`` (parameters: resource, token)."""
    if not _TABLE_NAME.match(table):
        raise ValueError(f"table {table!r} must be a plain (optionally schema-qualified) name")
    return (
        f"INSERT INTO {table} (resource, token) VALUES (%s, %s) "
        f"ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now() "
        f"WHERE {table.split('.')[-1]}.token <= EXCLUDED.token "
        f"RETURNING token"
    )


def _check_args(resource: str, token: int) -> None:
    if not resource:
        raise ValueError("resource must not be empty")
    if isinstance(token, bool) or not isinstance(token, int) or token <= 0:
        raise ValueError("token must be a positive integer (a lease's fencing token)")


def check_fencing_token(
    conn: Any, resource: str, token: int, *, table: str = "leasehold_fence"
) -> None:
    """Records ``token`` as the highest seen for ``resource`` inside the caller's open
    transaction on ``conn`` (a psycopg 3 ``Connection`` or ``Cursor``), or raises
    ``StaleFencingToken`` when a newer token has been recorded. Commit or roll back as
    usual: the record and the protected writes land together or not at all."""
    _check_args(resource, token)
    cursor = conn.execute(fence_sql(table), (resource, token))
    if cursor.fetchone() is None:
        current = conn.execute(
            f"SELECT token FROM {table} WHERE resource = %s", (resource,)
        ).fetchone()
        raise StaleFencingToken(resource, token, None if current is None else int(current[0]))


async def acheck_fencing_token(
    conn: Any, resource: str, token: int, *, table: str = "leasehold_fence"
) -> None:
    """``check_fencing_token`` for a psycopg 3 ``AsyncConnection`` or ``AsyncCursor``."""
    _check_args(resource, token)
    cursor = await conn.execute(fence_sql(table), (resource, token))
    if await cursor.fetchone() is None:
        found = await conn.execute(f"SELECT token FROM {table} WHERE resource = %s", (resource,))
        current = await found.fetchone()
        raise StaleFencingToken(resource, token, None if current is None else int(current[0]))


class FencedStore(Protocol):
    """The recipe for any store that can compare-and-set: keep the highest fencing token
    beside the data and make every write conditional on it.

    ``write`` must, atomically, store ``value`` under ``key`` together with ``token`` if
    the stored token is absent or ``<= token``, and otherwise raise ``StaleFencingToken``
    without writing. In SQL::

        UPDATE documents SET body = :value, fence = :token
         WHERE id = :key AND fence <= :token      -- then check: exactly one row changed

    (insert the row first with ``fence = 0`` if it may be missing).
    """

    def write(self, key: str, value: Any, token: int) -> None: ...
