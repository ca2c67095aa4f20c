// The shared conformance table (clients/conformance/scenarios.json, DESIGN
// §15), executed against the real service: each `fault.kind` is mapped to
// this harness, each `expect` asserted.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, it, type TestContext } from "node:test";

import { Client, Election, LeaseLost, resourceOf, type Lease, type Leadership } from "../src/index.js";
import { deferred, metric, repoRoot, startProxy, startRedis, startService, track, until, waitForOutput, type Redis, type Service } from "./helpers.js";

interface Scenario {
  readonly id: string;
  readonly description: string;
  readonly store: "any" | "redis" | "embedded";
  readonly lease: { readonly ttlMs: number };
  readonly fault: { readonly kind: string; readonly verb?: string; readonly times?: number; readonly afterMs?: number; readonly forMs?: number };
  readonly expect: {
    readonly holds?: boolean;
    readonly attemptsCreated?: number;
    readonly acquireRequests?: number;
    readonly finalOutcome?: string;
    readonly stateIn?: readonly string[];
    readonly signalledBeforeValidityEnds?: boolean;
    readonly signalled?: boolean;
    readonly nextLeaderWithinMs?: number;
  };
}

const table = JSON.parse(readFileSync(path.join(repoRoot, "clients/conformance/scenarios.json"), "utf8")) as { scenarios: Scenario[] };
const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures");

interface Stack {
  readonly service: Service;
  readonly redis: Redis | undefined;
  stop(): Promise<void>;
}

async function stack(store: "embedded" | "redis"): Promise<Stack> {
  const redis = store === "redis" ? await startRedis() : undefined;
  const service = await startService(redis === undefined ? {} : { redisUrl: redis.url });
  return {
    service,
    redis,
    stop: async () => {
      await service.stop();
      await redis?.stop();
    },
  };
}

/** Records when a lease's signal aborted, and the validity end it had then. */
function watchSignal(lease: Lease): Promise<{ at: number; validUntil: number; reason: unknown }> {
  return new Promise((resolve) => {
    const on = (): void => resolve({ at: performance.now(), validUntil: lease.validUntil, reason: lease.signal.reason });
    if (lease.signal.aborted) on();
    else lease.signal.addEventListener("abort", on, { once: true });
  });
}

type Runner = (t: TestContext, s: Scenario, st: Stack) => Promise<void>;

