// Lease: one held lease, its fencing token, its local validity counted from
// the send, the closed state machine of HandleCore around the HTTP calls,
// and the watchdog that renews it and aborts its AbortSignal when it stops
// protecting the work (mirrors src/client/handle.rs and watchdog.rs).

import "./dispose.js";
import {
  IndeterminateError,
  LeaseLost,
  RefusedLocallyError,
  type LeaseholdError,
  type LossReason,
} from "./errors.js";
import { now, pause, unref } from "./internal.js";
import { HandleCore, type LeaseState, type ReleaseReply, type RenewReply } from "./machine.js";
import type { Attempt, CallOptions, LeaseRecord, LostReason, ReleaseResult, RenewResult, Resource } from "./types.js";

/**
 * The calls a `Lease` makes, and all it knows of the client that made it
 * (`Client` is one; a test may pass its own).
 */
export interface LeaseCalls {
  /** The default timeout of one call. */
  readonly timeoutMs: number;
  /** The drift budget of a lease of `ttlMs`, unless its options set one. */
  driftBudgetFor(ttlMs: number): number;
  renew(resource: Resource, attempt: Attempt, options: CallOptions & { readonly ttlMs: number; readonly holder?: string }): Promise<RenewResult>;
  release(resource: Resource, attempt: Attempt, options?: CallOptions): Promise<ReleaseResult>;
}

/** The shortest pause between two renew attempts. */
const MIN_PAUSE_MS = 5;

/** Options of a lease handle. */
export interface LeaseOptions {
  /** The drift budget; default the client's (max(10 ms, 1 % of the TTL)). */
  readonly driftBudgetMs?: number;
  /**
   * How long before local validity ends the signal is aborted (and the
   * handle given up as LOST) when no renew extended it meanwhile: time for
   * the work to stop. Default TTL / 10, at most TTL / 2 (the TTL granted:
   * a `maxHoldMs` below the TTL asked is granted as the TTL).
   */
  readonly marginMs?: number;
}

/** Options of `Lease.keepAlive`. */
export interface KeepAliveOptions {
  /** Called when a renew failed without ending the lease (unavailable, overloaded, rejected). */
  readonly onRenewFailed?: (error: LeaseholdError) => void;
  /** Called after every successful background renew. */
  readonly onRenewed?: (result: Extract<RenewResult, { outcome: "renewed" }>) => void;
}

/**
 * A lease this process holds, from `acquired` or `replayed_same_operation`.
 *
 * - `fencingToken`: present it to the protected resource with every write.
 * - Local validity: `min(ttl, remainingMs) - drift` from the instant the
 *   request was *sent*; a successful renew restarts it from the renew's send.
 * - States `active`, `lost`, `released`, `unknown` (the last three terminal);
 *   a terminal handle refuses `renew()` locally.
 * - `signal`: aborted (once) when the lease stops protecting the work: lost,
 *   unknown, released, or `marginMs` before local validity ends with no renew
 *   meanwhile. Hand it to fetch, database drivers, timers.
 * - `keepAlive()` starts the background renewal (`lock` does it for you).
 */
export class Lease implements AsyncDisposable {
  readonly resource: Resource;
  /** The lease as the acquire answered it. */
  readonly record: LeaseRecord;
  /** The acquire outcome that granted it: `replayed_same_operation` after a retry that found the first send had applied. */
  readonly acquiredBy: "acquired" | "replayed_same_operation";
  readonly #client: LeaseCalls;
  readonly #attempt: Attempt;
  readonly #core: HandleCore;
  readonly #marginMs: number;
  readonly #abort = new AbortController();
  readonly #onLost: ((error: LeaseLost) => void)[] = [];
  #timer: ReturnType<typeof setTimeout> | undefined;
  #keepAlive: AbortController | undefined;
  #lastRecord: LeaseRecord;
  #serverReason: LostReason | undefined;

  /** @internal Made by `Client.acquire`. */
  constructor(
    client: LeaseCalls,
    resource: Resource,
    attempt: Attempt,
    record: LeaseRecord,
    sentAt: number,
    ttlMs: number,
    options: LeaseOptions = {},
    acquiredBy: "acquired" | "replayed_same_operation" = "acquired",
  ) {
    this.acquiredBy = acquiredBy;
    this.#client = client;
    this.resource = resource;
    this.#attempt = attempt;
    this.record = record;
    this.#lastRecord = record;
    const drift = options.driftBudgetMs ?? client.driftBudgetFor(ttlMs);
    this.#core = new HandleCore(sentAt, ttlMs, record.remainingMs, drift);
    if (record.maxHoldMs !== undefined) {
      // A bounded hold. From an acquire's send its end is known; a replay's is
      // not (the first acquire was sent earlier) until a renew is cut short.
      if (acquiredBy === "acquired") this.#core.limitHold(sentAt + record.maxHoldMs - drift);
      if (record.ttlMs < ttlMs) this.#core.reachHoldEnd(); // granted less than asked: the hold ends with it
    }
    // Of the TTL granted: a bounded hold shorter than the TTL asked is granted as the TTL.
    const grantedMs = Math.min(ttlMs, record.ttlMs > 0 ? record.ttlMs : ttlMs);
    this.#marginMs = Math.max(0, Math.min(options.marginMs ?? grantedMs / 10, grantedMs / 2));
    this.#settle();
  }

