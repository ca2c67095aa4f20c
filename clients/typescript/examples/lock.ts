// lock: acquire (retrying a lost reply with the same attempt), renew in the
// background, stop the work through the AbortSignal, release at scope end.
import { Client, LeaseLost } from "@leasehold/client";

const client = new Client(process.env["LEASEHOLD_URL"] ?? "http://127.0.0.1:8080");
const t0 = performance.now();
const at = (): string => `${String(Math.round(performance.now() - t0)).padStart(5)} ms`;

{
  await using lease = await client.lock("invoice-export", "order-43", {
    ttlMs: 1000,
    holder: "worker-7",
    onLost: (e) => console.log(at(), "onLost:", e.reason),
  });
  console.log(at(), "holding, fencing token", lease.fencingToken, "drift budget", lease.driftBudgetMs, "ms");
  // Three TTLs of work: the watchdog renews at about a third of the validity left.
  for (let step = 1; step <= 3; step++) {
    await new Promise((resolve, reject) => {
      const timer = setTimeout(resolve, 1000);
      lease.signal.addEventListener("abort", () => (clearTimeout(timer), reject(lease.signal.reason)), { once: true });
    });
    lease.check(); // throws LeaseLost once the lease stopped protecting the work
    console.log(at(), `step ${step} done; renewed at ${lease.lastRecord.renewedAt}, valid for ${Math.round(lease.validForMs)} ms`);
  }
} // released here
const after = await client.inspect(client.resource("invoice-export", "order-43"));
console.log(at(), "after the scope: held", after.held);

// Someone takes the lease away (here: released with the holder's own attempt
// from outside); the next renew answers `lost` and the signal aborts.
const lease = await client.lock("invoice-export", "order-44", { ttlMs: 900 });
await client.release(lease.resource, lease.attempt);
try {
  await new Promise((_, reject) => lease.signal.addEventListener("abort", () => reject(lease.signal.reason), { once: true }));
} catch (e) {
  if (!(e instanceof LeaseLost)) throw e;
  console.log(at(), "signal aborted:", e.message);
}
