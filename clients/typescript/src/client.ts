// Client: the HTTP calls, and the mapping of every reply (or its absence)
// to a typed outcome or an error (mirrors src/client/api.rs and reply.rs).

import {
  IndeterminateError,
  InvalidRequestError,
  NotAcquiredError,
  OverloadedError,
  RejectedError,
  UnavailableError,
  type FieldError,
  type LeaseholdError,
  type LeaseLost,
} from "./errors.js";
import { isObject, linked, now, operationId as newOperationId, pause, type Json, type JsonObject } from "./internal.js";
import { Lease, type LeaseOptions } from "./lease.js";
import { sha256Hex } from "./sha256.js";
import { parseEventStream } from "./sse.js";
import type {
  Attempt,
  CallOptions,
  ContendedReason,
  HeldBy,
  Inspection,
  Leader,
  LeaseRecord,
  ListedLease,
  Listing,
  Mode,
  PermitView,
  ReleaseResult,
  RenewResult,
  Resource,
  WatchEvent,
} from "./types.js";

const OWNER_TOKEN_HEADER = "Lease-Owner-Token";
const OPERATION_ID_HEADER = "Lease-Operation-Id";
const PURPOSE = /^[a-z][a-z0-9-]{0,62}$/;
const DIGEST = /^v1\.[0-9a-f]{64}$/;
const OPERATION_ID = /^[A-Za-z0-9._~-]{1,128}$/;
/** The pause before retrying an acquire whose answer was lost, with the same attempt. */
const SAME_ATTEMPT_PAUSE_MS = 50;

/** The resource digest of a raw id: `v1.` + SHA-256 hex. The service never sees raw ids. */
export function digestOf(rawId: string): string {
  return `v1.${sha256Hex(new TextEncoder().encode(rawId))}`;
}

/** A resource from a purpose and a raw id (the id is hashed here). */
export function resourceOf(purpose: string, rawId: string): Resource {
  return { purpose, digest: digestOf(rawId) };
}

/** The default drift budget for a TTL: max(10 ms, 1 % of the TTL) (DESIGN §14). */
export function defaultDriftBudgetMs(ttlMs: number): number {
  return Math.max(10, Math.ceil(ttlMs / 100));
}

/** How a Client talks to the service. */
export interface ClientOptions {
  /** Where the service listens, e.g. `http://127.0.0.1:8080`. */
  readonly baseUrl: string;
  /** Sent as `Authorization: Bearer <key>`. A secret. */
  readonly apiKey?: string;
  /** How long one request may take, reply included; an acquire adds its `waitMs`. Default 5000. */
  readonly timeoutMs?: number;
  /**
   * A fixed drift budget in ms for every lease of this client. Default: per
   * lease, max(10 ms, 1 % of its TTL). Local validity is
   * `min(ttl, remainingMs) - drift` from the send.
   */
  readonly driftBudgetMs?: number;
  /** Replies larger than this are not read (indeterminate). Default 64 KiB. */
  readonly maxReplyBytes?: number;
  /** The fetch to use (default: the global one). */
  readonly fetch?: typeof globalThis.fetch;
}

/** What to ask an acquire for. */
export interface AcquireOptions extends CallOptions {
  readonly ttlMs: number;
  /** Wait server-side up to this long while someone else holds it (0 or absent: try once). */
  readonly waitMs?: number;
  /** A public label (pod name, host:port); everyone who can inspect sees it. */
  readonly holder?: string;
  /** Counting lease: how many may hold it at once (default 1). */
  readonly limit?: number;
  readonly mode?: Mode;
  /** When this lease expires (not released), nobody else acquires for this long. */
  readonly lockDelayMs?: number;
  /**
   * Bounds the hold (20 ms to 30 days): renewals never extend the lease past
   * acquisition + `maxHoldMs` (below `ttlMs`, it is the TTL granted); then
   * renew answers `lost` with `reason: "max_hold"`.
   */
  readonly maxHoldMs?: number;
  /** Options of the returned handle (drift budget, margin). */
  readonly lease?: LeaseOptions;
}

/** An acquire's own outcomes; the held ones carry a `Lease` handle. */
export type AcquireResult =
  | { readonly outcome: "acquired"; readonly lease: LeaseRecord; readonly handle: Lease; readonly waitedMs?: number }
  | { readonly outcome: "replayed_same_operation"; readonly lease: LeaseRecord; readonly handle: Lease }
  | { readonly outcome: "owner_operation_conflict"; readonly retryAfterMs: number }
  | {
      readonly outcome: "contended";
      readonly retryAfterMs: number;
      readonly waitedMs?: number;
      readonly reason?: ContendedReason;
    }
  | { readonly outcome: "limit_mismatch"; readonly limit: number };