  /** The fencing token to present at the effect point. */
  get fencingToken(): number {
    return this.record.fencingToken;
  }

  /** The operation this lease belongs to. */
  get operationId(): string {
    return this.#attempt.operationId;
  }

  /** The attempt (its owner token is a bearer secret: never log it). */
  get attempt(): Attempt {
    return this.#attempt;
  }

  /** The TTL asked for on acquire and every renew. */
  get ttlMs(): number {
    return this.#core.ttlMs;
  }

  get driftBudgetMs(): number {
    return this.#core.driftBudgetMs;
  }

  get marginMs(): number {
    return this.#marginMs;
  }

  /** The latest record the service sent (acquire or the last renew). */
  get lastRecord(): LeaseRecord {
    return this.#lastRecord;
  }

  /** The state now (an ACTIVE handle past its validity becomes `lost` here). */
  get state(): LeaseState {
    const state = this.#core.observe(now());
    this.#settle();
    return state;
  }

  /** Whether the handle is ACTIVE and its signal not aborted. */
  get isValid(): boolean {
    return this.state === "active" && !this.#abort.signal.aborted;
  }

  /** The end of local validity, in `performance.now()` milliseconds. */
  get validUntil(): number {
    return this.#core.validUntil;
  }

  /** When the signal is aborted unless a renew extends the lease: `validUntil - marginMs`. */
  get stopBy(): number {
    return this.#core.validUntil - this.#marginMs;
  }

  /** Local validity left now, in ms; zero unless ACTIVE. */
  get validForMs(): number {
    const left = this.#core.validFor(now());
    this.#settle();
    return left;
  }

  /**
   * For a bounded hold (`maxHoldMs`), the `performance.now()` instant past
   * which no renew extends local validity (the hold's end less the drift
   * budget), once known: from the acquire, or from the first renew the
   * service cut short.
   */
  get holdUntil(): number | undefined {
    return this.#core.holdUntil;
  }

  /** Whether local validity already reaches the bounded hold's end: renewals can no longer extend it. */
  get atHoldEnd(): boolean {
    return this.#core.atHoldEnd;
  }

  /** Whether it became LOST because local validity ran out (not because the service said so). */
  get expiredLocally(): boolean {
    return this.#core.expiredLocally;
  }

  /** Aborted once, with a `LeaseLost` reason, when the lease stops protecting the work. */
  get signal(): AbortSignal {
    return this.#abort.signal;
  }

