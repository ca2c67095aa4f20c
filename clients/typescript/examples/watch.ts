// Watch a lease's event stream while another worker acquires, renames,
// releases, and a short lease expires by itself.
import { Client, resourceOf } from "@leasehold/client";

const client = new Client(process.env["LEASEHOLD_URL"] ?? "http://127.0.0.1:8080");
const order = resourceOf("invoice-export", "order-45");
const stop = new AbortController();
const t0 = performance.now();
const at = (): string => `${String(Math.round(performance.now() - t0)).padStart(5)} ms`;

const watching = (async () => {
  for await (const e of client.watch(order, { signal: stop.signal })) {
    const s = e.state;
    console.log(at(), `${e.event.padEnd(14)} id ${e.id.padEnd(4)} held ${s.held}${s.held ? ` holder ${s.holder ?? "-"} token ${s.fencingToken}` : ""}`);
    if (e.event === "expired") stop.abort();
  }
})();

const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
await pause(100);
const attempt = await client.attempt();
await client.acquire(order, attempt, { ttlMs: 30_000, holder: "worker-7" });
await pause(100);
await client.renew(order, attempt, { ttlMs: 30_000, holder: "worker-8" });
await pause(100);
await client.release(order, attempt);
await pause(100);
await client.acquire(order, await client.attempt(), { ttlMs: 500 }); // nobody renews it
await watching;
console.log(at(), "watch over");
