// Client: the verbs, each one request through the transport and its reply
// decoded by wire.ts (mirrors src/client/api.rs), and what is built on
// them: listing every page, watching, following a leader, `lock`.
//
//   options.ts    the options of the client and of each verb
//   transport.ts  one request, its reply read within bounds, failures classified
//   wire.ts       a reply's body as a typed outcome or error
//   resource.ts   resources and the names the service accepts

import {
  IndeterminateError,
  NotAcquiredError,
  OverloadedError,
  RejectedError,
  UnavailableError,
  type FieldError,
} from "./errors.js";
import { isObject, linked, now, operationId as newOperationId, pause, type JsonObject } from "./internal.js";
import { Lease } from "./lease.js";
import {
  defaultDriftBudgetMs,
  type AcquireOptions,
  type AcquireResult,
  type ClientOptions,
  type InspectOptions,
  type ListOptions,
  type LockOptions,
  type ObserveOptions,
  type RenewOptions,
  type WatchOptions,
} from "./options.js";
import { OPERATION_ID, PURPOSE, DIGEST, resourceOf } from "./resource.js";
import { Session } from "./session.js";
import { sessionPage, type SessionOptions, type SessionPage } from "./session_wire.js";
import { parseEventStream } from "./sse.js";
import { neverConnected, Transport, type CallSpec } from "./transport.js";
import type { Attempt, CallOptions, Inspection, Leader, ListedLease, Listing, ReleaseResult, RenewResult, Resource, WatchEvent } from "./types.js";
import {
  failure,
  type Reply,
  inspection,
  inspectionOf,
  leaderOf,
  leaseRecord,
  listedLease,
  localInvalid,
  num,
  outcomeOf,
  required,
  str,
  unexpected,
} from "./wire.js";

export { defaultDriftBudgetMs } from "./options.js";
export { digestOf, resourceOf } from "./resource.js";
export { leaderOf } from "./wire.js";
export type {
  AcquireOptions,
  AcquireResult,
  ClientOptions,
  InspectOptions,
  ListOptions,
  LockOptions,
  ObserveOptions,
  RenewOptions,
  WatchOptions,
} from "./options.js";

/** The pause before retrying an acquire whose answer was lost, with the same attempt. */
const SAME_ATTEMPT_PAUSE_MS = 50;

/** A leasehold client. Cheap to share; it keeps no connection state of its own. */
export class Client {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  readonly #driftBudgetMs: number | undefined;
  readonly #transport: Transport;