const runners: Record<string, Runner> = {
  async drop_reply(t, s, st) {
    const proxy = await startProxy(st.service.port);
    try {
      const verb = s.fault.verb ?? "acquire";
      assert.equal(verb, "acquire", "only acquire replies are dropped by this runner");
      proxy.dropReply("PUT", "/leases", s.fault.times ?? 1);
      const client = new Client({ baseUrl: proxy.url });
      const raw = `${s.id}-${Date.now()}`;
      await using lease = await client.lock("conformance", raw, { ttlMs: s.lease.ttlMs });
      const seen = await new Client(st.service.url).inspect(resourceOf("conformance", raw), { attempt: lease.attempt });
      const holds = lease.state === "active" && seen.heldBy === "caller";
      const attemptsCreated = proxy.counts.get("POST /attempts") ?? 0;
      const acquireRequests = proxy.counts.get("PUT /leases") ?? 0;
      t.diagnostic(`holds=${holds} attemptsCreated=${attemptsCreated} acquireRequests=${acquireRequests} finalOutcome=${lease.acquiredBy}`);
      if (s.expect.holds !== undefined) assert.equal(holds, s.expect.holds, "holds");
      if (s.expect.attemptsCreated !== undefined) assert.equal(attemptsCreated, s.expect.attemptsCreated, "attemptsCreated");
      if (s.expect.acquireRequests !== undefined) assert.equal(acquireRequests, s.expect.acquireRequests, "acquireRequests");
      if (s.expect.finalOutcome !== undefined) assert.equal(lease.acquiredBy, s.expect.finalOutcome, "finalOutcome");
    } finally {
      await proxy.close();
    }
  },

  async freeze_store(t, s, st) {
    assert.ok(st.redis, "freeze_store needs Redis");
    const client = new Client(st.service.url);
    const lease = await client.lock("conformance", `${s.id}-${Date.now()}`, { ttlMs: s.lease.ttlMs });
    const signalled = watchSignal(lease);
    await new Promise((r) => setTimeout(r, s.fault.afterMs ?? 0)); // the fault's own schedule
    const frozenAt = performance.now();
    st.redis.freeze();
    try {
      const seen = await signalled;
      t.diagnostic(
        `signalled ${(seen.at - frozenAt).toFixed(0)} ms after the freeze, ${(seen.validUntil - seen.at).toFixed(0)} ms before local validity ended; reason ${seen.reason instanceof LeaseLost ? seen.reason.reason : String(seen.reason)}`,
      );
      if (s.expect.signalledBeforeValidityEnds) assert.ok(seen.at < seen.validUntil, "signalled before local validity ends");
      // Still frozen past local validity: the handle stays terminal.
      const left = frozenAt + (s.fault.forMs ?? 0) - performance.now();
      if (left > 0) await new Promise((r) => setTimeout(r, left));
      assert.ok(performance.now() > seen.validUntil, "the freeze lasted past local validity");
    } finally {
      st.redis.thaw();
    }
    t.diagnostic(`state ${lease.state}`);
    if (s.expect.stateIn) assert.ok(s.expect.stateIn.includes(lease.state), `state ${lease.state} in ${s.expect.stateIn.join(",")}`);
    await lease[Symbol.asyncDispose]();
  },

  async delete_lease_key(t, s, st) {
    assert.ok(st.redis, "delete_lease_key needs Redis");
    const client = new Client(st.service.url);
    const raw = `${s.id}-${Date.now()}`;
    const r = resourceOf("conformance", raw);
    const lease = await client.lock("conformance", raw, { ttlMs: s.lease.ttlMs });
    const signalled = watchSignal(lease);
    // The key layout of docs/decisions/storage-v2.md: <ns>:lease:v2:{<purpose>:<digest>}.
    const key = `leasehold:lease:v2:{${r.purpose}:${r.digest}}`;
    assert.equal(st.redis.cli("DEL", key), "1", `the lease key ${key} existed`);
    const seen = await signalled;
    t.diagnostic(`state ${lease.state}, reason ${seen.reason instanceof LeaseLost ? seen.reason.reason : String(seen.reason)}`);
    if (s.expect.stateIn) assert.ok(s.expect.stateIn.includes(lease.state), `state ${lease.state}`);
    if (s.expect.signalled) assert.ok(lease.signal.aborted);
    assert.ok(seen.reason instanceof LeaseLost && seen.reason.reason === "lost", "the service said lost (not a local expiry)");
  },

  async kill_leader_process(t, s, st) {
    const raw = `${s.id}-${Date.now()}`;
    const r = resourceOf("conformance", raw);
    const child = track(spawn(process.execPath, [path.join(fixtures, "leader.js"), st.service.url, "conformance", raw, String(s.lease.ttlMs), "doomed"], {
      stdio: ["ignore", "pipe", "pipe"],
    }));
    try {
      await waitForOutput(child, /leading \d+/, 15_000, "leader process");
      const client = new Client(st.service.url);
      const started = deferred<{ at: number; term: Leadership }>();
      const waitersBefore = metric(await st.service.metrics(), "leasehold_waiters");
      const b = new Election(client, r, {
        holder: "successor",
        ttlMs: s.lease.ttlMs,
        waitMs: 10_000,
        follow: false,
        onStartedLeading: (term) => started.resolve({ at: performance.now(), term }),
      });
      const campaign = b.campaign();
      // Already campaigning: its acquire waits server-side.
      await until(async () => metric(await st.service.metrics(), "leasehold_waiters") > waitersBefore, 10_000, "the successor waits");
      const killedAt = performance.now();
      child.kill("SIGKILL");
      const { at, term } = await started.promise;
      const after = at - killedAt;
      t.diagnostic(`next leader ${after.toFixed(0)} ms after the SIGKILL (ttl ${s.lease.ttlMs} ms), fencing token ${term.fencingToken}`);
      if (s.expect.nextLeaderWithinMs !== undefined) assert.ok(after <= s.expect.nextLeaderWithinMs, `${after.toFixed(0)} ms <= ${s.expect.nextLeaderWithinMs} ms`);
      await b.resign();
      await campaign;
    } finally {
      child.kill("SIGKILL");
    }
  },

  async resign(t, s, st) {
    const client = new Client(st.service.url);
    const r = resourceOf("conformance", `${s.id}-${Date.now()}`);
    const aLeads = deferred<Leadership>();
    const bLeads = deferred<{ at: number; term: Leadership }>();
    const a = new Election(client, r, { holder: "first", ttlMs: s.lease.ttlMs, waitMs: 10_000, follow: false, onStartedLeading: (term) => aLeads.resolve(term) });
    const campaignA = a.campaign();
    const termA = await aLeads.promise;
    const waitersBefore = metric(await st.service.metrics(), "leasehold_waiters");
    const b = new Election(client, r, {
      holder: "second",
      ttlMs: s.lease.ttlMs,
      waitMs: 10_000,
      follow: false,
      onStartedLeading: (term) => bLeads.resolve({ at: performance.now(), term }),
    });
    const campaignB = b.campaign();
    await until(async () => metric(await st.service.metrics(), "leasehold_waiters") > waitersBefore, 10_000, "the second candidate waits");
    await a.resign();
    const resignedAt = performance.now();
    await campaignA;
    assert.ok(termA.signal.aborted, "the first term's signal fired");
    const { at, term } = await bLeads.promise;
    const after = at - resignedAt;
    t.diagnostic(`next leader ${after.toFixed(1)} ms after resign() returned (negative: before it returned), fencing token ${term.fencingToken} > ${termA.fencingToken}`);
    assert.ok(term.fencingToken > termA.fencingToken);
    if (s.expect.nextLeaderWithinMs !== undefined) assert.ok(after <= s.expect.nextLeaderWithinMs, `${after.toFixed(1)} ms <= ${s.expect.nextLeaderWithinMs} ms`);
    await b.resign();
    await campaignB;
  },
};

for (const store of ["embedded", "redis"] as const) {
  describe(`conformance table on the ${store} store`, () => {
    for (const s of table.scenarios) {
      if (s.store !== "any" && s.store !== store) continue;
      it(`${s.id}: ${s.fault.kind}`, async (t) => {
        const runner = runners[s.fault.kind];
        assert.ok(runner, `no runner for fault kind ${s.fault.kind}`);
        const st = await stack(store);
        try {
          await runner(t, s, st);
        } finally {
          await st.stop();
        }
      });
    }
  });
}

describe("conformance table coverage", () => {
  it("every scenario of the table has a runner", () => {
    assert.ok(table.scenarios.length >= 5);
    for (const s of table.scenarios) assert.ok(runners[s.fault.kind], s.id);
  });
});
