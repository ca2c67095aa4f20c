// Test harness: the real service binary, a real redis-server, a real
// PostgreSQL, and a small TCP proxy that can drop a reply or cut streams.
// Nothing is faked; every wait is on an event or a condition.

import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync, chmodSync, chownSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** The repository root (this file runs from clients/typescript/dist-test/test/). */
export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../..");
export const packageRoot = path.resolve(repoRoot, "clients/typescript");

/** The service binary: LEASEHOLD_BIN, else <repo>/target/debug/leasehold. Never skipped silently. */
export function leaseholdBin(): string {
  const bin = process.env["LEASEHOLD_BIN"] ?? path.join(repoRoot, "target/debug/leasehold");
  if (!existsSync(bin)) {
    throw new Error(
      `leasehold binary not found at ${bin}: build it with \`cargo build --bin leasehold\` (at the repository root) or set LEASEHOLD_BIN`,
    );
  }
  return bin;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** Resolves when `child` prints a line matching `pattern` on stdout or stderr; rejects if it exits first. */
export function waitForOutput(child: ChildProcess, pattern: RegExp, timeoutMs = 20_000, what = "process"): Promise<string> {
  return new Promise((resolve, reject) => {
    let seen = "";
    const onData = (chunk: Buffer): void => {
      seen += chunk.toString();
      const m = seen.match(pattern);
      if (m) {
        cleanup();
        resolve(m[0]);
      }
    };
    const onExit = (code: number | null): void => {
      cleanup();
      reject(new Error(`${what} exited (${code}) before printing ${pattern}:\n${seen}`));
    };
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`${what} did not print ${pattern} within ${timeoutMs} ms:\n${seen}`));
    }, timeoutMs);
    const cleanup = (): void => {
      clearTimeout(timer);
      child.stdout?.off("data", onData);
      child.stderr?.off("data", onData);
      child.off("exit", onExit);
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    child.on("exit", onExit);
  });
}

/** Every child this harness started, killed when the test process ends however it ends. */
const children = new Set<ChildProcess>();
export function track(child: ChildProcess): ChildProcess {
  children.add(child);
  child.once("exit", () => children.delete(child));
  return child;
}
/** Synchronous clean-ups (a daemonized PostgreSQL) for the same moment. */
const cleanups = new Set<() => void>();
function killAll(): void {
  for (const cleanup of cleanups) {
    try {
      cleanup();
    } catch {
      // best effort
    }
  }
  for (const child of children) {
    try {
      process.kill(child.pid!, "SIGCONT");
      child.kill("SIGKILL");
    } catch {
      // already gone
    }
  }
}
process.once("exit", killAll);
for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"] as const) {
  process.once(signal, () => {
    killAll();
    process.exit(128 + (signal === "SIGHUP" ? 1 : signal === "SIGINT" ? 2 : 15));
  });
}

function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once("exit", () => resolve()));
}

async function stopChild(child: ChildProcess, signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const done = exited(child);
  try {
    process.kill(child.pid!, "SIGCONT");
  } catch {
    // gone
  }
  child.kill(signal);
  const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
  await done;
  clearTimeout(timer);
}

export interface Redis {
  readonly port: number;
  readonly url: string;
  readonly pid: number;
  freeze(): void;
  thaw(): void;
  cli(...args: string[]): string;
  stop(): Promise<void>;
}

export async function startRedis(): Promise<Redis> {
  const port = await freePort();
  const child = track(spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], {
    stdio: ["ignore", "pipe", "pipe"],
  }));
  await waitForOutput(child, /Ready to accept connections/, 20_000, "redis-server");
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    pid: child.pid!,
    freeze: () => process.kill(child.pid!, "SIGSTOP"),
    thaw: () => process.kill(child.pid!, "SIGCONT"),
    cli: (...args: string[]) => {
      const r = spawnSync("redis-cli", ["-p", String(port), ...args], { encoding: "utf8" });
      if (r.status !== 0) throw new Error(`redis-cli ${args.join(" ")}: ${r.stderr}`);
      return r.stdout.trim();
    },
    stop: () => stopChild(child),
  };
}

export interface Service {
  readonly url: string;
  readonly port: number;
  readonly child: ChildProcess;
  stop(): Promise<void>;
  /** Prometheus text of /metrics. */
  metrics(): Promise<string>;
}

