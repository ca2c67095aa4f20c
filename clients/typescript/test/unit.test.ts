// Pure parts: the handle's state machine, the digest, the SSE parser, the
// local checks, the fencing recipe in memory. No service needed.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { describe, it } from "node:test";

import { Client, HandleCore, InvalidRequestError, defaultDriftBudgetMs, digestOf, parseEventStream, type LeaseState, type ReleaseReply, type RenewReply } from "../src/index.js";
import { MemoryFencedStore, StaleFencingToken, fenceStatement, fencedWrite, FENCE_TABLE_DDL } from "../src/fencing.js";
import { leaseholdBin } from "./helpers.js";

describe("HandleCore (the closed state machine, DESIGN §3.6)", () => {
  const renews: RenewReply[] = [
    { kind: "renewed", remainingMs: 1000 },
    { kind: "lost" },
    { kind: "indeterminate" },
    { kind: "not_applied" },
  ];
  const releases: ReleaseReply[] = ["released", "already_absent", "not_owner", "indeterminate", "not_applied"];

  function inState(state: LeaseState): HandleCore {
    const core = new HandleCore(0, 1000, 1000, 10);
    if (state === "lost") core.finishRenew(1, 1, { kind: "lost" });
    if (state === "unknown") core.finishRenew(1, 1, { kind: "indeterminate" });
    if (state === "released") core.finishRelease(1, "released");
    assert.equal(core.observe(1), state);
    return core;
  }

  it("counts validity from the send: min(ttl, remaining) - drift", () => {
    const core = new HandleCore(100, 1000, 800, 10);
    assert.equal(core.validUntil, 100 + 790);
    assert.equal(new HandleCore(100, 1000, 5000, 10).validUntil, 1090);
    assert.equal(new HandleCore(100, 1000, 5, 10).validUntil, 100, "never before the send");
    assert.equal(core.validFor(500), 390);
  });

  it("ACTIVE: each renew reply", () => {
    const expected: LeaseState[] = ["active", "lost", "unknown", "active"];
    renews.forEach((reply, i) => {
      const core = new HandleCore(0, 1000, 1000, 10);
      assert.equal(core.beginRenew(10), null);
      assert.equal(core.finishRenew(20, 15, reply), expected[i], reply.kind);
    });
    const core = new HandleCore(0, 1000, 1000, 10);
    core.finishRenew(500, 400, { kind: "renewed", remainingMs: 1000 });
    assert.equal(core.validUntil, 400 + 990, "renewed: validity from the renew's send");
    const shorter = new HandleCore(0, 1000, 1000, 10);
    shorter.finishRenew(500, 400, { kind: "renewed", remainingMs: 100 });
    assert.equal(shorter.validUntil, 990, "a renew never shortens validity");
  });

  it("ACTIVE: each release reply", () => {
    const expected: LeaseState[] = ["released", "released", "lost", "unknown", "active"];
    releases.forEach((reply, i) => {
      const core = new HandleCore(0, 1000, 1000, 10);
      assert.equal(core.beginRelease(10), null);
      assert.equal(core.finishRelease(20, reply), expected[i], reply);
    });
  });

  for (const state of ["lost", "unknown", "released"] as const) {
    it(`${state.toUpperCase()} is terminal: renew refused, every reply keeps it`, () => {
      const core = inState(state);
      assert.equal(core.beginRenew(2), state);
      for (const r of renews) assert.equal(core.finishRenew(3, 2, r), state);
      assert.equal(core.beginRelease(4), state === "released" ? "released" : null, "release is clean-up except when RELEASED");
      for (const r of releases) assert.equal(core.finishRelease(5, r), state);
    });
  }

  it("local expiry moves ACTIVE to LOST before the input, so a late renewed does not revive it", () => {
    const core = new HandleCore(0, 100, 100, 10);
    assert.equal(core.finishRenew(95, 50, { kind: "renewed", remainingMs: 100 }), "lost");
    assert.ok(core.expiredLocally);
    assert.equal(core.validFor(95), 0);
  });

  it("expireNow gives an ACTIVE handle up early, as LOST expired locally", () => {
    const core = new HandleCore(0, 1000, 1000, 10);
    assert.equal(core.expireNow(500), "lost");
    assert.ok(core.expiredLocally);
    assert.equal(core.beginRenew(501), "lost");
  });
});