export interface RenewOptions extends CallOptions {
  readonly ttlMs: number;
  /** A new public holder label (etcd's Proclaim); the fencing token stays. */
  readonly holder?: string;
}

export interface InspectOptions extends CallOptions {
  /** Sent in the attempt headers: the answer then says `heldBy`. */
  readonly attempt?: Attempt;
  /** Long-poll: answer as soon as the version differs from this one. */
  readonly changedSince?: string;
  /** Long-poll: how long to wait for a change (with `changedSince`). */
  readonly waitMs?: number;
}

export interface ListOptions extends CallOptions {
  /** 1-1000 resources per page (the service's default, 100, when absent). */
  readonly limit?: number;
  readonly cursor?: string;
}

export interface WatchOptions {
  /** Stop watching (the iterator then ends). */
  readonly signal?: AbortSignal;
  /** Resume after this event id (the first `state` event is sent only if it changed since). */
  readonly lastEventId?: string;
  /** Reconnect after a cut, with `Last-Event-ID`. Default true. */
  readonly reconnect?: boolean;
  /** Pause before reconnecting when the service gave no hint. Default 250 ms. */
  readonly reconnectDelayMs?: number;
}

export interface ObserveOptions {
  readonly signal?: AbortSignal;
  /** The long-poll's server-side wait. Default 10 000 ms (at most the service's max wait). */
  readonly waitMs?: number;
  /** The pause after a failure without a retry hint. Default 1000 ms. */
  readonly retryPeriodMs?: number;
}

/** Options of `lock` and `withLock`. */
export interface LockOptions {
  readonly ttlMs: number;
  /** Wait server-side up to this long for the lease. Default 0: try once. */
  readonly waitMs?: number;
  readonly holder?: string;
  readonly limit?: number;
  readonly mode?: Mode;
  readonly lockDelayMs?: number;
  /** Bounds the hold: the signal aborts (`serverReason: "max_hold"`) `marginMs` before its end. */
  readonly maxHoldMs?: number;
  /** The attempt's operation id (default: generated). */
  readonly operationId?: string;
  /**
   * How long to keep retrying an acquire that failed without a definite
   * answer (indeterminate, a connection lost after sending, unavailable,
   * overloaded), always with the same attempt. Default 5000 ms (plus `waitMs`).
   */
  readonly retryBudgetMs?: number;
  /** Called once when the lease is lost, unknown or expiring (not on release). */
  readonly onLost?: (error: LeaseLost) => void;
  /** Called when a background renew failed without ending the lease (unavailable, overloaded). */
  readonly onRenewFailed?: (error: LeaseholdError) => void;
  /** Stop trying to acquire. */
  readonly signal?: AbortSignal;
  /** Drift budget and margin of the handle. */
  readonly lease?: LeaseOptions;
}

/** A reply that arrived. */
interface Reply {
  readonly status: number;
  readonly body: JsonObject | undefined;
  readonly headers: Headers;
}

interface CallSpec {
  readonly method: string;
  readonly url: string;
  readonly op: string;
  readonly attempt?: Attempt | undefined;
  readonly body?: JsonObject | undefined;
  readonly timeoutMs: number;
  readonly signal?: AbortSignal | undefined;
  readonly headers?: Record<string, string>;
}

class Timeout extends Error {}

/** Error codes of a connection that was never made: nothing was sent. */
const CONNECT_CODES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EADDRNOTAVAIL",
  "UND_ERR_CONNECT_TIMEOUT",
  "CERT_HAS_EXPIRED",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "ERR_TLS_CERT_ALTNAME_INVALID",
]);

function errorCode(e: unknown): string | undefined {
  if (isObjectLike(e) && typeof e["code"] === "string") return e["code"];
  return undefined;
}

function isObjectLike(e: unknown): e is Record<string, unknown> {
  return typeof e === "object" && e !== null;
}

