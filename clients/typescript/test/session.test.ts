// Sessions (docs/design.md §18, §19) against the real service on the
// embedded store: three leases kept alive by the keep-alive stream and by
// PATCH renewals, freed by the session's end; a session ended from outside
// aborts its signal once and each lease's once; closing a streamed session
// frees its leases long before the TTL; a lost create reply is retried with
// the same attempt. Waits are on events (renewals applied, signals, a
// server-side wait), never fixed sleeps.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { Client, LeaseLost, resourceOf, sessionIdOf, type Lease, type Session } from "../src/index.js";
import { startProxy, startService, type Service } from "./helpers.js";

const P = "ts-session";
let n = 0;
function fresh(): ReturnType<typeof resourceOf> {
  n += 1;
  return resourceOf(P, `shard-${process.pid}-${Date.now()}-${n}`);
}

async function attach(session: Session, count: number): Promise<{ leases: Lease[]; resources: ReturnType<typeof resourceOf>[] }> {
  const leases: Lease[] = [];
  const resources = Array.from({ length: count }, () => fresh());
  for (const r of resources) {
    const got = await session.acquire(r);
    assert.equal(got.outcome, "acquired", JSON.stringify(got));
    if (got.outcome !== "acquired") throw new Error("not acquired");
    leases.push(got.handle);
  }
  return { leases, resources };
}

/** Waits on the session's renewals until `at` (performance.now()) has passed. */
async function renewedPast(session: Session, at: number): Promise<number> {
  let seen = session.renewals;
  while (performance.now() <= at) {
    seen += 1;
    assert.ok(await session.untilRenewals(seen), `renewal ${seen} before the session ended (${session.endReason})`);
  }
  return seen;
}

async function freeForAnother(client: Client, r: ReturnType<typeof resourceOf>, waitMs = 0): Promise<boolean> {
  const attempt = await client.attempt();
  const got = await client.acquire(r, attempt, { ttlMs: 5000, waitMs });
  return got.outcome === "acquired";
}

describe("sessions on the embedded store", () => {
  let service: Service;
  let client: Client;

  before(async () => {
    service = await startService();
    client = new Client(service.url);
  });
  after(async () => {
    await service.stop();
  });

  for (const keepAlive of ["stream", "renew"] as const) {
    it(`keeps three leases alive (${keepAlive}) and frees them at the end`, async () => {
      const ttlMs = 2000;
      const start = performance.now();
      const session = await client.session({ ttlMs, keepAlive });
      const { leases, resources } = await attach(session, 3);
      assert.ok(leases.every((l) => l.fencingToken > 0));
      // Past the first TTL every lease is still valid: the renewals kept them.
      assert.ok((await renewedPast(session, start + ttlMs)) >= 2);
      for (const l of leases) {
        assert.ok(l.isValid, `${l.state}`);
        assert.equal(l.signal.aborted, false);
      }
      assert.equal(await freeForAnother(client, resources[0]!), false, "held by the session");
      const page = await client.readSession(session.id, { limit: 10 });
      assert.equal(page?.session.leases, 3);
      assert.deepEqual(page?.leases.map((l) => l.digest).sort(), resources.map((r) => r.digest).sort());
      // The end releases every lease: `released`, no loss.
      const lost: string[] = [];
      for (const l of leases) l.onLost((e) => lost.push(e.reason));
      assert.deepEqual(await session.end(), { outcome: "ended", released: 3 });
      assert.equal(session.state, "released");
      assert.equal(session.signal.aborted, false);
      for (const l of leases) {
        assert.equal(l.state, "released");
        assert.equal((l.signal.reason as LeaseLost).reason, "released");
      }
      assert.deepEqual(lost, []);
      for (const r of resources) assert.ok(await freeForAnother(client, r), "free after the end");
      assert.equal(await client.readSession(session.id), undefined);
    });
  }

  it("a session ended from outside aborts its signal once and each lease's once", async () => {
    const attempt = await client.attempt();
    const session = await client.session({ ttlMs: 30_000, attempt });
    try {
      const { leases, resources } = await attach(session, 3);
      const calls = new Map<number, number>();
      for (const l of leases) l.onLost(() => calls.set(l.fencingToken, (calls.get(l.fencingToken) ?? 0) + 1));
      const aborted = new Promise<void>((resolve) => session.signal.addEventListener("abort", () => resolve(), { once: true }));
      const deleted = await fetch(`${service.url}/sessions/${session.id}`, {
        method: "DELETE",
        headers: { "Lease-Owner-Token": attempt.ownerToken },
      });
      assert.equal(deleted.status, 200);
      await deleted.arrayBuffer();
      await aborted;
      assert.equal(session.endReason, "session_ended");
      for (const l of leases) {
        assert.ok(l.signal.aborted);
        const why = l.signal.reason as LeaseLost;
        assert.equal(why.state, "lost");
        assert.equal(why.serverReason, "session_ended");
      }
      assert.deepEqual([...calls.values()], [1, 1, 1]);
      for (const r of resources) assert.ok(await freeForAnother(client, r), "free after the DELETE");
    } finally {
      session.close();
    }
  });

  it("closing a streamed session frees its leases long before the TTL", async () => {
    const session = await client.session({ ttlMs: 30_000 });
    const { resources } = await attach(session, 2);
    assert.ok(await session.untilRenewals(1), "the stream's first renewal");
    const closed = performance.now();
    session.close();
    for (const r of resources) assert.ok(await freeForAnother(client, r, 20_000));
    const took = performance.now() - closed;
    assert.ok(took < 10_000, `freed after ${took} ms (TTL 30 s)`);
  });

  it("a lost create reply is retried with the same attempt", async () => {
    const proxy = await startProxy(service.port);
    try {
      const proxied = new Client(proxy.url);
      const attempt = await client.attempt();
      proxy.dropReply("POST", "/sessions", 1);
      const session = await proxied.session({ ttlMs: 30_000, attempt, keepAlive: "manual" });
      try {
        assert.equal(session.id, sessionIdOf(attempt.ownerToken));
        assert.equal(proxy.counts.get("POST /sessions"), 2);
        const page = await client.readSession(session.id);
        assert.equal(page?.session.id, session.id);
      } finally {
        await session.end();
      }
    } finally {
      await proxy.close();
    }
  });
});
