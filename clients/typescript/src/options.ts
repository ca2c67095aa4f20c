// The options of a Client and of each of its verbs, and the acquire's
// result (the shapes a caller writes and reads; no behaviour).

import type { LeaseLost, LeaseholdError } from "./errors.js";
import type { Lease, LeaseOptions } from "./lease.js";
import type { Attempt, CallOptions, ContendedReason, LeaseRecord, Mode } from "./types.js";

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
