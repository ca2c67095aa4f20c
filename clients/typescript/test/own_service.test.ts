// Contract tests that each start a service of their own (API keys, a waiter
// cap, a slow network): split from contract.test.ts, which shares one
// service per store.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { Client, LeaseLost, OverloadedError, RejectedError, resourceOf } from "../src/index.js";
import { apiKeysFile, deferred, metric, startService, until } from "./helpers.js";

describe("API keys and admission", () => {
  it("a key is sent as Authorization: Bearer; without it the service refuses (401 unauthorized)", async () => {
    const keys = apiKeysFile(["tenant-key-0123456789abcdef contract,other"]);
    const service = await startService({ env: { LEASEHOLD_API_KEYS_FILE: keys } });
    try {
      const anonymous = new Client(service.url);
      await assert.rejects(anonymous.attempt(), (e: unknown) => e instanceof RejectedError && e.outcome === "unauthorized" && e.status === 401);
      const keyed = new Client({ baseUrl: service.url, apiKey: "tenant-key-0123456789abcdef" });
      const r = resourceOf("contract", "keyed");
      const got = await keyed.acquire(r, await keyed.attempt(), { ttlMs: 5000 });
      assert.equal(got.outcome, "acquired");
      await assert.rejects(keyed.inspect(resourceOf("elsewhere", "x")), (e: unknown) => e instanceof RejectedError && e.outcome === "forbidden");
    } finally {
      await service.stop();
    }
  });

  it("overloaded: beyond the service's waiter cap, with a retry hint", async () => {
    const service = await startService({ env: { LEASEHOLD_MAX_WAITERS: "1" } });
    try {
      const client = new Client(service.url);
      const r = resourceOf("contract", "crowded");
      const held = await client.acquire(r, await client.attempt(), { ttlMs: 30_000 });
      assert.equal(held.outcome, "acquired");
      const first = client.acquire(r, await client.attempt(), { ttlMs: 30_000, waitMs: 5000 });
      await until(async () => metric(await service.metrics(), "leasehold_waiters") >= 1, 5000, "one waiter");
      await assert.rejects(client.acquire(r, await client.attempt(), { ttlMs: 30_000, waitMs: 5000 }), (e: unknown) => e instanceof OverloadedError && (e.retryAfterMs ?? 0) > 0);
      assert.ok(held.outcome === "acquired");
      await held.handle.release();
      assert.equal((await first).outcome, "acquired");
    } finally {
      await service.stop();
    }
  });
});

describe("lease handle races", () => {
  it("a release while a background renew is in flight ends RELEASED, not UNKNOWN", async () => {
    const service = await startService();
    try {
      // A network where renews take 50 ms: the release is sent while one is in flight.
      let renewInFlight = deferred<void>();
      const slowRenews: typeof fetch = async (input, init) => {
        if (init?.method === "PATCH") {
          renewInFlight.resolve();
          // Latency on the wire; an abort ends it at once, as with a real fetch.
          await new Promise<void>((resolve, reject) => {
            const timer = setTimeout(resolve, 50);
            init.signal?.addEventListener("abort", () => (clearTimeout(timer), reject(init.signal?.reason)), { once: true });
          });
        }
        return fetch(input, init);
      };
      const client = new Client({ baseUrl: service.url, fetch: slowRenews });
      for (let i = 0; i < 3; i++) {
        renewInFlight = deferred<void>();
        const lease = await client.lock("contract", `race-${i}`, { ttlMs: 600 });
        let lost = false;
        lease.onLost(() => (lost = true));
        await renewInFlight.promise;
        const answer = await lease.release();
        assert.equal(answer.outcome, "released");
        assert.equal(lease.state, "released", `round ${i}`);
        assert.equal(lost, false, "no onLost for our own release");
        assert.ok(lease.signal.reason instanceof LeaseLost && lease.signal.reason.reason === "released");
      }
    } finally {
      await service.stop();
    }
  });
});