export interface ServiceOptions {
  readonly redisUrl?: string;
  readonly env?: Record<string, string>;
}

export async function startService(options: ServiceOptions = {}): Promise<Service> {
  const bin = leaseholdBin();
  const port = await freePort();
  const env: Record<string, string> = {
    PATH: process.env["PATH"] ?? "/usr/bin:/bin",
    LEASEHOLD_LISTEN: `127.0.0.1:${port}`,
    RUST_LOG: process.env["RUST_LOG"] ?? "warn",
    ...(options.redisUrl === undefined ? {} : { LEASEHOLD_REDIS_URL: options.redisUrl }),
    ...options.env,
  };
  const child = track(spawn(bin, ["serve"], { env, stdio: ["ignore", "pipe", "pipe"] }));
  let output = "";
  child.stdout!.on("data", (c: Buffer) => (output += c.toString()));
  child.stderr!.on("data", (c: Buffer) => (output += c.toString()));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  // Wait for /readyz (store reachable): a condition, polled.
  for (;;) {
    if (child.exitCode !== null) throw new Error(`leasehold exited (${child.exitCode}) before ready:\n${output}`);
    try {
      const r = await fetch(`${url}/readyz`);
      await r.arrayBuffer();
      if (r.status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stopChild(child);
      throw new Error(`leasehold not ready within 30 s:\n${output}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  return {
    url,
    port,
    child,
    stop: () => stopChild(child),
    metrics: async () => (await fetch(`${url}/metrics`)).text(),
  };
}

/** Polls `condition` until it holds (a condition wait, not a sleep), or fails after `timeoutMs`. */
export async function until(condition: () => boolean | Promise<boolean>, timeoutMs = 10_000, what = "condition"): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`${what} did not hold within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** The value of a Prometheus sample (sum over label sets), from /metrics text. */
export function metric(text: string, name: string): number {
  let sum = 0;
  for (const line of text.split("\n")) {
    if (line.startsWith("#")) continue;
    const m = line.match(/^([a-z_]+)(\{[^}]*\})?\s+([0-9.eE+-]+)$/);
    if (m && m[1] === name) sum += Number(m[3]);
  }
  return sum;
}

/**
 * A TCP proxy between client and service that parses HTTP/1.1 requests
 * (to count them by `METHOD /first-path-segment`) and can, for the next
 * `times` requests matching a rule, forward the request and then close the
 * client's connection instead of relaying the answer (once the service has
 * started answering, so it has applied it).
 */
export interface Proxy {
  readonly url: string;
  /** Requests seen, by `METHOD /segment` (e.g. `PUT /leases`, `POST /attempts`). */
  readonly counts: Map<string, number>;
  dropReply(method: string, segment: string, times: number): void;
  /** Destroys every open connection (a cut). */
  cut(): void;
  close(): Promise<void>;
}

export async function startProxy(targetPort: number): Promise<Proxy> {
  const counts = new Map<string, number>();
  const drops: { method: string; segment: string; times: number }[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, "127.0.0.1");
    sockets.add(client);
    sockets.add(upstream);
    let buffer = Buffer.alloc(0);
    // Requests forwarded whose answer must not be relayed, in order.
    const pending: boolean[] = [];
    let dropping = false;
    let bodyLeft = 0;
    const kill = (): void => {
      client.destroy();
      upstream.destroy();
    };
    client.on("data", (chunk: Buffer) => {
      upstream.write(chunk);
      buffer = Buffer.concat([buffer, chunk]);
      for (;;) {
        if (bodyLeft > 0) {
          const take = Math.min(bodyLeft, buffer.length);
          buffer = buffer.subarray(take);
          bodyLeft -= take;
          if (bodyLeft > 0) return;
        }
        const end = buffer.indexOf("\r\n\r\n");
        if (end === -1) return;
        const head = buffer.subarray(0, end).toString("latin1");
        buffer = buffer.subarray(end + 4);
        const [requestLine, ...headerLines] = head.split("\r\n");
        const [method = "", target = ""] = (requestLine ?? "").split(" ");
        const segment = "/" + (target.split("?")[0] ?? "").split("/")[1];
        const key = `${method} ${segment}`;
        counts.set(key, (counts.get(key) ?? 0) + 1);
        const length = headerLines.map((l) => l.match(/^content-length:\s*(\d+)/i)).find((m) => m !== null);
        bodyLeft = length ? Number(length[1]) : 0;
        const rule = drops.find((d) => d.times > 0 && d.method === method && d.segment === segment);
        if (rule) rule.times -= 1;
        pending.push(rule !== undefined);
      }
    });
    upstream.on("data", (chunk: Buffer) => {
      if (dropping) return;
      if (pending[0] === true) {
        // The service answered (so it applied the request): cut instead of relaying.
        dropping = true;
        kill();
        return;
      }
      // Relay; responses are not parsed, so with one request at a time
      // (fetch does not pipeline) the first pending entry is this one.
      if (pending.length > 0 && chunk.includes("HTTP/1.1 ")) pending.shift();
      client.write(chunk);
    });
    client.on("error", kill);
    upstream.on("error", kill);
    client.on("close", () => {
      sockets.delete(client);
      upstream.destroy();
    });
    upstream.on("close", () => {
      sockets.delete(upstream);
      client.destroy();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    counts,
    dropReply: (method, segment, times) => drops.push({ method, segment, times }),
    cut: () => {
      for (const s of sockets) s.destroy();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

export interface Postgres {
  readonly host: string;
  readonly port: number;
  readonly user: string;
  stop(): Promise<void>;
}

const PG_BIN = process.env["PG_BIN"] ?? "/usr/lib/postgresql/15/bin";

/** A private PostgreSQL cluster on a Unix socket in its own directory (as `postgres` when root). */
export async function startPostgres(): Promise<Postgres> {
  if (!existsSync(path.join(PG_BIN, "initdb"))) {
    throw new Error(`PostgreSQL not found in ${PG_BIN}: install postgresql (15) or set PG_BIN`);
  }
  const asRoot = process.getuid?.() === 0;
  const dir = mkdtempSync(path.join(tmpdir(), "leasehold-pg-"));
  const data = path.join(dir, "data");
  const wrap = (cmd: string, args: string[]): [string, string[]] =>
    asRoot ? ["runuser", ["-u", "postgres", "--", cmd, ...args]] : [cmd, args];
  if (asRoot) {
    const id = spawnSync("id", ["-u", "postgres"], { encoding: "utf8" });
    const gid = spawnSync("id", ["-g", "postgres"], { encoding: "utf8" });
    chownSync(dir, Number(id.stdout.trim()), Number(gid.stdout.trim()));
    chmodSync(dir, 0o700);
  }
  const [initCmd, initArgs] = wrap(path.join(PG_BIN, "initdb"), ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync"]);
  const init = spawnSync(initCmd, initArgs, { encoding: "utf8" });
  if (init.status !== 0) throw new Error(`initdb failed: ${init.stderr}${init.stdout}`);
  const port = await freePort();
  const log = path.join(dir, "pg.log");
  const [ctlCmd, ctlArgs] = wrap(path.join(PG_BIN, "pg_ctl"), [
    "-D", data, "-l", log, "-w", "-o", `-p ${port} -k ${dir} -c listen_addresses='' -c fsync=off`, "start",
  ]);
  const start = spawnSync(ctlCmd, ctlArgs, { encoding: "utf8" });
  if (start.status !== 0) throw new Error(`pg_ctl start failed: ${start.stderr}${start.stdout}`);
  const stopNow = (): void => {
    cleanups.delete(stopNow);
    const [c, a] = wrap(path.join(PG_BIN, "pg_ctl"), ["-D", data, "-m", "immediate", "-w", "stop"]);
    spawnSync(c, a, { encoding: "utf8" });
    rmSync(dir, { recursive: true, force: true });
  };
  cleanups.add(stopNow);
  return {
    host: dir,
    port,
    user: "postgres",
    stop: async () => stopNow(),
  };
}

/** Writes an API keys file (mode 0600) and returns its path. */
export function apiKeysFile(lines: string[]): string {
  const dir = mkdtempSync(path.join(tmpdir(), "leasehold-keys-"));
  const file = path.join(dir, "keys");
  writeFileSync(file, lines.join("\n") + "\n", { mode: 0o600 });
  cleanups.add(() => rmSync(dir, { recursive: true, force: true }));
  return file;
}

/** Milliseconds since `t0` (performance.now()). */
export function since(t0: number): number {
  return performance.now() - t0;
}

/** A promise and its resolver. */
export function deferred<T>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}
