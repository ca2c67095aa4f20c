// The fencing guard against a real PostgreSQL (a private cluster started
// here) and the real service: a paused old holder whose lease was taken
// over has its write rejected with StaleFencingToken.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import pg from "pg";

import { Client } from "../src/index.js";
import { FENCE_TABLE_DDL, StaleFencingToken, fence } from "../src/fencing.js";
import { startPostgres, startService, until, type Postgres, type Service } from "./helpers.js";

describe("fencing at the resource: PostgreSQL guard", () => {
  let postgres: Postgres;
  let service: Service;
  let dbA: pg.Client;
  let dbB: pg.Client;

  before(async () => {
    postgres = await startPostgres();
    service = await startService();
    const connect = async (): Promise<pg.Client> => {
      const c = new pg.Client({ host: postgres.host, port: postgres.port, user: postgres.user, database: "postgres" });
      await c.connect();
      return c;
    };
    dbA = await connect();
    dbB = await connect();
    await dbA.query(FENCE_TABLE_DDL);
    await dbA.query("CREATE TABLE invoices (id text PRIMARY KEY, body text NOT NULL, token bigint NOT NULL)");
  });
  after(async () => {
    await dbA?.end();
    await dbB?.end();
    await service?.stop();
    await postgres?.stop();
  });

  /** One protected write: the guard first, then the effect, in one transaction. */
  async function write(db: pg.Client, token: number, body: string): Promise<void> {
    await db.query("BEGIN");
    try {
      await fence(db, "invoice-export/inv-1", token);
      await db.query(
        "INSERT INTO invoices (id, body, token) VALUES ('inv-1', $1, $2) ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body, token = EXCLUDED.token",
        [body, token],
      );
      await db.query("COMMIT");
    } catch (e) {
      await db.query("ROLLBACK");
      throw e;
    }
  }

  it("a paused old holder's write is rejected after a newer holder wrote", async () => {
    const client = new Client(service.url);
    // A holds the lease, writes once, then pauses (a GC pause, a frozen VM):
    // it stops renewing and does not look at its signal.
    const a = await client.lock("invoice-export", "inv-1", { ttlMs: 500 });
    await write(dbA, a.fencingToken, "written by A");
    a.stopKeepAlive();
    // B waits for the lease, gets it when A's expires, and writes.
    await using b = await client.lock("invoice-export", "inv-1", { ttlMs: 5000, waitMs: 5000 });
    assert.ok(b.fencingToken > a.fencingToken, "the newer holder's token is larger");
    await write(dbB, b.fencingToken, "written by B");
    // A wakes up and writes as if it still held the lease: refused.
    await assert.rejects(write(dbA, a.fencingToken, "late write by A"), (e: unknown) => {
      assert.ok(e instanceof StaleFencingToken);
      assert.equal(e.token, BigInt(a.fencingToken));
      return true;
    });
    const { rows } = await dbA.query("SELECT body, token FROM invoices WHERE id = 'inv-1'");
    assert.deepEqual(rows, [{ body: "written by B", token: String(b.fencingToken) }]);
    assert.ok(a.signal.aborted, "A's own signal had fired too (it just did not look)");
    // The same holder may write again with its token.
    await write(dbB, b.fencingToken, "B again");
  });

  it("an older holder's open transaction delays a newer one's guard, never the other way round", async () => {
    await dbA.query("BEGIN");
    await fence(dbA, "report/7", 100);
    await dbB.query("BEGIN");
    let bDone = false;
    const bGuard = fence(dbB, "report/7", 200).then(() => (bDone = true));
    // B's upsert waits for A's row lock (seen in pg_stat_activity); A commits, then B records 200.
    await until(async () => {
      const { rows } = await dbA.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock'");
      return (rows[0] as { n: number }).n === 1;
    }, 5000, "B waiting on A's row lock");
    assert.equal(bDone, false, "the newer guard waits for the older transaction");
    await dbA.query("COMMIT");
    await bGuard;
    await dbB.query("COMMIT");
    await dbA.query("BEGIN");
    await assert.rejects(fence(dbA, "report/7", 150), StaleFencingToken);
    await dbA.query("ROLLBACK");
    const { rows } = await dbA.query("SELECT token FROM leasehold_fence WHERE resource = 'report/7'");
    assert.deepEqual(rows, [{ token: "200" }]);
  });
});
