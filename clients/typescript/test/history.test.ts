// A checked history, TypeScript workers only: workers contend for two
// resources through two service instances sharing one Redis, while acquire
// replies are dropped and Redis is frozen past the TTL. Each worker records
// when it believed it held a lease (from the acquire's answer until its
// signal aborted or it began releasing). The checker: no two beliefs on one
// resource overlap, and fencing tokens grow in the order beliefs began.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { Client, NotAcquiredError, type Lease } from "../src/index.js";
import { startProxy, startRedis, startService, type Proxy, type Redis, type Service } from "./helpers.js";

interface Belief {
  readonly worker: number;
  readonly resource: string;
  readonly token: number;
  readonly start: number;
  readonly end: number;
  readonly how: string;
  readonly ended: string;
}

describe("checked history (TypeScript workers, two instances, faults)", () => {
  let redis: Redis;
  let a: Service;
  let b: Service;
  let proxy: Proxy;

  before(async () => {
    redis = await startRedis();
    a = await startService({ redisUrl: redis.url });
    b = await startService({ redisUrl: redis.url });
    proxy = await startProxy(a.port);
  });
  after(async () => {
    await proxy?.close();
    await a?.stop();
    await b?.stop();
    await redis?.stop();
  });

  it("no two beliefs overlap and fencing tokens grow, through lost replies and a frozen store", async (t) => {
    const clients = [new Client({ baseUrl: proxy.url, timeoutMs: 2000 }), new Client({ baseUrl: b.url, timeoutMs: 2000 })];
    const resources = [`history-${Date.now()}-0`, `history-${Date.now()}-1`];
    const beliefs: Belief[] = [];
    const outcomes = new Map<string, number>();
    const count = (k: string): void => void outcomes.set(k, (outcomes.get(k) ?? 0) + 1);
    const runFor = 6000;
    const t0 = performance.now();

    async function worker(id: number): Promise<void> {
      let round = 0;
      while (performance.now() - t0 < runFor) {
        round++;
        const client = clients[(id + round) % 2]!;
        const resource = resources[(id + Math.floor(round / 3)) % 2]!;
        let lease: Lease;
        try {
          lease = await client.lock("history", resource, { ttlMs: 400, waitMs: 300, retryBudgetMs: 1000 });
        } catch (e) {
          count(e instanceof NotAcquiredError ? `not acquired: ${e.outcome}` : `lock failed: ${(e as Error).name}`);
          continue;
        }
        const start = performance.now();
        count(`held via ${lease.acquiredBy}`);
        let end = Number.POSITIVE_INFINITY;
        let ended = "released";
        const onAbort = (): void => {
          if (end === Number.POSITIVE_INFINITY) {
            end = performance.now();
            const reason = lease.signal.reason as { reason?: string };
            ended = reason.reason ?? "aborted";
          }
        };
        lease.signal.addEventListener("abort", onAbort, { once: true });
        if (lease.signal.aborted) onAbort();
        // Work for a while (sometimes longer than the TTL: the watchdog must renew), stopping on the signal.
        const work = 50 + ((id * 97 + round * 31) % 600);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, work);
          lease.signal.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
        });
        if (end === Number.POSITIVE_INFINITY) end = performance.now(); // stops believing before the release is sent
        beliefs.push({ worker: id, resource, token: lease.fencingToken, start, end, how: lease.acquiredBy, ended });
        count(`ended: ${ended}`);
        await lease[Symbol.asyncDispose]();
      }
    }

    // Faults: three acquire replies lost on instance A; Redis frozen past the TTL, twice.
    proxy.dropReply("PUT", "/leases", 3);
    const faults = (async () => {
      for (const at of [1500, 3500]) {
        const wait = t0 + at - performance.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        redis.freeze();
        await new Promise((r) => setTimeout(r, 700));
        redis.thaw();
      }
    })();
    await Promise.all([...Array.from({ length: 6 }, (_, i) => worker(i)), faults]);

    const summary = [...outcomes.entries()].sort().map(([k, v]) => `${k}=${v}`).join(", ");
    t.diagnostic(`history: ${beliefs.length} beliefs; ${summary}`);
    assert.ok(beliefs.length >= 10, `enough beliefs to mean something (${beliefs.length})`);
    for (const resource of resources) {
      const mine = beliefs.filter((x) => x.resource === resource).sort((x, y) => x.start - y.start);
      for (let i = 1; i < mine.length; i++) {
        const prev = mine[i - 1]!;
        const next = mine[i]!;
        assert.ok(prev.end <= next.start, `overlap on ${resource}: worker ${prev.worker} believed until ${prev.end.toFixed(1)}, worker ${next.worker} from ${next.start.toFixed(1)}`);
        assert.ok(next.token > prev.token, `fencing tokens grow on ${resource}: ${prev.token} then ${next.token}`);
      }
    }
  });
});
