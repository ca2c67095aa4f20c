// An election: alpha leads, bravo campaigns and follows, alpha proclaims a
// new label, then resigns; bravo leads within milliseconds.
import { Client, Election, resourceOf } from "@leasehold/client";

const client = new Client(process.env["LEASEHOLD_URL"] ?? "http://127.0.0.1:8080");
const cron = resourceOf("leader-demo", "cron");
const t0 = performance.now();
const at = (): string => `${String(Math.round(performance.now() - t0)).padStart(5)} ms`;

function candidate(name: string): { election: Election; leads: Promise<void> } {
  let leads!: () => void;
  const started = new Promise<void>((resolve) => (leads = resolve));
  const election = new Election(client, cron, {
    holder: name,
    ttlMs: 5000,
    waitMs: 10_000,
    onStartedLeading: (term) => {
      console.log(at(), `${name}: started leading, fencing token ${term.fencingToken}`);
      term.signal.addEventListener("abort", () => console.log(at(), `${name}: term signal aborted`));
      leads();
    },
    onStoppedLeading: (s) => console.log(at(), `${name}: stopped leading (${s.fencingToken}): ${s.reason}`),
    onNewLeader: (l) => console.log(at(), `${name}: new leader ${l.holder ?? "(none)"} (${l.fencingToken ?? "-"})`),
  });
  return { election, leads: started };
}

const alpha = candidate("alpha");
const bravo = candidate("bravo");
const campaigns = [alpha.election.campaign()];
await alpha.leads;
campaigns.push(bravo.election.campaign());
const leader = await bravo.election.leader();
console.log(at(), "leader():", leader);
await new Promise((r) => setTimeout(r, 200));
await alpha.election.proclaim("alpha@host-2");
await new Promise((r) => setTimeout(r, 200));
await alpha.election.resign();
console.log(at(), "alpha: resign() returned");
await bravo.leads;
await new Promise((r) => setTimeout(r, 100));
await bravo.election.resign();
await Promise.all(campaigns);
console.log(at(), "campaigns over");
