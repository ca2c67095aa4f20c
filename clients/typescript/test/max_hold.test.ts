// Bounded holds (`maxHoldMs`) on the client side, against a scripted
// service (a `fetch` passed in ClientOptions): the option is sent, the
// fields are parsed, a renew granted less than asked gives validity from
// what it answered, and the hold's end (said by the service, or reached
// locally) ends the keep-alive with `max_hold`. No service binary needed.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { Client, Election, HandleCore, LeaseLost, resourceOf, type Attempt, type Lease, type StopReason } from "../src/index.js";

const P = "ts-max-hold";
const RAW = "order-42";
const resource = resourceOf(P, RAW);
const attempt: Attempt = { ownerToken: "A".repeat(32), operationId: "op-1" };

type Answer = readonly [status: number, body: Record<string, unknown>];

/** The service's answers per method, in order (the last one repeats); every request is kept. */
class Script {
  readonly requests: { method: string; body: Record<string, unknown> }[] = [];
  readonly #answers: Map<string, Answer[]>;
  constructor(answers: Record<string, Answer[]>) {
    this.#answers = new Map(Object.entries(answers).map(([m, a]) => [m, [...a]]));
  }
  readonly fetch = async (_url: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const method = init?.method ?? "GET";
    const body: unknown = typeof init?.body === "string" ? JSON.parse(init.body) : {};
    this.requests.push({ method, body: body as Record<string, unknown> });
    const queue = this.#answers.get(method);
    if (method === "POST" && queue === undefined) {
      // POST /attempts (lock's first call): a fresh owner token for the operation id sent.
      const reply = { outcome: "attempt_created", ownerToken: "B".repeat(32), operationId: (body as { operationId?: unknown }).operationId };
      return new Response(JSON.stringify(reply), { status: 201, headers: { "content-type": "application/json" } });
    }
    if (queue === undefined || queue.length === 0) throw new Error(`no answer scripted for ${method}`);
    const [status, reply] = queue.length > 1 ? queue.shift()! : queue[0]!;
    return new Response(JSON.stringify(reply), { status, headers: { "content-type": "application/json" } });
  };
  sent(method: string): Record<string, unknown>[] {
    return this.requests.filter((r) => r.method === method).map((r) => r.body);
  }
  client(): Client {
    return new Client({ baseUrl: "http://leasehold.test", fetch: this.fetch });
  }
}

function leaseBody(ttlMs: number, remainingMs: number, maxHoldMs?: number): Record<string, unknown> {
  return {
    purpose: P,
    digest: resource.digest,
    fencingToken: 7,
    ttlMs,
    remainingMs,
    guarantee: "fenced",
    acquiredAt: "2026-12-04T16:00:00.000Z",
    renewedAt: "2026-12-04T16:00:00.000Z",
    ...(maxHoldMs === undefined ? {} : { maxHoldMs, holdEndsAt: "2026-12-04T16:00:40.000Z" }),
  };
}

const acquired = (ttlMs: number, remainingMs: number, maxHoldMs?: number): Answer => [
  201,
  { outcome: "acquired", lease: leaseBody(ttlMs, remainingMs, maxHoldMs) },
];
const renewed = (ttlMs: number, remainingMs: number, maxHoldMs: number): Answer => [
  200,
  { outcome: "renewed", lease: leaseBody(ttlMs, remainingMs, maxHoldMs) },
];
const LOST_MAX_HOLD: Answer = [404, { outcome: "lost", reason: "max_hold" }];
const ABSENT_MAX_HOLD: Answer = [200, { outcome: "already_absent", reason: "max_hold" }];

/** Resolves with the LeaseLost the handle's signal aborts with. */
function lostOf(lease: Lease): Promise<LeaseLost> {
  return new Promise((resolve, reject) => {
    const settle = (): void => {
      const why: unknown = lease.signal.reason;
      if (why instanceof LeaseLost) resolve(why);
      else reject(new Error(`aborted with ${String(why)}`));
    };
    if (lease.signal.aborted) settle();
    else lease.signal.addEventListener("abort", settle, { once: true });
  });
}

async function held(client: Client, options: { ttlMs: number; maxHoldMs?: number }): Promise<Lease> {
  const got = await client.acquire(resource, attempt, options);
  assert.ok(got.outcome === "acquired" || got.outcome === "replayed_same_operation", got.outcome);
  return got.handle;
}

