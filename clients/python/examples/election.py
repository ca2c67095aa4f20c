"""Two candidates and an observer; the leader resigns, the other leads."""

import asyncio
import os

from leasehold import AsyncClient, Election, Term
from leasehold.election import observe

URL = os.environ.get("LEASEHOLD_URL", "http://127.0.0.1:8080")


async def main() -> None:
    async with AsyncClient(URL) as client:
        leading = {name: asyncio.Event() for name in ("alpha", "bravo")}

        def candidate(name: str) -> Election:
            async def lead(term: Term) -> None:  # the leader's work, cancelled when the term ends
                print(f"{name}: started leading, fencing token {term.fencing_token}")
                leading[name].set()
                await asyncio.Event().wait()  # works until cancelled

            return Election(
                client,
                "leader-demo",
                "cron",
                holder=name,
                ttl=5,
                on_started_leading=lead,
                on_stopped_leading=lambda term, why: print(f"{name}: stopped leading: {why.value}"),
                on_new_leader=lambda leader: print(f"{name}: leader is {leader.holder}"),
            )

        async def watch_leaders() -> None:
            async for leader in observe(client, "leader-demo", "cron"):
                print(f"observer: {leader}")

        observer = asyncio.ensure_future(watch_leaders())
        alpha, bravo = candidate("alpha"), candidate("bravo")
        campaigns = [asyncio.ensure_future(alpha.campaign())]
        await leading["alpha"].wait()
        campaigns.append(asyncio.ensure_future(bravo.campaign()))
        await asyncio.sleep(0.5)
        await alpha.proclaim("alpha@host-2")
        await asyncio.sleep(0.5)
        print("alpha resigns")
        await alpha.resign()
        await leading["bravo"].wait()
        print("leader now:", await bravo.leader())
        await bravo.resign()
        await asyncio.gather(*campaigns)
        await asyncio.sleep(0.2)
        observer.cancel()


asyncio.run(main())
