"""A lease cycle: attempt, acquire, replay, contended, renew, inspect, release."""

import os

from leasehold import Acquired, Attempt, Client, Replayed

URL = os.environ.get("LEASEHOLD_URL", "http://127.0.0.1:8080")

with Client(URL) as client:
    attempt = client.attempt("export-2026-12-03")  # POST /attempts, before the first acquire
    print(attempt)
    outcome = client.acquire(
        "invoice-export", "order-42", attempt=attempt, ttl=30, holder="worker-7"
    )
    if not isinstance(outcome, Acquired):  # Contended, OwnerOperationConflict, ...
        raise SystemExit(f"not acquired: {outcome}")
    print(outcome.outcome, outcome.lease.fencing_token, outcome.lease.remaining_ms)
    lease = outcome.handle
    print(lease)

    # The same attempt again (say, after a lost reply): a replay, not a second lease.
    again = client.acquire("invoice-export", "order-42", attempt=attempt, ttl=30, holder="worker-7")
    assert isinstance(again, Replayed)
    print(again.outcome, again.lease.fencing_token, again.lease.remaining_ms)

    # Anyone else is told how long to wait.
    other = Attempt.generate("other-worker")  # made locally: no round trip
    print(client.acquire("invoice-export", "order-42", attempt=other, ttl=30))

    print(lease.renew())
    seen = client.inspect("invoice-export", "order-42", attempt=other)
    print(seen.held, seen.held_by, seen.holder, seen.fencing_token, seen.version)
    print(lease.release(), lease.state)
    print(client.release("invoice-export", "order-42", attempt=attempt))
    try:
        lease.renew()
    except Exception as e:
        print(type(e).__name__, e)