  constructor(options: ClientOptions | string) {
    const o: ClientOptions = typeof options === "string" ? { baseUrl: options } : options;
    let url: URL;
    try {
      url = new URL(o.baseUrl);
    } catch {
      throw new TypeError(`base URL ${JSON.stringify(o.baseUrl)} must be an absolute http:// or https:// URL`);
    }
    if ((url.protocol !== "http:" && url.protocol !== "https:") || url.search !== "" || url.hash !== "") {
      throw new TypeError(`base URL ${JSON.stringify(o.baseUrl)} must be an absolute http:// or https:// URL without query or fragment`);
    }
    if (o.apiKey !== undefined && !/^[\x21-\x7e]+$/.test(o.apiKey)) {
      throw new TypeError("the API key must be visible ASCII");
    }
    this.baseUrl = url.href.replace(/\/+$/, "");
    this.timeoutMs = o.timeoutMs ?? 5000;
    this.#driftBudgetMs = o.driftBudgetMs;
    const f = o.fetch ?? globalThis.fetch;
    if (typeof f !== "function") throw new TypeError("no fetch: pass one in ClientOptions.fetch");
    this.#transport = new Transport({
      baseUrl: this.baseUrl,
      apiKey: o.apiKey,
      maxReplyBytes: o.maxReplyBytes ?? 64 * 1024,
      fetch: f,
    });
  }

  /** The drift budget a lease of `ttlMs` gets from this client. */
  driftBudgetFor(ttlMs: number): number {
    return this.#driftBudgetMs ?? defaultDriftBudgetMs(ttlMs);
  }

  /** A resource from a purpose and a raw id (hashed here, never sent). */
  resource(purpose: string, rawId: string): Resource {
    return resourceOf(purpose, rawId);
  }

  #leaseUrl(resource: Resource): string {
    const errors: FieldError[] = [];
    if (!PURPOSE.test(resource.purpose)) errors.push({ field: "purpose", message: "must match ^[a-z][a-z0-9-]{0,62}$" });
    if (!DIGEST.test(resource.digest)) errors.push({ field: "digest", message: "must be v1. and 64 lowercase hex (use digestOf)" });
    if (errors.length > 0) throw localInvalid(errors);
    return `${this.baseUrl}/leases/${resource.purpose}/${resource.digest}`;
  }

  /**
   * `POST /sessions`: a session (docs/design.md §18, §19) kept alive by its
   * keep-alive stream (PATCH when the stream is not there); leases acquired
   * on it end with it. See `Session`.
   */
  session(options: SessionOptions): Promise<Session> {
    return Session.create(this, this.#transport, options);
  }

  /** `GET /sessions/{id}`: the session and a page of its leases; undefined when it is gone. */
  async readSession(id: string, options: CallOptions & { readonly limit?: number; readonly cursor?: string } = {}): Promise<SessionPage | undefined> {
    const query = new URLSearchParams();
    if (options.limit !== undefined) query.set("limit", String(options.limit));
    if (options.cursor !== undefined) query.set("cursor", options.cursor);
    const q = query.toString();
    const reply = await this.#call({
      method: "GET",
      url: `${this.baseUrl}/sessions/${encodeURIComponent(id)}${q === "" ? "" : `?${q}`}`,
      op: "session",
      timeoutMs: options.timeoutMs ?? this.timeoutMs,
      signal: options.signal,
    });
    return sessionPage(reply);
  }

  /** One request through the transport. */
  #call(spec: CallSpec): Promise<Reply> {
    return this.#transport.call(spec);
  }

  /**
   * `POST /attempts`: a fresh owner token (drawn by the service from its
   * CSPRNG) for `operationId` (generated when absent). Create it *before*
   * the first acquire and keep it for every retry of that acquire.
   * Stateless on the server, so safe to retry on any failure.
   */
  async attempt(operationId?: string, options: CallOptions = {}): Promise<Attempt> {
    const op = operationId ?? newOperationId("op");
    if (!OPERATION_ID.test(op)) {
      throw localInvalid([{ field: "operationId", message: "must be 1-128 characters of [A-Za-z0-9._~-]" }]);
    }
    const reply = await this.#call({
      method: "POST",
      url: `${this.baseUrl}/attempts`,
      op,
      body: { operationId: op },
      timeoutMs: options.timeoutMs ?? this.timeoutMs,
      signal: options.signal,
    });
    if (outcomeOf(reply) !== "attempt_created") throw failure(reply, op);
    const ownerToken = str(reply.body?.["ownerToken"]);
    if (ownerToken === undefined || !/^[A-Za-z0-9_-]{32}$/.test(ownerToken) || reply.body?.["operationId"] !== op) {
      throw unexpected(reply, op);
    }
    return { ownerToken, operationId: op };
  }

  /**
   * `PUT /leases/{purpose}/{digest}`: acquire for `ttlMs`, waiting up to
   * `waitMs` server-side. A held lease comes back with a `Lease` handle whose
   * local validity is counted from the instant this request was sent (plus
   * `waitedMs`). The handle does not renew by itself: call
   * `handle.keepAlive()` (or use `lock`).
   */
  async acquire(resource: Resource, attempt: Attempt, options: AcquireOptions): Promise<AcquireResult> {
    const url = this.#leaseUrl(resource);
    const body: JsonObject = { ttlMs: options.ttlMs };
    const waitMs = options.waitMs ?? 0;
    if (waitMs > 0) body["waitMs"] = waitMs;
    if (options.holder !== undefined) body["holder"] = options.holder;
    if (options.limit !== undefined && options.limit !== 1) body["limit"] = options.limit;
    if (options.mode === "shared") body["mode"] = "shared";
    if (options.lockDelayMs !== undefined && options.lockDelayMs > 0) body["lockDelayMs"] = options.lockDelayMs;
    if (options.maxHoldMs !== undefined) body["maxHoldMs"] = options.maxHoldMs;
    const op = attempt.operationId;
    const sentAt = now();
    const reply = await this.#call({
      method: "PUT",
      url,
      op,
      attempt,
      body,
      timeoutMs: (options.timeoutMs ?? this.timeoutMs) + waitMs,
      signal: options.signal,
    });
    const outcome = outcomeOf(reply);
    const b = reply.body ?? {};
    switch (outcome) {
      case "acquired": {
        const lease = leaseRecord(reply, resource, op);
        const waitedMs = num(b["waitedMs"]);
        const handle = new Lease(this, resource, attempt, lease, sentAt + (waitedMs ?? 0), options.ttlMs, options.lease);
        return waitedMs === undefined ? { outcome, lease, handle } : { outcome, lease, handle, waitedMs };
      }
      case "replayed_same_operation": {
        const lease = leaseRecord(reply, resource, op);
        const handle = new Lease(this, resource, attempt, lease, sentAt, options.ttlMs, options.lease, outcome);
        return { outcome, lease, handle };
      }
      case "owner_operation_conflict":
        return { outcome, retryAfterMs: required(num(b["retryAfterMs"]), reply, op) };
      case "contended": {
        const retryAfterMs = required(num(b["retryAfterMs"]), reply, op);
        const waitedMs = num(b["waitedMs"]);
        const reason = str(b["reason"]);
        if (reason !== undefined && reason !== "lock_delay" && reason !== "queued") throw unexpected(reply, op);
        return {
          outcome,
          retryAfterMs,
          ...(waitedMs === undefined ? {} : { waitedMs }),
          ...(reason === undefined ? {} : { reason }),
        };
      }
      case "limit_mismatch":
        return { outcome, limit: required(num(b["limit"]), reply, op) };
      default:
        throw failure(reply, op);
    }
  }

  /** `PATCH /leases/{purpose}/{digest}`: reset the TTL. A `Lease` handle calls this for you. */
  async renew(resource: Resource, attempt: Attempt, options: RenewOptions): Promise<RenewResult> {
    const url = this.#leaseUrl(resource);
    const op = attempt.operationId;
    const body: JsonObject = { ttlMs: options.ttlMs };
    if (options.holder !== undefined) body["holder"] = options.holder;
    const reply = await this.#call({
      method: "PATCH",
      url,
      op,
      attempt,
      body,
      timeoutMs: options.timeoutMs ?? this.timeoutMs,
      signal: options.signal,
    });
    switch (outcomeOf(reply)) {
      case "renewed":
        return { outcome: "renewed", lease: leaseRecord(reply, resource, op) };
      case "lost": {
        const reason = str(reply.body?.["reason"]);
        if (reason === undefined) throw unexpected(reply, op);
        return { outcome: "lost", reason };
      }
      default:
        throw failure(reply, op);
    }
  }

  /** `DELETE /leases/{purpose}/{digest}`: release (idempotent). */
  async release(resource: Resource, attempt: Attempt, options: CallOptions = {}): Promise<ReleaseResult> {
    const url = this.#leaseUrl(resource);
    const op = attempt.operationId;
    const reply = await this.#call({
      method: "DELETE",
      url,
      op,
      attempt,
      timeoutMs: options.timeoutMs ?? this.timeoutMs,
      signal: options.signal,
    });
    const outcome = outcomeOf(reply);
    switch (outcome) {
      case "already_absent": {
        const reason = str(reply.body?.["reason"]);
        return reason === "revoked" || reason === "max_hold" ? { outcome, reason } : { outcome };
      }
      case "released":
      case "not_owner":
        return { outcome };
      default:
        throw failure(reply, op);
    }
  }

  /**
   * `GET /leases/{purpose}/{digest}`: a read-only view (never the holder's
   * token). With `changedSince` (+ `waitMs`) it is the long-poll: it answers
   * as soon as the version differs, or after `waitMs` unchanged.
   */
  async inspect(resource: Resource, options: InspectOptions = {}): Promise<Inspection> {
    let url = this.#leaseUrl(resource);
    const op = options.attempt?.operationId ?? "inspect";
    let waitMs = 0;
    if (options.changedSince !== undefined) {
      waitMs = options.waitMs ?? 0;
      url += `?changedSince=${encodeURIComponent(options.changedSince)}&waitMs=${waitMs}`;
    }
    const reply = await this.#call({
      method: "GET",
      url,
      op,
      attempt: options.attempt,
      timeoutMs: (options.timeoutMs ?? this.timeoutMs) + waitMs,
      signal: options.signal,
    });
    return inspection(reply, op);
  }

  /** `GET /leases/{purpose}?limit&cursor`: one page of the leases held on `purpose`. */
  async list(purpose: string, options: ListOptions = {}): Promise<Listing> {
    if (!PURPOSE.test(purpose)) throw localInvalid([{ field: "purpose", message: "must match ^[a-z][a-z0-9-]{0,62}$" }]);
    const query: string[] = [];
    if (options.limit !== undefined) query.push(`limit=${encodeURIComponent(String(options.limit))}`);
    if (options.cursor !== undefined) query.push(`cursor=${encodeURIComponent(options.cursor)}`);
    const url = `${this.baseUrl}/leases/${purpose}${query.length > 0 ? `?${query.join("&")}` : ""}`;
    const op = "list";
    const reply = await this.#call({ method: "GET", url, op, timeoutMs: options.timeoutMs ?? this.timeoutMs, signal: options.signal });
    if (outcomeOf(reply) !== "listed") throw failure(reply, op);
    const leases = reply.body?.["leases"];
    if (!Array.isArray(leases)) throw unexpected(reply, op);
    const listed = leases.map((l) => listedLease(l, reply, op));
    const nextCursor = str(reply.body?.["nextCursor"]);
    return nextCursor === undefined ? { outcome: "listed", leases: listed } : { outcome: "listed", leases: listed, nextCursor };
  }

  /**
   * Every lease held on `purpose`, page after page, each digest once (on
   * Redis a lease may appear on two pages; this de-duplicates by digest).
   */
  async *listAll(purpose: string, options: Omit<ListOptions, "cursor"> = {}): AsyncGenerator<ListedLease, void, undefined> {
    const seen = new Set<string>();
    let cursor: string | undefined;
    do {
      const page = await this.list(purpose, cursor === undefined ? options : { ...options, cursor });
      for (const lease of page.leases) {
        if (seen.has(lease.digest)) continue;
        seen.add(lease.digest);
        yield lease;
      }
      cursor = page.nextCursor;
    } while (cursor !== undefined);
  }

  /**
   * `GET /leases/{purpose}/{digest}/events`: the lease's changes as an async
   * iterator (`state` first, then `acquired`, `released`, `expired`,
   * `holder_changed`). After a cut (a lost connection, a service restart)
   * it reconnects with `Last-Event-ID`, so nothing is missed: the service
   * sends a `state` event only if something changed meanwhile. Break out of
   * the loop (or abort `signal`) to stop; the connection is closed.
   */
  async *watch(resource: Resource, options: WatchOptions = {}): AsyncGenerator<WatchEvent, void, undefined> {
    const url = `${this.#leaseUrl(resource)}/events`;
    const reconnect = options.reconnect ?? true;
    const delay = options.reconnectDelayMs ?? 250;
    let lastEventId = options.lastEventId;
    const outer = options.signal;
    // The pause before the next connection, when there is one.
    let pauseMs: number | undefined;
    for (;;) {
      if (pauseMs !== undefined && !(await pause(pauseMs, outer))) return;
      if (outer?.aborted) return;
      pauseMs = delay;
      const { controller, dispose } = linked(outer);
      try {
        let response: Response;
        try {
          response = await this.#transport.openStream(url, lastEventId, controller.signal);
        } catch (e) {
          if (controller.signal.aborted) return;
          if (!reconnect) {
            throw neverConnected(e)
              ? new UnavailableError("connect", undefined, { cause: e })
              : new IndeterminateError("watch", "connection_lost", undefined, { cause: e });
          }
          continue;
        }
        if (response.status !== 200 || response.body === null) {
          const body = await this.#transport.readJson(response);
          const error = failure({ status: response.status, body, headers: response.headers }, "watch");
          if (reconnect && (error instanceof UnavailableError || error instanceof OverloadedError)) {
            pauseMs = error.retryAfterMs ?? delay;
            continue;
          }
          throw error;
        }
        try {
          for await (const message of parseEventStream(response.body)) {
            if (message.data === "") continue;
            let parsed: unknown;
            try {
              parsed = JSON.parse(message.data);
            } catch {
              continue;
            }
            const state = inspectionOf(isObject(parsed) ? parsed : undefined);
            if (state === undefined) continue;
            const id = message.id ?? state.version;
            lastEventId = id;
            pauseMs = 0; // a stream that delivered resumes at once after a cut
            yield { event: message.event ?? "message", id, state };
          }
        } catch (e) {
          if (controller.signal.aborted) return;
          if (!reconnect) throw new IndeterminateError("watch", "connection_lost", undefined, { cause: e });
          continue;
        }
        // The stream ended (service shutdown, a cut): resume.
        if (!reconnect) return;
      } finally {
        controller.abort();
        dispose();
      }
    }
  }

  /**
   * Follows the leader of an election (or any lease's holder) with the
   * inspect long-poll: yields the leader found first, then every change
   * (another holder label, another term, nobody). Ends when `signal` aborts
   * or the loop is left. Transient failures are retried (by the service's
   * hint, else `retryPeriodMs`).
   */
  async *observe(resource: Resource, options: ObserveOptions = {}): AsyncGenerator<Leader, void, undefined> {
    const waitMs = options.waitMs ?? 10_000;
    const retryPeriodMs = options.retryPeriodMs ?? 1000;
    const stop = options.signal;
    let version: string | undefined;
    let last: Leader | undefined;
    while (!stop?.aborted) {
      const asked = now();
      let answer: Inspection;
      try {
        answer = await this.inspect(
          resource,
          version === undefined ? { signal: stop } : { signal: stop, changedSince: version, waitMs },
        );
      } catch (e) {
        if (stop?.aborted) return;
        if (e instanceof RejectedError) throw e;
        const hint = e instanceof UnavailableError || e instanceof OverloadedError ? e.retryAfterMs : undefined;
        if (!(await pause(hint ?? retryPeriodMs, stop))) return;
        continue;
      }
      // Unchanged well before the wait was over: a service that does not
      // hold long-polls. Poll at the retry period, not in a tight loop.
      if (version === answer.version && now() - asked < waitMs / 2) {
        if (!(await pause(retryPeriodMs, stop))) return;
      }
      version = answer.version;
      const leader = leaderOf(answer);
      if (last === undefined || last.holder !== leader.holder || last.fencingToken !== leader.fencingToken) {
        last = leader;
        yield leader;
      }
    }
  }

  /**
   * Acquires `rawId` for `purpose` and keeps it: creates the attempt first,
   * retries an acquire that got no certain answer with the *same* attempt
   * (never a new one) within `retryBudgetMs`, then renews in the background
   * at about a third of the validity left. The returned `Lease` exposes the
   * fencing token and an `AbortSignal` aborted when the lease is lost or
   * unknown, always before its local validity ends. `await using lease =
   * await client.lock(...)` releases it at the end of the scope.
   *
   * Throws `NotAcquiredError` when someone else holds it (after `waitMs`),
   * or the error that ended the retries.
   */
  async lock(purpose: string, rawId: string, options: LockOptions): Promise<Lease> {
    const resource = resourceOf(purpose, rawId);
    const waitMs = options.waitMs ?? 0;
    const started = now();
    const deadline = started + (options.retryBudgetMs ?? 5000) + waitMs;
    const signal = options.signal;
    // The attempt: stateless on the server, so any failure may be retried.
    let attempt: Attempt | undefined;
    const op = options.operationId ?? newOperationId("lock");
    for (;;) {
      try {
        attempt = await this.attempt(op, { signal });
        break;
      } catch (e) {
        if (e instanceof RejectedError || signal?.aborted || !isTransient(e)) throw e;
        if (now() >= deadline) throw e;
        if (!(await pause(retryHint(e) ?? SAME_ATTEMPT_PAUSE_MS, signal))) throw signal?.reason;
      }
    }
    // Whether an acquire with this attempt may have taken the lease unseen.
    let mayHold = false;
    for (;;) {
      const leftWait = Math.max(0, Math.round(waitMs - (now() - started)));
      let result: AcquireResult;
      try {
        result = await this.acquire(resource, attempt, {
          ttlMs: options.ttlMs,
          waitMs: leftWait,
          ...(options.holder === undefined ? {} : { holder: options.holder }),
          ...(options.limit === undefined ? {} : { limit: options.limit }),
          ...(options.mode === undefined ? {} : { mode: options.mode }),
          ...(options.lockDelayMs === undefined ? {} : { lockDelayMs: options.lockDelayMs }),
          ...(options.maxHoldMs === undefined ? {} : { maxHoldMs: options.maxHoldMs }),
          ...(options.lease === undefined ? {} : { lease: options.lease }),
          ...(signal === undefined ? {} : { signal }),
        });
      } catch (e) {
        if (e instanceof IndeterminateError) mayHold = true;
        const retry = isTransient(e) && !signal?.aborted && now() < deadline;
        if (!retry) {
          if (mayHold) await this.#cleanUp(resource, attempt);
          throw e;
        }
        const wait = e instanceof IndeterminateError ? SAME_ATTEMPT_PAUSE_MS : (retryHint(e) ?? SAME_ATTEMPT_PAUSE_MS);
        if (!(await pause(Math.min(wait, Math.max(0, deadline - now())), signal))) {
          if (mayHold) await this.#cleanUp(resource, attempt);
          throw signal?.reason;
        }
        continue;
      }
      switch (result.outcome) {
        case "acquired":
        case "replayed_same_operation": {
          const handle = result.handle;
          if (options.onLost) handle.onLost(options.onLost);
          handle.keepAlive(options.onRenewFailed === undefined ? {} : { onRenewFailed: options.onRenewFailed });
          return handle;
        }
        case "contended":
          throw new NotAcquiredError("contended", result.retryAfterMs, result.reason);
        case "owner_operation_conflict":
          throw new NotAcquiredError("owner_operation_conflict", result.retryAfterMs);
        case "limit_mismatch":
          throw new NotAcquiredError("limit_mismatch", undefined, undefined, result.limit);
      }
    }
  }

  /**
   * Runs `work` while holding the lease, then releases it (also when `work`
   * throws). `work` gets the `Lease`: pass `lease.signal` to what it awaits
   * and `lease.fencingToken` to what it writes.
   */
  async withLock<T>(purpose: string, rawId: string, options: LockOptions, work: (lease: Lease) => Promise<T>): Promise<T> {
    const lease = await this.lock(purpose, rawId, options);
    try {
      return await work(lease);
    } finally {
      await lease[Symbol.asyncDispose]();
    }
  }

  /** Releases with `attempt` in case an acquire took the lease unseen. */
  async #cleanUp(resource: Resource, attempt: Attempt): Promise<void> {
    try {
      await this.release(resource, attempt);
    } catch {
      // The lease, if any, expires by itself.
    }
  }
}

/** Failures worth retrying with the same attempt (nothing or maybe applied, no rejection). */
function isTransient(e: unknown): boolean {
  return e instanceof UnavailableError || e instanceof OverloadedError || e instanceof IndeterminateError;
}

function retryHint(e: unknown): number | undefined {
  return e instanceof UnavailableError || e instanceof OverloadedError ? e.retryAfterMs : undefined;
}