/** Whether a fetch failure says no connection was made (so nothing was sent). */
function neverConnected(e: unknown): boolean {
  const cause = isObjectLike(e) ? e["cause"] : undefined;
  // fetch refused the URL itself (a blocked port): nothing was sent.
  if (cause instanceof Error && cause.message === "bad port") return true;
  const code = errorCode(cause);
  if (code !== undefined) return CONNECT_CODES.has(code);
  // Happy eyeballs: every address refused.
  if (isObjectLike(cause) && Array.isArray(cause["errors"]) && cause["errors"].length > 0) {
    return cause["errors"].every((inner: unknown) => CONNECT_CODES.has(errorCode(inner) ?? ""));
  }
  return false;
}

function num(v: Json | undefined): number | undefined {
  return typeof v === "number" && Number.isFinite(v) ? v : undefined;
}

function str(v: Json | undefined): string | undefined {
  return typeof v === "string" ? v : undefined;
}

/** A leasehold client. Cheap to share; it keeps no connection state of its own. */
export class Client {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  readonly #apiKey: string | undefined;
  readonly #driftBudgetMs: number | undefined;
  readonly #maxReplyBytes: number;
  readonly #fetch: typeof globalThis.fetch;

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
    this.#apiKey = o.apiKey;
    this.#driftBudgetMs = o.driftBudgetMs;
    this.#maxReplyBytes = o.maxReplyBytes ?? 64 * 1024;
    const f = o.fetch ?? globalThis.fetch;
    if (typeof f !== "function") throw new TypeError("no fetch: pass one in ClientOptions.fetch");
    this.#fetch = f;
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
   * Sends one request and reads its reply, classifying transport failures:
   * never connected: `unavailable`; sent (or possibly sent): `indeterminate`.
   */
  async #call(spec: CallSpec): Promise<Reply> {
    if (spec.signal?.aborted) throw spec.signal.reason;
    const headers: Record<string, string> = { accept: "application/json", ...spec.headers };
    if (this.#apiKey !== undefined) headers["authorization"] = `Bearer ${this.#apiKey}`;
    if (spec.attempt !== undefined) {
      headers[OWNER_TOKEN_HEADER] = spec.attempt.ownerToken;
      headers[OPERATION_ID_HEADER] = spec.attempt.operationId;
    }
    if (spec.body !== undefined) headers["content-type"] = "application/json";
    const timeout = new AbortController();
    const { controller, dispose } = linked(spec.signal, timeout.signal);
    const timer = setTimeout(() => timeout.abort(new Timeout("timeout")), Math.max(0, spec.timeoutMs));
    const why = (e: unknown): LeaseholdError => {
      if (timeout.signal.aborted) return new IndeterminateError(spec.op, "timeout", undefined, { cause: e });
      if (spec.signal?.aborted) return new IndeterminateError(spec.op, "aborted", undefined, { cause: e });
      return new IndeterminateError(spec.op, "connection_lost", undefined, { cause: e });
    };
    try {
      let response: Response;
      try {
        response = await this.#fetch(spec.url, {
          method: spec.method,
          headers,
          body: spec.body === undefined ? null : JSON.stringify(spec.body),
          signal: controller.signal,
          redirect: "manual",
        });
      } catch (e) {
        if (!controller.signal.aborted && neverConnected(e)) {
          throw new UnavailableError("connect", undefined, { cause: e });
        }
        throw why(e);
      }
      let text: string;
      try {
        text = await readLimited(response, this.#maxReplyBytes);
      } catch (e) {
        if (e instanceof TooLarge) throw new IndeterminateError(spec.op, "unexpected_reply", response.status);
        throw why(e);
      }
      let body: JsonObject | undefined;
      try {
        const parsed: unknown = JSON.parse(text);
        body = isObject(parsed) ? parsed : undefined;
      } catch {
        body = undefined;
      }
      return { status: response.status, body, headers: response.headers };
    } finally {
      clearTimeout(timer);
      dispose();
    }
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
      const headers: Record<string, string> = { accept: "text/event-stream" };
      if (this.#apiKey !== undefined) headers["authorization"] = `Bearer ${this.#apiKey}`;
      if (lastEventId !== undefined) headers["last-event-id"] = lastEventId;
      try {
        let response: Response;
        try {
          response = await this.#fetch(url, { method: "GET", headers, signal: controller.signal, redirect: "manual" });
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
          let text = "";
          try {
            text = await readLimited(response, this.#maxReplyBytes);
          } catch {
            // the status says enough
          }
          let body: JsonObject | undefined;
          try {
            const parsed: unknown = JSON.parse(text);
            body = isObject(parsed) ? parsed : undefined;
          } catch {
            body = undefined;
          }
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

function localInvalid(errors: FieldError[]): InvalidRequestError {
  return new InvalidRequestError(0, errors.map((e) => `${e.field}: ${e.message}`).join("; "), errors);
}

function outcomeOf(reply: Reply): string {
  return str(reply.body?.["outcome"]) ?? "";
}

function unexpected(reply: Reply, op: string): IndeterminateError {
  return new IndeterminateError(op, "unexpected_reply", reply.status);
}

function required<T>(v: T | undefined, reply: Reply, op: string): T {
  if (v === undefined) throw unexpected(reply, op);
  return v;
}

function retryAfterOf(reply: Reply): number | undefined {
  const ms = num(reply.body?.["retryAfterMs"]);
  if (ms !== undefined) return ms;
  const header = reply.headers.get("retry-after");
  if (header !== null && /^\d+$/.test(header.trim())) return Number(header.trim()) * 1000;
  return undefined;
}

/** The shared failures, a rejection, or (anything else) an unexpected reply. */
function failure(reply: Reply, op: string): LeaseholdError {
  const outcome = outcomeOf(reply);
  switch (outcome) {
    case "unavailable":
      return new UnavailableError("service", retryAfterOf(reply));
    case "overloaded":
      return new OverloadedError(retryAfterOf(reply));
    // A request that overran the service's own request timeout may have
    // reached the store: as ambiguous as `indeterminate`.
    case "indeterminate":
    case "request_timeout":
      return new IndeterminateError(op, "service", reply.status);
  }
  if (reply.status >= 400 && reply.status < 500) {
    const detail = str(reply.body?.["detail"]) ?? "";
    const raw = reply.body?.["errors"];
    const errors: FieldError[] = [];
    if (Array.isArray(raw)) {
      for (const e of raw) {
        if (isObject(e) && typeof e["field"] === "string" && typeof e["message"] === "string") {
          errors.push({ field: e["field"], message: e["message"] });
        }
      }
    }
    if (outcome === "invalid_request") return new InvalidRequestError(reply.status, detail, errors);
    return new RejectedError(reply.status, outcome === "" ? "<none>" : outcome, detail, errors);
  }
  return unexpected(reply, op);
}

function leaseRecord(reply: Reply, resource: Resource, op: string): LeaseRecord {
  const l = reply.body?.["lease"];
  if (!isObject(l)) throw unexpected(reply, op);
  const fencingToken = num(l["fencingToken"]);
  const ttlMs = num(l["ttlMs"]);
  const remainingMs = num(l["remainingMs"]);
  const acquiredAt = str(l["acquiredAt"]);
  const renewedAt = str(l["renewedAt"]);
  if (
    l["purpose"] !== resource.purpose ||
    l["digest"] !== resource.digest ||
    l["guarantee"] !== "fenced" ||
    fencingToken === undefined ||
    ttlMs === undefined ||
    remainingMs === undefined ||
    acquiredAt === undefined ||
    renewedAt === undefined
  ) {
    throw unexpected(reply, op);
  }
  const holder = str(l["holder"]);
  const rep = l["replication"];
  const bound = holdBound(l);
  return {
    purpose: resource.purpose,
    digest: resource.digest,
    fencingToken,
    ttlMs,
    remainingMs,
    ...(holder === undefined ? {} : { holder }),
    acquiredAt,
    renewedAt,
    guarantee: "fenced",
    ...(isObject(rep) && num(rep["acknowledged"]) !== undefined && num(rep["required"]) !== undefined
      ? { replication: { acknowledged: num(rep["acknowledged"])!, required: num(rep["required"])! } }
      : {}),
    ...bound,
  };
}

/** `maxHoldMs` and `holdEndsAt`, present only on a bounded hold. */
function holdBound(o: JsonObject): { maxHoldMs?: number; holdEndsAt?: string } {
  const maxHoldMs = num(o["maxHoldMs"]);
  const holdEndsAt = str(o["holdEndsAt"]);
  return { ...(maxHoldMs === undefined ? {} : { maxHoldMs }), ...(holdEndsAt === undefined ? {} : { holdEndsAt }) };
}

function permits(v: Json | undefined): PermitView[] | undefined {
  if (!Array.isArray(v)) return undefined;
  const out: PermitView[] = [];
  for (const p of v) {
    if (!isObject(p)) continue;
    const fencingToken = num(p["fencingToken"]);
    const remainingMs = num(p["remainingMs"]);
    const ttlMs = num(p["ttlMs"]);
    const acquiredAt = str(p["acquiredAt"]);
    const renewedAt = str(p["renewedAt"]);
    if (fencingToken === undefined || remainingMs === undefined || ttlMs === undefined || acquiredAt === undefined || renewedAt === undefined) continue;
    const holder = str(p["holder"]);
    out.push({ ...(holder === undefined ? {} : { holder }), fencingToken, remainingMs, ttlMs, acquiredAt, renewedAt, ...holdBound(p) });
  }
  return out;
}

/** An `inspected` body, checked; undefined when it is not one. */
function inspectionOf(b: JsonObject | undefined): Inspection | undefined {
  if (b === undefined || b["outcome"] !== "inspected") return undefined;
  const held = b["held"];
  const version = str(b["version"]);
  if (typeof held !== "boolean" || version === undefined) return undefined;
  const heldBy = str(b["heldBy"]);
  if (heldBy !== undefined && heldBy !== "caller" && heldBy !== "caller_other_operation" && heldBy !== "other") return undefined;
  const mode = str(b["mode"]);
  const out: { -readonly [K in keyof Inspection]: Inspection[K] } = {
    outcome: "inspected",
    held,
    version,
    holders: num(b["holders"]) ?? 0,
  };
  const copyNum = (k: "remainingMs" | "fencingToken" | "ttlMs" | "limit" | "lockDelayRemainingMs"): void => {
    const v = num(b[k]);
    if (v !== undefined) out[k] = v;
  };
  copyNum("remainingMs");
  copyNum("fencingToken");
  copyNum("ttlMs");
  copyNum("limit");
  copyNum("lockDelayRemainingMs");
  if (heldBy !== undefined) out.heldBy = heldBy as HeldBy;
  const holder = str(b["holder"]);
  if (holder !== undefined) out.holder = holder;
  const acquiredAt = str(b["acquiredAt"]);
  if (acquiredAt !== undefined) out.acquiredAt = acquiredAt;
  const renewedAt = str(b["renewedAt"]);
  if (renewedAt !== undefined) out.renewedAt = renewedAt;
  if (mode === "exclusive" || mode === "shared") out.mode = mode;
  const p = permits(b["permits"]);
  if (p !== undefined) out.permits = p;
  return out;
}

function inspection(reply: Reply, op: string): Inspection {
  if (outcomeOf(reply) !== "inspected") throw failure(reply, op);
  const i = inspectionOf(reply.body);
  if (i === undefined) throw unexpected(reply, op);
  return i;
}

function listedLease(l: Json, reply: Reply, op: string): ListedLease {
  if (!isObject(l)) throw unexpected(reply, op);
  const digest = str(l["digest"]);
  const fencingToken = num(l["fencingToken"]);
  const remainingMs = num(l["remainingMs"]);
  const ttlMs = num(l["ttlMs"]);
  const acquiredAt = str(l["acquiredAt"]);
  const renewedAt = str(l["renewedAt"]);
  const holders = num(l["holders"]);
  const limit = num(l["limit"]);
  const mode = str(l["mode"]);
  if (
    digest === undefined || !DIGEST.test(digest) || fencingToken === undefined || remainingMs === undefined ||
    ttlMs === undefined || acquiredAt === undefined || renewedAt === undefined || holders === undefined ||
    limit === undefined || (mode !== "exclusive" && mode !== "shared")
  ) {
    throw unexpected(reply, op);
  }
  const holder = str(l["holder"]);
  const p = permits(l["permits"]);
  return {
    digest,
    ...(holder === undefined ? {} : { holder }),
    fencingToken,
    remainingMs,
    ttlMs,
    acquiredAt,
    renewedAt,
    holders,
    limit,
    mode,
    ...(p === undefined ? {} : { permits: p }),
  };
}

/** The leader an inspect answer shows. */
export function leaderOf(i: Inspection): Leader {
  if (!i.held) return { holder: undefined, fencingToken: undefined };
  return { holder: i.holder, fencingToken: i.fencingToken };
}

class TooLarge extends Error {}

/** Reads a reply body as text, refusing more than `limit` bytes. */
async function readLimited(response: Response, limit: number): Promise<string> {
  if (response.body === null) return "";
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > limit) throw new TooLarge("reply too large");
      chunks.push(value);
    }
  } catch (e) {
    await reader.cancel().catch(() => undefined);
    throw e;
  }
  const all = new Uint8Array(size);
  let off = 0;
  for (const c of chunks) {
    all.set(c, off);
    off += c.byteLength;
  }
  return new TextDecoder().decode(all);
}