describe("digest and local checks", () => {
  it("digestOf matches the service's `leasehold digest`", () => {
    for (const raw of ["order-42", "", "ünïcødé ✓", "x".repeat(1000)]) {
      const r = spawnSync(leaseholdBin(), ["digest", raw], { encoding: "utf8" });
      assert.equal(r.status, 0, r.stderr);
      assert.equal(digestOf(raw), r.stdout.trim(), JSON.stringify(raw).slice(0, 20));
    }
    assert.equal(digestOf("order-42"), "v1.3bf8b157c4238eefe5ae4a66eca81c6b887d4dcedb58dd674271859f4dc2edfd");
  });

  it("drift budget is max(10 ms, 1 % of the TTL)", () => {
    assert.equal(defaultDriftBudgetMs(500), 10);
    assert.equal(defaultDriftBudgetMs(1000), 10);
    assert.equal(defaultDriftBudgetMs(30_000), 300);
  });

  it("a bad purpose or digest is refused before sending, naming the field", async () => {
    const client = new Client("http://127.0.0.1:9"); // nothing is sent
    const attempt = { ownerToken: "A".repeat(32), operationId: "x" };
    await assert.rejects(client.acquire({ purpose: "Bad/Purpose", digest: "nope" }, attempt, { ttlMs: 1000 }), (e: unknown) => {
      assert.ok(e instanceof InvalidRequestError);
      assert.deepEqual(e.errors.map((f) => f.field), ["purpose", "digest"]);
      assert.equal(e.status, 0);
      return true;
    });
    assert.throws(() => new Client("ftp://x"), TypeError);
  });
});

describe("text/event-stream parser", () => {
  function stream(chunks: string[]): ReadableStream<Uint8Array> {
    const enc = new TextEncoder();
    return new ReadableStream({
      start(c) {
        for (const ch of chunks) c.enqueue(enc.encode(ch));
        c.close();
      },
    });
  }

  it("splits on any line ending, joins data lines, skips comments, keeps the id", async () => {
    const events = [];
    for await (const e of parseEventStream(stream(["event: state\r\nid: 1.1\r", "\ndata: {\"a\":", "1}\r\n\r\n: keepalive\n\n", "event: x\ndata: a\ndata: b\n\nid: 2\ndata:c\r\rdata: cut-off"]))) {
      events.push(e);
    }
    assert.deepEqual(events.map((e) => [e.event, e.id, e.data]), [
      ["state", "1.1", '{"a":1}'],
      ["x", "1.1", "a\nb"],
      [undefined, "2", "c"],
    ]);
  });
});

describe("FencedStore recipe", () => {
  it("writes with a token not lower than the stored one, refuses an older one", async () => {
    const store = new MemoryFencedStore<string, string>();
    await fencedWrite(store, "invoice-7", 10, "a");
    await fencedWrite(store, "invoice-7", 10, "b");
    await fencedWrite(store, "invoice-7", 12, "c");
    await assert.rejects(fencedWrite(store, "invoice-7", 11, "stale"), StaleFencingToken);
    assert.deepEqual(store.get("invoice-7"), { token: 12n, value: "c" });
    assert.match(FENCE_TABLE_DDL, /CREATE TABLE IF NOT EXISTS leasehold_fence/);
    assert.match(fenceStatement(), /ON CONFLICT \(resource\) DO UPDATE SET token = EXCLUDED.token/);
    assert.throws(() => fenceStatement("x; DROP TABLE y"), TypeError);
  });
});
