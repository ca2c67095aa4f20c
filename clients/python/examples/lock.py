"""``client.lock``: sync (a renewing thread, ``lease.lost``) and async (the body is
cancelled when the lease is lost or unknown)."""

import asyncio
import os
import time

from leasehold import AsyncClient, Client, LeaseLost

URL = os.environ.get("LEASEHOLD_URL", "http://127.0.0.1:8080")


def sync_worker() -> None:
    with Client(URL) as client:
        with client.lock("report-build", "batch-9", ttl=1.5, holder="py-sync") as lease:
            print("holding, fencing token", lease.fencing_token)
            for step in range(3):
                time.sleep(1)  # the work, twice the TTL in all: the watchdog renews
                lease.check()  # raises LeaseLost once the lease no longer protects us
                print(f"step {step}: valid for another {lease.valid_for():.2f} s")
        print("after the block:", lease.state)


async def async_worker() -> None:
    async with AsyncClient(URL) as client:
        try:
            async with client.lock("report-build", "batch-10", ttl=1.5) as lease:
                print("holding, fencing token", lease.fencing_token)
                # Someone releases it behind our back (an operator, a bug): the next
                # renew answers `lost` and this block is cancelled at once.
                await client.release("report-build", "batch-10", attempt=lease.attempt)
                await asyncio.sleep(60)
        except LeaseLost as e:
            print("work stopped:", e)


sync_worker()
asyncio.run(async_worker())