  /** Throws `LeaseLost` unless the lease still protects the work. Call it between steps. */
  check(): void {
    void this.state;
    if (this.#abort.signal.aborted) throw this.#abort.signal.reason;
  }

  /**
   * Calls `callback` once when the lease is lost, unknown or expiring (not
   * when this process releases it). Called at once if that already happened.
   */
  onLost(callback: (error: LeaseLost) => void): void {
    const reason: unknown = this.#abort.signal.reason;
    if (this.#abort.signal.aborted) {
      if (reason instanceof LeaseLost && reason.reason !== "released") callback(reason);
      return;
    }
    this.#onLost.push(callback);
  }

  /**
   * Renews with the handle's TTL (and optionally a new public holder label).
   * Throws `RefusedLocallyError` on a terminal handle. `renewed` restarts
   * local validity from this call's send; `lost` makes the handle `lost`; an
   * indeterminate renew makes it `unknown`; `unavailable`/`overloaded`
   * change nothing.
   */
  async renew(options: CallOptions & { readonly holder?: string } = {}): Promise<RenewResult> {
    const refused = this.#core.beginRenew(now());
    if (refused !== null) {
      this.#settle();
      throw new RefusedLocallyError(refused);
    }
    const sentAt = now();
    let reply: RenewReply;
    try {
      const result = await this.#client.renew(this.resource, this.#attempt, { ...options, ttlMs: this.#core.ttlMs });
      if (result.outcome === "renewed") {
        // Validity from the answered remainingMs; a grant shorter than asked
        // (the hold's end) also says no later renew will extend it.
        const capped = result.lease.maxHoldMs !== undefined && result.lease.ttlMs < this.#core.ttlMs;
        reply = { kind: "renewed", remainingMs: result.lease.remainingMs, capped };
        this.#lastRecord = result.lease;
      } else {
        reply = { kind: "lost" };
        this.#serverReason = result.reason;
      }
      this.#core.finishRenew(now(), sentAt, reply);
      this.#settle();
      return result;
    } catch (e) {
      reply = e instanceof IndeterminateError ? { kind: "indeterminate" } : { kind: "not_applied" };
      this.#core.finishRenew(now(), sentAt, reply);
      this.#settle();
      throw e;
    }
  }

  /**
   * Releases. `released`/`already_absent` → `released`, `not_owner` → `lost`,
   * indeterminate → `unknown`; the answer is returned either way. Refused
   * locally when already released; a `lost` or `unknown` handle still sends
   * it (clean-up) and stays as it is. Stops the background renewal.
   */
  async release(options: CallOptions = {}): Promise<ReleaseResult> {
    this.#stopKeepAlive();
    const refused = this.#core.beginRelease(now());
    if (refused !== null) throw new RefusedLocallyError(refused);
    let reply: ReleaseReply;
    try {
      const result = await this.#client.release(this.resource, this.#attempt, options);
      reply = result.outcome;
      this.#core.finishRelease(now(), reply);
      this.#settle();
      return result;
    } catch (e) {
      reply = e instanceof IndeterminateError ? "indeterminate" : "not_applied";
      this.#core.finishRelease(now(), reply);
      this.#settle();
      throw e;
    }
  }

  /**
   * Starts renewing in the background at about a third of the validity left
   * (jittered 80-100 %, so a lease whose renews fail is retried ever more
   * often until it runs out). At a bounded hold's end, where renewals no
   * longer extend it (they still hear a break), at a third of the TTL
   * instead, until the signal aborts with `serverReason: "max_hold"`.
   * Renewal stops when the lease ends or is released. Calling it again does
   * nothing.
   */
  keepAlive(options: KeepAliveOptions = {}): void {
    if (this.#keepAlive !== undefined || this.state !== "active") return;
    const stop = new AbortController();
    this.#keepAlive = stop;
    void this.#renewLoop(stop.signal, options);
  }

  /** Stops the background renewal; the handle is untouched. */
  stopKeepAlive(): void {
    this.#stopKeepAlive();
  }

  /** Releases unless already released; errors are swallowed (the lease then expires by itself). */
  async [Symbol.asyncDispose](): Promise<void> {
    this.#stopKeepAlive();
    if (this.#core.beginRelease(now()) !== null) return;
    try {
      await this.release();
    } catch {
      // Not applied or unknown: the lease expires at its TTL.
    }
  }

  #stopKeepAlive(): void {
    this.#keepAlive?.abort();
  }

  async #renewLoop(stop: AbortSignal, options: KeepAliveOptions): Promise<void> {
    while (!stop.aborted && this.state === "active" && !this.#abort.signal.aborted) {
      const jitter = 0.8 + 0.2 * Math.random();
      let wait = Math.max(MIN_PAUSE_MS, ((this.#core.validUntil - now()) / 3) * jitter);
      if (this.#core.atHoldEnd) {
        // Past the margin the margin timer aborts the signal, which ends the pause.
        wait = Math.min((this.#core.ttlMs / 3) * jitter, this.stopBy - now() + 2 * MIN_PAUSE_MS);
      }
      if (!(await pause(wait, stop, this.#abort.signal))) break;
      if (this.state !== "active") break;
      // The request may take until the margin, no longer. It is not tied to
      // `stop`: a release racing with it must not turn into an abandoned
      // (indeterminate) renew; its late answer cannot revive a released handle.
      const deadline = this.stopBy - now();
      if (deadline <= 0) continue;
      try {
        const result = await this.renew({ timeoutMs: Math.min(this.#client.timeoutMs, deadline) });
        if (result.outcome === "renewed") options.onRenewed?.(result);
      } catch (e) {
        if (stop.aborted) break;
        // Indeterminate: the handle is UNKNOWN and the loop ends. Refused: terminal.
        if (e instanceof IndeterminateError || e instanceof RefusedLocallyError) continue;
        if (e instanceof Error && "outcome" in e) options.onRenewFailed?.(e as LeaseholdError);
      }
    }
    this.#keepAlive = undefined;
  }

  /** Publishes the state: aborts the signal on a terminal state, (re)arms the margin timer. */
  #settle(): void {
    if (this.#abort.signal.aborted) return;
    const t = now();
    const state = this.#core.observe(t);
    if (state === "active" && t >= this.stopBy) {
      this.#core.expireNow(t);
      this.#end("lost", "expired");
      return;
    }
    if (state !== "active") {
      const reason: LossReason =
        state === "released" ? "released" : state === "unknown" ? "unknown" : this.#core.expiredLocally ? "expired" : "lost";
      this.#end(state, reason);
      return;
    }
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#settle();
    }, Math.max(0, this.stopBy - t) + 1);
    unref(this.#timer);
  }

  #end(state: LeaseState, reason: LossReason): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#stopKeepAlive();
    const serverReason =
      reason === "lost" ? this.#serverReason : reason === "expired" && this.#core.atHoldEnd ? "max_hold" : undefined;
    const error = new LeaseLost(state, reason, this.record.fencingToken, serverReason);
    this.#abort.abort(error);
    if (reason !== "released") {
      for (const callback of this.#onLost.splice(0)) {
        try {
          callback(error);
        } catch {
          // A callback's failure must not stop the others.
        }
      }
    }
  }
}
