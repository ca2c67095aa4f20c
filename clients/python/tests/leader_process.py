"""A candidate in a process of its own (for the kill scenario): campaigns, prints
``leading <fencing token>`` once it leads, and runs until killed."""

from __future__ import annotations

import asyncio
import sys

from leasehold import AsyncClient, Election, Term


async def main(url: str, purpose: str, raw_id: str, ttl: float, holder: str) -> None:
    async with AsyncClient(url) as client:

        def started(term: Term) -> None:
            print(f"leading {term.fencing_token}", flush=True)

        election = Election(
            client, purpose, raw_id, holder=holder, ttl=ttl, on_started_leading=started
        )
        await election.campaign()


if __name__ == "__main__":
    url, purpose, raw_id, ttl, holder = sys.argv[1:6]
    asyncio.run(main(url, purpose, raw_id, float(ttl), holder))
