// Fencing at the resource: the guard refuses a paused old holder's write.
// PostgreSQL from the usual PG* environment variables.
import { Client } from "@leasehold/client";
import { FENCE_TABLE_DDL, StaleFencingToken, fence } from "@leasehold/client/fencing";
import pg from "pg";

const client = new Client(process.env["LEASEHOLD_URL"] ?? "http://127.0.0.1:8080");
const db = new pg.Client();
await db.connect();
await db.query(FENCE_TABLE_DDL);
await db.query("CREATE TABLE IF NOT EXISTS invoices (id text PRIMARY KEY, body text NOT NULL)");

async function write(token: number, body: string): Promise<void> {
  await db.query("BEGIN");
  try {
    await fence(db, "invoice-export/inv-9", token); // first, in the same transaction
    await db.query("INSERT INTO invoices VALUES ('inv-9', $1) ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body", [body]);
    await db.query("COMMIT");
  } catch (e) {
    await db.query("ROLLBACK");
    throw e;
  }
}

const old = await client.lock("invoice-export", "inv-9", { ttlMs: 500 });
await write(old.fencingToken, "old holder");
console.log("old holder wrote with", old.fencingToken);
old.stopKeepAlive(); // the old holder pauses: no renewals, and it does not look at its signal

await using next = await client.lock("invoice-export", "inv-9", { ttlMs: 5000, waitMs: 5000 });
await write(next.fencingToken, "new holder");
console.log("new holder wrote with", next.fencingToken);

try {
  await write(old.fencingToken, "old holder, after its pause");
} catch (e) {
  if (!(e instanceof StaleFencingToken)) throw e;
  console.log("old holder refused:", e.message);
}
console.log((await db.query("SELECT * FROM invoices")).rows);
await db.end();
