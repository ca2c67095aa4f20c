// Contract tests: every verb and outcome against the real service, on the
// embedded store and on a real redis-server.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import {
  Client,
  Election,
  IndeterminateError,
  InvalidRequestError,
  LeaseLost,
  NotAcquiredError,
  RefusedLocallyError,
  UnavailableError,
  resourceOf,
  type Attempt,
  type Leader,
  type RenewResult,
  type Leadership,
  type StoppedLeading,
  type WatchEvent,
} from "../src/index.js";
import { deferred, freePort, metric, startProxy, startRedis, startService, until, type Redis, type Service } from "./helpers.js";

let n = 0;
function fresh(purpose = "contract"): ReturnType<typeof resourceOf> {
  n += 1;
  return resourceOf(purpose, `resource-${process.pid}-${Date.now()}-${n}`);
}

for (const store of ["embedded", "redis"] as const) {
  describe(`contract on the ${store} store`, () => {
    let redis: Redis | undefined;
    let service: Service;
    let client: Client;

    before(async () => {
      if (store === "redis") redis = await startRedis();
      service = await startService(redis === undefined ? {} : { redisUrl: redis.url });
      client = new Client({ baseUrl: service.url });
    });
    after(async () => {
      await service?.stop();
      await redis?.stop();
    });

    it("attempt: the service draws the owner token", async () => {
      const a = await client.attempt("export-1");
      assert.equal(a.operationId, "export-1");
      assert.match(a.ownerToken, /^[A-Za-z0-9_-]{32}$/);
      await assert.rejects(client.attempt("bad op id!"), InvalidRequestError);
    });

    it("acquire: acquired, replayed_same_operation, contended, owner_operation_conflict", async () => {
      const r = fresh();
      const a = await client.attempt();
      const first = await client.acquire(r, a, { ttlMs: 30_000, holder: "worker-7" });
      assert.equal(first.outcome, "acquired");
      assert.ok(first.outcome === "acquired");
      assert.equal(first.lease.holder, "worker-7");
      assert.equal(first.lease.guarantee, "fenced");
      assert.ok(first.lease.fencingToken > 0);
      assert.equal(first.handle.state, "active");
      assert.ok(first.handle.validForMs > 29_000 && first.handle.validForMs <= 30_000 - 300);

      const replay = await client.acquire(r, a, { ttlMs: 30_000, holder: "worker-7" });
      assert.equal(replay.outcome, "replayed_same_operation");
      assert.ok(replay.outcome === "replayed_same_operation");
      assert.equal(replay.lease.fencingToken, first.lease.fencingToken);
      assert.ok(replay.lease.remainingMs <= 30_000);

      const other = await client.attempt();
      const contended = await client.acquire(r, other, { ttlMs: 30_000 });
      assert.equal(contended.outcome, "contended");
      assert.ok(contended.outcome === "contended" && contended.retryAfterMs > 25_000);

      const sameOwner = { ownerToken: a.ownerToken, operationId: "another-op" };
      const conflict = await client.acquire(r, sameOwner, { ttlMs: 30_000 });
      assert.equal(conflict.outcome, "owner_operation_conflict");
      assert.ok(conflict.outcome === "owner_operation_conflict" && conflict.retryAfterMs > 0);

      assert.deepEqual(await first.handle.release(), { outcome: "released" });
      assert.equal(first.handle.state, "released");
      assert.ok(first.handle.signal.aborted);
    });

    it("a broken lease: renew lost/revoked, the handle's LeaseLost says revoked, release already_absent/revoked", async () => {
      const r = fresh();
      const a = await client.attempt();
      const got = await client.acquire(r, a, { ttlMs: 30_000 });
      assert.ok(got.outcome === "acquired");
      // An operator breaks it (no API keys here: no admin key needed).
      const res = await fetch(`${service.url}/leases/${r.purpose}/${r.digest}/break`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ reason: "test" }),
      });
      assert.deepEqual(await res.json(), { outcome: "broken", permitsBroken: 1 });
      assert.deepEqual(await got.handle.renew(), { outcome: "lost", reason: "revoked" });
      assert.equal(got.handle.state, "lost");
      const lost: unknown = got.handle.signal.reason;
      assert.ok(lost instanceof LeaseLost);
      assert.equal(lost.reason, "lost");
      assert.equal(lost.serverReason, "revoked");
      assert.deepEqual(await client.release(r, a), { outcome: "already_absent", reason: "revoked" });
    });

    it("a bounded hold: granted the time left, then renew lost/max_hold and release already_absent/max_hold", async () => {
      const r = fresh();
      const a = await client.attempt();
      // A bound below the TTL is the TTL granted; the lease and inspect's permit carry it.
      const got = await client.acquire(r, a, { ttlMs: 30_000, maxHoldMs: 500 });
      assert.ok(got.outcome === "acquired");
      assert.equal(got.lease.ttlMs, 500);
      assert.equal(got.lease.maxHoldMs, 500);
      assert.ok(got.lease.holdEndsAt !== undefined);
      assert.ok(got.handle.atHoldEnd && got.handle.validForMs <= 500);
      const seen = await client.inspect(r);
      assert.deepEqual(seen.permits?.map((p) => [p.maxHoldMs, p.holdEndsAt]), [[500, got.lease.holdEndsAt]]);
      // The renew that would reach past the hold's end is granted the time left.
      const renewed = await got.handle.renew();
      assert.ok(renewed.outcome === "renewed", renewed.outcome);
      assert.ok(renewed.lease.ttlMs < 30_000 && renewed.lease.remainingMs <= 500);
      assert.equal(renewed.lease.holdEndsAt, got.lease.holdEndsAt);
      // Once the hold has run out: lost / max_hold, already_absent / max_hold.
      assert.deepEqual(await renewPastTheHold(r, a, renewed), { outcome: "lost", reason: "max_hold" });
      assert.deepEqual(await client.release(r, a), { outcome: "already_absent", reason: "max_hold" });
      const plain = await client.acquire(r, await client.attempt(), { ttlMs: 30_000 });
      assert.ok(plain.outcome === "acquired" && plain.lease.maxHoldMs === undefined && plain.lease.holdEndsAt === undefined);
      await plain.handle.release();
    });

    it("lock with maxHoldMs: renews while the hold has room, its signal aborts with max_hold before the end", async () => {
      const lost = deferred<LeaseLost>();
      const raw = `bounded-${process.pid}-${Date.now()}`;
      const lease = await client.lock("contract", raw, { ttlMs: 600, maxHoldMs: 1200, onLost: (e) => lost.resolve(e) });
      const why = await lost.promise;
      assert.equal(why.reason, "expired");
      assert.equal(why.serverReason, "max_hold");
      assert.ok(lease.atHoldEnd, "a renew was granted the time left");
      assert.deepEqual(await renewPastTheHold(lease.resource, lease.attempt), { outcome: "lost", reason: "max_hold" });
      await lease[Symbol.asyncDispose]();
    });

    /** Renews, each time once what the last renew granted has passed, until it is no longer `renewed`. */
    async function renewPastTheHold(r: ReturnType<typeof resourceOf>, a: Attempt, last?: RenewResult): Promise<RenewResult> {
      for (let i = 0; i < 20; i++) {
        if (last?.outcome === "renewed") {
          const grantedMs = last.lease.remainingMs;
          await new Promise((resolve) => setTimeout(resolve, grantedMs + 20));
        } else if (last !== undefined) return last;
        last = await client.renew(r, a, { ttlMs: 30_000 });
      }
      throw new Error(`still renewed after 20 renewals: ${JSON.stringify(last)}`);
    }

    it("acquire with waitMs: a release wakes the waiter at once", async () => {
      const r = fresh();
      const holder = await client.acquire(r, await client.attempt(), { ttlMs: 30_000 });
      assert.ok(holder.outcome === "acquired");
      const waiter = client.acquire(r, await client.attempt(), { ttlMs: 30_000, waitMs: 10_000 });
      await until(async () => metric(await service.metrics(), "leasehold_waiters") >= 1, 5000, "a waiter");
      await holder.handle.release();
      const got = await waiter;
      assert.equal(got.outcome, "acquired");
      assert.ok(got.outcome === "acquired" && got.waitedMs !== undefined && got.waitedMs < 5000);
      assert.ok(got.lease.fencingToken > holder.lease.fencingToken, "fencing tokens grow");
      await got.handle.release();
    });

    it("acquire: limit_mismatch on a counting lease; shared mode", async () => {
      const r = fresh();
      const one = await client.acquire(r, await client.attempt(), { ttlMs: 30_000, limit: 2 });
      const two = await client.acquire(r, await client.attempt(), { ttlMs: 30_000, limit: 2 });
      assert.equal(one.outcome, "acquired");
      assert.equal(two.outcome, "acquired");
      const mismatch = await client.acquire(r, await client.attempt(), { ttlMs: 30_000, limit: 3 });
      assert.deepEqual(mismatch, { outcome: "limit_mismatch", limit: 2 });
      const seen = await client.inspect(r);
      assert.equal(seen.holders, 2);
      assert.equal(seen.permits?.length, 2);
      const s = fresh();
      const r1 = await client.acquire(s, await client.attempt(), { ttlMs: 30_000, mode: "shared" });
      const r2 = await client.acquire(s, await client.attempt(), { ttlMs: 30_000, mode: "shared" });
      assert.equal(r1.outcome, "acquired");
      assert.equal(r2.outcome, "acquired");
      assert.equal((await client.inspect(s)).mode, "shared");
    });

    it("acquire: contended with reason lock_delay after an expiry; the expired owner may come back", async () => {
      const r = fresh();
      const a = await client.attempt();
      const got = await client.acquire(r, a, { ttlMs: 100, lockDelayMs: 10_000 });
      assert.equal(got.outcome, "acquired");
      await until(async () => !(await client.inspect(r)).held, 5000, "the lease expired");
      const seen = await client.inspect(r);
      assert.ok((seen.lockDelayRemainingMs ?? 0) > 5000, "inspect shows the delay");
      const other = await client.acquire(r, await client.attempt(), { ttlMs: 1000 });
      assert.equal(other.outcome, "contended");
      assert.ok(other.outcome === "contended" && other.reason === "lock_delay" && other.retryAfterMs > 5000);
      const back = await client.acquire(r, { ownerToken: a.ownerToken, operationId: "come-back" }, { ttlMs: 1000 });
      assert.equal(back.outcome, "acquired");
    });

    it("renew: renewed (same token, validity from the renew's send), lost absent, lost not_owner", async () => {
      const r = fresh();
      const a = await client.attempt();
      const got = await client.acquire(r, a, { ttlMs: 2000 });
      assert.ok(got.outcome === "acquired");
      const before = got.handle.validUntil;
      const renewed = await got.handle.renew();
      assert.equal(renewed.outcome, "renewed");
      assert.ok(renewed.outcome === "renewed" && renewed.lease.fencingToken === got.lease.fencingToken);
      assert.ok(got.handle.validUntil >= before);

      const proclaimed = await client.renew(r, a, { ttlMs: 2000, holder: "renamed" });
      assert.ok(proclaimed.outcome === "renewed" && proclaimed.lease.holder === "renamed");

      const stranger = await client.attempt();
      assert.deepEqual(await client.renew(r, stranger, { ttlMs: 2000 }), { outcome: "lost", reason: "not_owner" });
      await client.release(r, a);
      assert.deepEqual(await client.renew(r, a, { ttlMs: 2000 }), { outcome: "lost", reason: "absent" });
      // The handle learns it: lost, signal aborted, renew refused locally afterwards.
      const lost = deferred<LeaseLost>();
      got.handle.onLost((e) => lost.resolve(e));
      assert.deepEqual(await got.handle.renew(), { outcome: "lost", reason: "absent" });
      assert.equal(got.handle.state, "lost");
      assert.equal((await lost.promise).reason, "lost");
      assert.throws(() => got.handle.check(), LeaseLost);
      await assert.rejects(got.handle.renew(), RefusedLocallyError);
    });

    it("release: released, already_absent, not_owner", async () => {
      const r = fresh();
      const a = await client.attempt();
      await client.acquire(r, a, { ttlMs: 30_000 });
      const b = await client.attempt();
      assert.deepEqual(await client.release(r, b), { outcome: "not_owner" });
      assert.deepEqual(await client.release(r, a), { outcome: "released" });
      assert.deepEqual(await client.release(r, a), { outcome: "already_absent" });
    });

    it("inspect: heldBy relative to the attempt, never the token; long-poll answers on a change", async () => {
      const r = fresh();
      const free = await client.inspect(r);
      assert.equal(free.held, false);
      assert.equal(free.holders, 0);
      const a = await client.attempt();
      const poll = client.inspect(r, { changedSince: free.version, waitMs: 10_000 });
      const got = await client.acquire(r, a, { ttlMs: 30_000, holder: "pod-a" });
      const changed = await poll;
      assert.equal(changed.held, true);
      assert.equal(changed.holder, "pod-a");
      assert.notEqual(changed.version, free.version);
      assert.equal((await client.inspect(r, { attempt: a })).heldBy, "caller");
      assert.equal((await client.inspect(r, { attempt: { ownerToken: a.ownerToken, operationId: "other" } })).heldBy, "caller_other_operation");
      assert.equal((await client.inspect(r, { attempt: await client.attempt() })).heldBy, "other");
      assert.ok(!JSON.stringify(changed).includes(a.ownerToken));
      const t0 = performance.now();
      const unchanged = await client.inspect(r, { changedSince: changed.version, waitMs: 300 });
      assert.equal(unchanged.version, changed.version);
      assert.ok(performance.now() - t0 >= 250);
      assert.ok(got.outcome === "acquired");
      await got.handle.release();
    });

    it("list and listAll: each held lease once, pages by cursor", async () => {
      const purpose = `list-${store}-${process.pid}`;
      const held = new Set<string>();
      for (let i = 0; i < 5; i++) {
        const r = resourceOf(purpose, `item-${i}`);
        held.add(r.digest);
        await client.acquire(r, await client.attempt(), { ttlMs: 30_000, holder: `h-${i}` });
      }
      const page = await client.list(purpose, { limit: 2 });
      assert.equal(page.outcome, "listed");
      assert.ok(page.leases.length <= 2 + 64);
      const all = new Set<string>();
      for await (const l of client.listAll(purpose, { limit: 2 })) all.add(l.digest);
      assert.deepEqual([...all].sort(), [...held].sort());
      await assert.rejects(client.list(purpose, { limit: 0 }), (e: unknown) => e instanceof InvalidRequestError && e.errors[0]?.field === "limit");
    });

    it("invalid input: an error naming each field", async () => {
      const r = fresh();
      await assert.rejects(client.acquire(r, await client.attempt(), { ttlMs: 5, waitMs: 999_999 }), (e: unknown) => {
        assert.ok(e instanceof InvalidRequestError);
        assert.ok(e.status === 400 || e.status === 422);
        const fields = e.errors.map((f) => f.field);
        assert.ok(fields.includes("ttlMs"), fields.join());
        return true;
      });
      await assert.rejects(client.acquire(r, { ownerToken: "short", operationId: "x" }, { ttlMs: 1000 }), (e: unknown) => {
        assert.ok(e instanceof InvalidRequestError);
        assert.ok(e.errors.some((f) => f.field === "Lease-Owner-Token"), JSON.stringify(e.errors));
        return true;
      });
    });

    it("watch: state, then acquired / holder_changed / released; resumes with Last-Event-ID after a cut", async () => {
      const proxy = await startProxy(service.port);
      try {
        const viaProxy = new Client({ baseUrl: proxy.url });
        const r = fresh();
        const stop = new AbortController();
        const events: WatchEvent[] = [];
        const arrived = new Map<string, ReturnType<typeof deferred<void>>>();
        const waitFor = (kind: string, count = 1): Promise<void> => {
          const key = `${kind}#${count}`;
          if (events.filter((e) => e.event === kind).length >= count) return Promise.resolve();
          const d = arrived.get(key) ?? deferred<void>();
          arrived.set(key, d);
          return d.promise;
        };
        const reading = (async () => {
          for await (const e of viaProxy.watch(r, { signal: stop.signal, reconnectDelayMs: 10 })) {
            events.push(e);
            for (const [key, d] of arrived) {
              const [kind, count] = key.split("#");
              if (events.filter((x) => x.event === kind).length >= Number(count)) d.resolve();
            }
          }
        })();
        await waitFor("state");
        const a = await client.attempt();
        const got = await client.acquire(r, a, { ttlMs: 30_000, holder: "w1" });
        await waitFor("acquired");
        const watchesBefore = proxy.counts.get("GET /leases") ?? 0;
        const seenBeforeCut = events.length;
        proxy.cut(); // the stream is cut; the watcher reconnects with Last-Event-ID
        await client.renew(r, a, { ttlMs: 30_000, holder: "w2" });
        // The change reaches the watcher whether it happened before the
        // service read the resumed request (a `state` event: something
        // changed meanwhile) or after (`holder_changed`).
        await until(() => events.slice(seenBeforeCut).some((e) => e.state.holder === "w2"), 10_000, "the change after the cut");
        assert.ok((proxy.counts.get("GET /leases") ?? 0) > watchesBefore, "reconnected");
        const afterCut = events.slice(seenBeforeCut);
        assert.equal(afterCut.length, 1, `exactly one event for one change: ${afterCut.map((e) => e.event).join()}`);
        assert.ok(["holder_changed", "state"].includes(afterCut[0]!.event));
        assert.ok(got.outcome === "acquired");
        await got.handle.release();
        await waitFor("released");
        stop.abort();
        await reading;
        const kinds = events.map((e) => e.event);
        assert.deepEqual(kinds.slice(0, 2), ["state", "acquired"]);
        assert.equal(kinds.at(-1), "released");
        // Resuming from the current version: no state event, then the next change.
        await until(async () => metric(await service.metrics(), "leasehold_watchers") === 0, 10_000, "the first watch closed");
        const last = events.at(-1)!;
        const later: WatchEvent[] = [];
        const stop2 = new AbortController();
        const reading2 = (async () => {
          for await (const e of client.watch(r, { signal: stop2.signal, lastEventId: last.id })) {
            later.push(e);
            stop2.abort();
          }
        })();
        await until(async () => metric(await service.metrics(), "leasehold_watchers") === 1, 10_000, "the resumed watch");
        const again = await client.acquire(r, await client.attempt(), { ttlMs: 30_000 });
        await reading2;
        assert.deepEqual(later.map((e) => e.event), ["acquired"]);
        assert.ok(again.outcome === "acquired");
        await again.handle.release();
      } finally {
        await proxy.close();
      }
    });

    it("lock: await using renews in the background and releases at the end of the scope", async () => {
      const purpose = "lock-scope";
      const raw = `job-${store}-${process.pid}`;
      const r = resourceOf(purpose, raw);
      let token = 0;
      {
        await using lease = await client.lock(purpose, raw, { ttlMs: 600, holder: "scoped" });
        token = lease.fencingToken;
        assert.equal(lease.driftBudgetMs, 10);
        const renewed = deferred<void>();
        let renewals = 0;
        // Outlive two TTLs: only background renewals keep it.
        const end = performance.now() + 1300;
        while (performance.now() < end) {
          lease.check();
          const seen = await client.inspect(r);
          if (seen.renewedAt !== seen.acquiredAt) renewals++;
          if (renewals > 0) renewed.resolve();
          await new Promise((res) => setTimeout(res, 100));
        }
        await renewed.promise;
        assert.equal(lease.state, "active");
        assert.equal((await client.inspect(r)).fencingToken, token);
      }
      assert.equal((await client.inspect(r)).held, false, "released by await using");
      // withLock releases even when the work throws.
      await assert.rejects(
        client.withLock(purpose, raw, { ttlMs: 5000 }, async (lease) => {
          assert.ok(lease.fencingToken > token);
          throw new Error("work failed");
        }),
        /work failed/,
      );
      assert.equal((await client.inspect(r)).held, false);
    });

    it("lock: contended after the wait is NotAcquiredError; a lost lease aborts its signal and calls onLost", async () => {
      const purpose = "lock-lost";
      const raw = `job-${store}-${process.pid}`;
      const r = resourceOf(purpose, raw);
      const lost = deferred<LeaseLost>();
      const lease = await client.lock(purpose, raw, { ttlMs: 3000, onLost: (e) => lost.resolve(e) });
      await assert.rejects(client.lock(purpose, raw, { ttlMs: 3000, waitMs: 100 }), (e: unknown) => e instanceof NotAcquiredError && e.outcome === "contended");
      // Someone releases it behind the holder's back (its own attempt, sent directly).
      await client.release(r, lease.attempt);
      const aborted = new Promise<unknown>((res) => lease.signal.addEventListener("abort", () => res(lease.signal.reason)));
      const reason = await aborted;
      assert.ok(reason instanceof LeaseLost && reason.reason === "lost");
      assert.equal((await lost.promise).state, "lost");
      assert.equal(lease.state, "lost");
      await lease[Symbol.asyncDispose]();
    });

    it("election: campaign, new leader, proclaim, resign hands over; observe iterates", async () => {
      const r = fresh("leader-demo");
      const started = { a: deferred<Leadership>(), b: deferred<Leadership>() };
      const stopped = deferred<StoppedLeading>();
      const seenByB: Leader[] = [];
      const a = new Election(client, r, {
        holder: "alpha",
        ttlMs: 3000,
        waitMs: 2000,
        onStartedLeading: (t) => started.a.resolve(t),
        onStoppedLeading: (s) => stopped.resolve(s),
      });
      const b = new Election(client, r, {
        holder: "bravo",
        ttlMs: 3000,
        waitMs: 2000,
        onStartedLeading: (t) => started.b.resolve(t),
        onNewLeader: (l) => seenByB.push(l),
      });
      const campaignA = a.campaign();
      const termA = await started.a.promise;
      assert.ok(a.isLeader);
      assert.deepEqual(await b.leader(), { holder: "alpha", fencingToken: termA.fencingToken });
      const campaignB = b.campaign();
      const observer = new AbortController();
      const observed: Leader[] = [];
      const observing = (async () => {
        for await (const l of a.observe(observer.signal)) {
          observed.push(l);
          if (l.holder === "bravo") observer.abort();
        }
      })();
      await until(() => seenByB.some((l) => l.holder === "alpha"), 5000, "bravo sees alpha");
      await a.proclaim("alpha@host-2");
      await until(() => seenByB.some((l) => l.holder === "alpha@host-2"), 5000, "bravo sees the proclaimed label");
      assert.equal(termA.fencingToken, seenByB.at(-1)?.fencingToken, "proclaim keeps the fencing token");
      await a.resign();
      await campaignA;
      assert.ok(termA.signal.aborted);
      assert.deepEqual(await stopped.promise, { fencingToken: termA.fencingToken, reason: "resigned" });
      const termB = await started.b.promise;
      assert.ok(termB.fencingToken > termA.fencingToken);
      await observing;
      assert.ok(observed.some((l) => l.holder === "bravo"));
      // A candidate that resigns while its acquire waits server-side stops at once and takes nothing.
      const waitersBefore = metric(await service.metrics(), "leasehold_waiters");
      const c = new Election(client, r, { holder: "charlie", ttlMs: 3000, waitMs: 10_000, follow: false });
      const campaignC = c.campaign();
      await until(async () => metric(await service.metrics(), "leasehold_waiters") > waitersBefore, 5000, "charlie waits");
      const t0 = performance.now();
      await c.resign();
      await campaignC;
      assert.ok(performance.now() - t0 < 1000, "resign while waiting returns promptly");
      assert.equal((await client.inspect(r)).holder, "bravo");
      await b.resign();
      await campaignB;
      assert.equal((await client.inspect(r)).held, false);
    });

    it("unavailable: nothing listening is definitely not applied", async () => {
      const dead = new Client({ baseUrl: `http://127.0.0.1:${await freePort()}` });
      await assert.rejects(dead.attempt(), (e: unknown) => e instanceof UnavailableError && e.reason === "connect" && !e.mayHaveApplied);
    });

    if (store === "redis") {
      it("lock retries an indeterminate acquire (Redis frozen) with the same attempt, never a new one", async () => {
        const proxy = await startProxy(service.port);
        try {
          const viaProxy = new Client({ baseUrl: proxy.url });
          redis!.freeze();
          let thawed = false;
          try {
            const locking = viaProxy.lock("contract", `frozen-lock-${Date.now()}`, { ttlMs: 5000, retryBudgetMs: 10_000 });
            // Two acquires answered 504 (or in flight) with the store frozen, then it thaws.
            await until(() => (proxy.counts.get("PUT /leases") ?? 0) >= 2, 10_000, "a retried acquire");
            redis!.thaw();
            thawed = true;
            await using lease = await locking;
            assert.equal(lease.state, "active");
            assert.equal(proxy.counts.get("POST /attempts"), 1, "one attempt for every try");
            assert.ok((proxy.counts.get("PUT /leases") ?? 0) >= 2);
          } finally {
            if (!thawed) redis!.thaw();
          }
        } finally {
          await proxy.close();
        }
      });

      it("redis frozen: acquire and renew are indeterminate (504, operationId); stopped: unavailable (503)", async () => {
        const r = fresh();
        const a = await client.attempt("frozen-op");
        const got = await client.acquire(r, a, { ttlMs: 10_000 });
        assert.ok(got.outcome === "acquired");
        redis!.freeze();
        try {
          await assert.rejects(got.handle.renew(), (e: unknown) => e instanceof IndeterminateError && e.operationId === "frozen-op" && e.reason === "service" && e.status === 504);
          assert.equal(got.handle.state, "unknown");
          assert.ok(got.handle.signal.aborted);
        } finally {
          redis!.thaw();
        }
        // Once Redis answers again, the same attempt finds out: it still holds it.
        const replay = await client.acquire(r, a, { ttlMs: 10_000 });
        assert.equal(replay.outcome, "replayed_same_operation");
        // Redis gone: connection refused is a definite `unavailable` from the service.
        await redis!.stop();
        await assert.rejects(client.acquire(fresh(), await client.attempt(), { ttlMs: 10_000 }), (e: unknown) => e instanceof UnavailableError && e.reason === "service" && !e.mayHaveApplied);
      });
    }
  });
}
