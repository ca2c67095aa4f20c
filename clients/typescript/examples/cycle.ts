// A lease cycle: attempt, acquire, replay, contended, renew, inspect, release.
import { Client, resourceOf } from "@leasehold/client";

const client = new Client(process.env["LEASEHOLD_URL"] ?? "http://127.0.0.1:8080");
const invoice = resourceOf("invoice-export", "order-42"); // the raw id is hashed here, never sent
console.log("digest", invoice.digest);

// The attempt comes first: a retry after a lost reply must be the same attempt.
const attempt = await client.attempt("export-2026-12-04");
const first = await client.acquire(invoice, attempt, { ttlMs: 30_000, holder: "worker-7" });
if (first.outcome !== "acquired") throw new Error(first.outcome);
console.log(first.outcome, "fencing token", first.lease.fencingToken, "valid for", Math.round(first.handle.validForMs), "ms");

const again = await client.acquire(invoice, attempt, { ttlMs: 30_000, holder: "worker-7" });
console.log(again.outcome, again.outcome === "replayed_same_operation" ? `remainingMs ${again.lease.remainingMs}` : "");

const other = await client.acquire(invoice, await client.attempt(), { ttlMs: 30_000 });
console.log(other.outcome, other.outcome === "contended" ? `retryAfterMs ${other.retryAfterMs}` : "");

const renewed = await first.handle.renew();
console.log(renewed.outcome, renewed.outcome === "renewed" ? `same token ${renewed.lease.fencingToken}` : renewed.reason);

const seen = await client.inspect(invoice);
console.log("inspect held", seen.held, "holder", seen.holder, "version", seen.version);

console.log((await first.handle.release()).outcome, "->", first.handle.state);
console.log((await client.release(invoice, attempt)).outcome);