describe("bounded holds (maxHoldMs)", () => {
  it("sends maxHoldMs on acquire and lock, and only when given", async () => {
    const script = new Script({
      PUT: [acquired(30_000, 30_000, 3_600_000)],
      DELETE: [[200, { outcome: "released" }]],
    });
    const client = script.client();
    await held(client, { ttlMs: 30_000, maxHoldMs: 3_600_000 });
    await held(client, { ttlMs: 30_000 });
    const lease = await client.lock(P, RAW, { ttlMs: 30_000, maxHoldMs: 3_600_000, operationId: "lock-1" });
    await lease[Symbol.asyncDispose]();
    assert.deepEqual(script.sent("PUT"), [
      { ttlMs: 30_000, maxHoldMs: 3_600_000 },
      { ttlMs: 30_000 },
      { ttlMs: 30_000, maxHoldMs: 3_600_000 },
    ]);
  });

  it("parses maxHoldMs and holdEndsAt on the lease and on inspect's permits", async () => {
    const permit = {
      fencingToken: 7,
      remainingMs: 900,
      ttlMs: 1000,
      acquiredAt: "2026-12-04T16:00:00.000Z",
      renewedAt: "2026-12-04T16:00:00.000Z",
    };
    const script = new Script({
      PUT: [acquired(30_000, 30_000, 40_000), acquired(30_000, 30_000)],
      GET: [
        [
          200,
          {
            outcome: "inspected",
            held: true,
            version: "3.1",
            holders: 2,
            permits: [{ ...permit, maxHoldMs: 40_000, holdEndsAt: "2026-12-04T16:00:40.000Z" }, permit],
          },
        ],
      ],
    });
    const client = script.client();
    const bounded = await client.acquire(resource, attempt, { ttlMs: 30_000, maxHoldMs: 40_000 });
    assert.ok(bounded.outcome === "acquired");
    assert.equal(bounded.lease.maxHoldMs, 40_000);
    assert.equal(bounded.lease.holdEndsAt, "2026-12-04T16:00:40.000Z");
    assert.ok(bounded.handle.holdUntil !== undefined && !bounded.handle.atHoldEnd);
    const plain = await client.acquire(resource, attempt, { ttlMs: 30_000 });
    assert.ok(plain.outcome === "acquired");
    assert.ok(!("maxHoldMs" in plain.lease) && !("holdEndsAt" in plain.lease));
    assert.equal(plain.handle.holdUntil, undefined);
    const seen = await client.inspect(resource);
    assert.deepEqual(
      seen.permits?.map((p) => [p.maxHoldMs, p.holdEndsAt]),
      [
        [40_000, "2026-12-04T16:00:40.000Z"],
        [undefined, undefined],
      ],
    );
  });

  it("a bound below the TTL is the TTL granted: validity from it, at the hold's end", async () => {
    const script = new Script({ PUT: [acquired(2_000, 2_000, 2_000)] });
    const lease = await held(script.client(), { ttlMs: 30_000, maxHoldMs: 2_000 });
    assert.ok(lease.atHoldEnd);
    assert.ok(lease.validForMs <= 2_000 && lease.validForMs > 1_500, String(lease.validForMs));
  });

  it("a capped renew gives validity from the remainingMs it answered, not the TTL asked", async () => {
    // A replay 25 s into a 30 s lease bounded to 40 s, then a renew asking
    // 30 s: the service grants the 15 s left of the hold.
    const script = new Script({
      PUT: [[200, { outcome: "replayed_same_operation", lease: leaseBody(30_000, 5_000, 40_000) }]],
      PATCH: [renewed(15_000, 15_000, 40_000)],
    });
    const lease = await held(script.client(), { ttlMs: 30_000, maxHoldMs: 40_000 });
    assert.ok(lease.validForMs <= 5_000 && lease.validForMs > 4_000);
    assert.equal(lease.holdUntil, undefined, "a replay cannot tell when the first acquire was sent");
    const before = performance.now();
    const answer = await lease.renew();
    const after = performance.now();
    assert.ok(answer.outcome === "renewed" && answer.lease.ttlMs === 15_000);
    assert.deepEqual(script.sent("PATCH"), [{ ttlMs: 30_000 }]);
    const drift = lease.driftBudgetMs;
    assert.ok(lease.validUntil >= before + 15_000 - drift && lease.validUntil <= after + 15_000 - drift, "from the 15 s answered");
    assert.ok(lease.atHoldEnd, "a grant shorter than asked is the hold's end");
    assert.equal(lease.holdUntil, lease.validUntil);
    assert.equal(lease.state, "active");
    lease.stopKeepAlive();
  });

  it("HandleCore: the hold caps validity; a capped renew is the hold's end", () => {
    const bounded = new HandleCore(100, 10_000, 10_000, 100, 5_000);
    assert.equal(bounded.validUntil, 5_000);
    assert.ok(bounded.atHoldEnd);
    assert.equal(bounded.finishRenew(200, 150, { kind: "renewed", remainingMs: 10_000 }), "active");
    assert.equal(bounded.validUntil, 5_000, "no renew goes past the hold's end");
    // 30 s asked; the renew sent at 25 000 granted the 14 800 ms left of the hold.
    const core = new HandleCore(0, 30_000, 30_000, 300);
    assert.equal(core.finishRenew(25_500, 25_000, { kind: "renewed", remainingMs: 14_800, capped: true }), "active");
    assert.equal(core.validUntil, 25_000 + 14_800 - 300);
    assert.ok(core.atHoldEnd && core.holdUntil === core.validUntil);
    core.finishRenew(31_000, 30_000, { kind: "renewed", remainingMs: 30_000 });
    assert.equal(core.validUntil, 39_500, "nothing extends it after");
  });

  it("renew lost/max_hold: the handle's LeaseLost says max_hold; release already_absent/max_hold", async () => {
    const script = new Script({ PUT: [acquired(30_000, 30_000, 40_000)], PATCH: [LOST_MAX_HOLD], DELETE: [ABSENT_MAX_HOLD] });
    const client = script.client();
    const lease = await held(client, { ttlMs: 30_000, maxHoldMs: 40_000 });
    assert.deepEqual(await lease.renew(), { outcome: "lost", reason: "max_hold" });
    assert.equal(lease.state, "lost");
    const lost = await lostOf(lease);
    assert.equal(lost.reason, "lost");
    assert.equal(lost.serverReason, "max_hold");
    assert.match(lost.message, /max_hold/);
    assert.deepEqual(await client.release(resource, attempt), { outcome: "already_absent", reason: "max_hold" });
  });

  it("keepAlive ends on a max_hold lost with that reason", async () => {
    const script = new Script({ PUT: [acquired(1_500, 1_500, 60_000)], PATCH: [LOST_MAX_HOLD], DELETE: [ABSENT_MAX_HOLD] });
    const reasons: (string | undefined)[] = [];
    const lease = await script.client().lock(P, RAW, {
      ttlMs: 1_500,
      maxHoldMs: 60_000,
      operationId: "op-1",
      onLost: (e) => reasons.push(e.serverReason),
    });
    const lost = await lostOf(lease);
    assert.equal(lost.reason, "lost");
    assert.equal(lost.serverReason, "max_hold");
    assert.equal(lease.expiredLocally, false);
    assert.deepEqual(reasons, ["max_hold"]);
    assert.equal(script.sent("PATCH").length, 1, "no renew after lost");
    await lease[Symbol.asyncDispose]();
  });

  it("keepAlive stops at the hold's end with max_hold, without a storm of renewals", async () => {
    // Granted less than asked at once: renewals cannot extend it, and a
    // third of the 3 s TTL is past the hold's end, so none is sent. The
    // margin is a tenth of the 600 ms granted, not of the 3 s asked.
    const script = new Script({ PUT: [acquired(600, 600, 600)], PATCH: [renewed(300, 300, 600)], DELETE: [ABSENT_MAX_HOLD] });
    const started = performance.now();
    const lease = await script.client().lock(P, RAW, {
      ttlMs: 3_000,
      maxHoldMs: 600,
      operationId: "op-1",
    });
    assert.ok(lease.atHoldEnd);
    assert.equal(lease.marginMs, 60);
    const lost = await lostOf(lease);
    const took = performance.now() - started;
    assert.ok(took > 200 && took < 1_500, String(took)); // at the 600 ms hold, well before the 3 s asked
    assert.equal(lost.reason, "expired");
    assert.equal(lost.serverReason, "max_hold");
    assert.deepEqual(script.sent("PATCH"), []);
    await lease[Symbol.asyncDispose]();
  });

  it("keepAlive: a capped renew, then the hold's end", async () => {
    const script = new Script({ PUT: [acquired(900, 900, 1_200)], PATCH: [renewed(600, 600, 1_200)], DELETE: [ABSENT_MAX_HOLD] });
    const lease = await script.client().lock(P, RAW, {
      ttlMs: 900,
      maxHoldMs: 1_200,
      operationId: "op-1",
      lease: { marginMs: 100 },
    });
    assert.ok(!lease.atHoldEnd);
    const lost = await lostOf(lease);
    assert.ok(lease.atHoldEnd);
    assert.equal(lost.serverReason, "max_hold");
    // After the short grant renewals come at a third of the TTL (they still
    // hear a break), not ever faster as the time left shrinks.
    const renews = script.sent("PATCH").length;
    assert.ok(renews >= 1 && renews <= 3, String(renews));
    await lease[Symbol.asyncDispose]();
  });
  it("Election: maxHoldMs is sent; a term ends expiring at the hold's end and the candidate campaigns again", async () => {
    const script = new Script({ PUT: [acquired(600, 600, 600)], DELETE: [ABSENT_MAX_HOLD] });
    const stops: StopReason[] = [];
    let terms = 0;
    let secondTerm!: () => void;
    const second = new Promise<void>((resolve) => (secondTerm = resolve));
    const election = new Election(script.client(), resource, {
      holder: "alpha",
      ttlMs: 3_000,
      maxHoldMs: 600,
      follow: false,
      onStartedLeading: () => {
        terms += 1;
        if (terms === 2) secondTerm();
      },
      onStoppedLeading: (stopped) => stops.push(stopped.reason),
    });
    const campaign = election.campaign();
    await second;
    await election.resign();
    await campaign;
    assert.equal(stops[0], "expiring");
    assert.deepEqual(script.sent("PUT")[0], { ttlMs: 3_000, waitMs: 10_000, holder: "alpha", maxHoldMs: 600 });
  });
});
