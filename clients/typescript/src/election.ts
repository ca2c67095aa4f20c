// Election: leader election on one lease, after client-go's leaderelection
// and etcd's concurrency.Election (mirrors src/client/election.rs).
//
// | election | lease verb |
// | campaign | acquire with waitMs and holder = the candidate's label, again and again |
// | leader   | inspect's holder (and fencingToken) |
// | observe  | inspect long-poll, ?changedSince=<version>&waitMs=N |
// | proclaim | renew with a new holder (the fencing token stays) |
// | resign   | release |
//
// Safety comes from the lease, not from the callbacks: the term's signal
// is aborted before the lease's local validity ends, and every effect the
// leader has should present the term's fencing token to a target that
// rejects older tokens.

import type { Client } from "./client.js";
import {
  IndeterminateError,
  LeaseholdError,
  LeaseLost,
  OverloadedError,
  RejectedError,
  UnavailableError,
} from "./errors.js";
import { linked, now, pause } from "./internal.js";
import type { Lease } from "./lease.js";
import type { Attempt, Leader, Resource } from "./types.js";

/** The pause before retrying an acquire whose answer was lost, with the same attempt. */
const SAME_ATTEMPT_PAUSE_MS = 50;

/** Why a term of leadership ended. */
export type StopReason =
  /** The campaign was stopped or `resign()` called: the lease was released. */
  | "resigned"
  /** The service said the lease is gone (expired, or taken over). */
  | "lost"
  /** A renew got no certain reply: the lease is no longer ours to use. */
  | "unknown"
  /** Local validity was about to run out (within the leading margin) with no renew. */
  | "expiring";

/** One term of leadership. */
export interface Leadership {
  /** Present it with every effect of this term. */
  readonly fencingToken: number;
  /** The label this term was won with. */
  readonly holder: string;
  /** Aborted when this term ends, always before the lease's local validity runs out. */
  readonly signal: AbortSignal;
  /** The lease of this term (renewed in the background). */
  readonly lease: Lease;
  /** When the acquire's answer arrived (performance.now()). */
  readonly startedAt: number;
}

export interface StoppedLeading {
  readonly fencingToken: number;
  readonly reason: StopReason;
}

export interface ElectionOptions {
  /** This candidate's public label (a pod name, host:port). */
  readonly holder: string;
  /** The lease's TTL: how long the others wait for a leader that dies without resigning. Default 15 000. */
  readonly ttlMs?: number;
  /** Server-side wait of each campaign round and observe long-poll (at most the service's max wait). Default 10 000. */
  readonly waitMs?: number;
  /** The pause after a failure without a retry hint. Default 1000. */
  readonly retryPeriodMs?: number;
  /** How long before local validity ends the term's signal fires if no renew extended it. Default TTL / 10 (at most TTL / 2). */
  readonly leadingMarginMs?: number;
  /** Consul's lock-delay: after a leader's lease *expires*, nobody leads for this long. Default 0. */
  readonly lockDelayMs?: number;
  /**
   * Bounds each term's lease (`maxHoldMs` of acquire): the term's signal
   * aborts `leadingMarginMs` before the hold's end, and the candidate
   * campaigns again. Default: unbounded.
   */
  readonly maxHoldMs?: number;
  /** Whether the candidate also follows the leader and calls `onNewLeader`. Default true. */
  readonly follow?: boolean;
  /** This candidate leads until `term.signal` aborts. */
  readonly onStartedLeading?: (term: Leadership) => unknown;
  /** This candidate's term ended (after its signal aborted and, on resign, after the release). */
  readonly onStoppedLeading?: (stopped: StoppedLeading) => unknown;
  /** The leader changed (another holder, another term, or nobody). */
  readonly onNewLeader?: (leader: Leader) => unknown;
}

/** `proclaim()` when not leading, or the lease turned out to be gone. */
export class NotLeaderError extends LeaseholdError {
  constructor() {
    super("not_leader", "not the leader");
  }
}

/** `campaign()` while a campaign runs on this election. */
export class AlreadyCampaigningError extends LeaseholdError {
  constructor() {
    super("already_campaigning", "a campaign is already running on this election");
  }
}

interface Running {
  readonly stop: AbortController;
  readonly done: Promise<void>;
}

interface Term {
  readonly attempt: Attempt;
  readonly lease: Lease;
  readonly signal: AbortSignal;
}

function settle(value: unknown): void {
  if (value instanceof Promise) value.catch(() => undefined);
}

/**
 * A candidate for leadership of one resource. `campaign()` runs until
 * stopped (its signal, or `resign()`): it campaigns, leads while it holds the
 * lease (renewed in the background), and campaigns again after a term that
 * ended by itself.
 */
export class Election {
  readonly resource: Resource;
  readonly #client: Client;
  readonly #ttlMs: number;
  readonly #waitMs: number;
  readonly #retryPeriodMs: number;
  readonly #marginMs: number;
  readonly #lockDelayMs: number;
  readonly #maxHoldMs: number | undefined;
  readonly #follow: boolean;
  readonly #options: ElectionOptions;
  #holder: string;
  #running: Running | undefined;
  #term: Term | undefined;
  #rounds = 0;

  constructor(client: Client, resource: Resource, options: ElectionOptions) {
    this.#client = client;
    this.resource = resource;
    this.#options = options;
    this.#holder = options.holder;
    this.#ttlMs = options.ttlMs ?? 15_000;
    this.#waitMs = options.waitMs ?? 10_000;
    this.#retryPeriodMs = options.retryPeriodMs ?? 1000;
    this.#marginMs = Math.min(options.leadingMarginMs ?? this.#ttlMs / 10, this.#ttlMs / 2);
    this.#lockDelayMs = options.lockDelayMs ?? 0;
    this.#maxHoldMs = options.maxHoldMs;
    this.#follow = options.follow ?? true;
  }

  /** The label this candidate campaigns with now. */
  get holder(): string {
    return this.#holder;
  }

  /** Whether this candidate leads now. */
  get isLeader(): boolean {
    return this.#term !== undefined && !this.#term.signal.aborted;
  }

  /** Whether a campaign runs. */
  get isCampaigning(): boolean {
    return this.#running !== undefined;
  }

  /** Who leads now, by one plain inspect. */
  async leader(): Promise<Leader> {
    const i = await this.#client.inspect(this.resource);
    return i.held ? { holder: i.holder, fencingToken: i.fencingToken } : { holder: undefined, fencingToken: undefined };
  }

  /** Follows the leader (the inspect long-poll) without campaigning. */
  observe(signal?: AbortSignal): AsyncGenerator<Leader, void, undefined> {
    return this.#client.observe(this.resource, {
      waitMs: this.#waitMs,
      retryPeriodMs: this.#retryPeriodMs,
      ...(signal === undefined ? {} : { signal }),
    });
  }

  /**
   * Runs the election until `signal` aborts or `resign()` is called, then
   * releases the lease (also one whose acquire was in flight) and resolves.
   * Rejects only when the service refuses the requests as sent (TTL or wait
   * out of its bounds, authentication), or when already campaigning.
   */
  campaign(signal?: AbortSignal): Promise<void> {
    if (this.#running !== undefined) return Promise.reject(new AlreadyCampaigningError());
    const { controller: stop, dispose } = linked(signal);
    const done = (async () => {
      try {
        const lead = (async () => {
          try {
            await this.#leadLoop(stop.signal);
          } finally {
            stop.abort();
          }
        })();
        const follow = this.#follow ? this.#followLoop(stop.signal) : Promise.resolve();
        const [led] = await Promise.allSettled([lead, follow]);
        if (led.status === "rejected") throw led.reason;
      } finally {
        this.#term = undefined;
        this.#running = undefined;
        dispose();
      }
    })();
    this.#running = { stop, done };
    return done;
  }

  /**
   * Ends a running campaign: the term's signal aborts, the lease is
   * released, `onStoppedLeading` is called, and the campaign resolves.
   * Resolves once all that is done. Without a campaign, at once.
   */
  async resign(): Promise<void> {
    const running = this.#running;
    if (running === undefined) return;
    running.stop.abort();
    try {
      await running.done;
    } catch {
      // The campaign's own caller sees its error.
    }
  }

  /**
   * Changes the label: renews the lease with the new holder (the fencing
   * token stays; followers see a new leader). Later campaigns use it too.
   * `NotLeaderError` when not leading or the lease turned out to be gone.
   */
  async proclaim(label: string): Promise<void> {
    const term = this.#term;
    if (term === undefined || term.signal.aborted) throw new NotLeaderError();
    const result = await term.lease.renew({ holder: label });
    if (result.outcome !== "renewed") throw new NotLeaderError();
    this.#holder = label;
  }

  async #followLoop(stop: AbortSignal): Promise<void> {
    try {
      for await (const leader of this.observe(stop)) {
        try {
          settle(this.#options.onNewLeader?.(leader));
        } catch {
          // The caller's callback failing does not stop the election.
        }
      }
    } catch {
      // Rejected long-polls end the following, not the campaign.
    }
  }

  async #newAttempt(stop: AbortSignal): Promise<Attempt | undefined> {
    const n = this.#rounds++;
    const op = `campaign-${Date.now().toString(36)}-${n}-${Math.floor(Math.random() * 0x7fffffff).toString(36)}`;
    for (;;) {
      try {
        return await this.#client.attempt(op, { signal: stop });
      } catch (e) {
        if (stop.aborted) return undefined;
        if (e instanceof RejectedError) throw e;
        const hint = e instanceof UnavailableError || e instanceof OverloadedError ? e.retryAfterMs : undefined;
        if (!(await pause(hint ?? this.#retryPeriodMs, stop))) return undefined;
      }
    }
  }

  async #leadLoop(stop: AbortSignal): Promise<void> {
    for (;;) {
      const won = await this.#win(stop);
      if (won === undefined) return;
      if ((await this.#lead(stop, won.attempt, won.lease)) === "resigned") return;
    }
  }

  /** Releases with `attempt` in case an acquire took the lease unseen. */
  async #cleanUp(attempt: Attempt): Promise<void> {
    try {
      await this.#client.release(this.resource, attempt);
    } catch {
      // It expires by itself.
    }
  }

  /** Acquires until it holds the lease, or `stop` (after releasing what an acquire in flight may have taken). */
  async #win(stop: AbortSignal): Promise<{ attempt: Attempt; lease: Lease } | undefined> {
    let attempt = await this.#newAttempt(stop);
    if (attempt === undefined) return undefined;
    let mayHold = false;
    for (;;) {
      let wait: number;
      try {
        const result = await this.#client.acquire(this.resource, attempt, {
          ttlMs: this.#ttlMs,
          waitMs: this.#waitMs,
          holder: this.#holder,
          ...(this.#lockDelayMs > 0 ? { lockDelayMs: this.#lockDelayMs } : {}),
          ...(this.#maxHoldMs === undefined ? {} : { maxHoldMs: this.#maxHoldMs }),
          lease: { marginMs: this.#marginMs },
          signal: stop,
        });
        switch (result.outcome) {
          case "acquired":
          case "replayed_same_operation":
            if (stop.aborted) {
              await result.handle.release().catch(() => undefined);
              return undefined;
            }
            return { attempt, lease: result.handle };
          case "contended":
            mayHold = false;
            // The service waited (most of) our wait: ask again at once;
            // it answered early: pause for the holder's hint.
            wait =
              this.#waitMs > 0 && (result.waitedMs ?? 0) >= this.#waitMs / 2
                ? 0
                : Math.min(result.retryAfterMs, this.#retryPeriodMs);
            break;
          case "limit_mismatch":
            mayHold = false;
            wait = this.#retryPeriodMs;
            break;
          case "owner_operation_conflict": {
            // Cannot happen with a fresh token per term; a new attempt gets out of it.
            const fresh = await this.#newAttempt(stop);
            if (fresh === undefined) return undefined;
            attempt = fresh;
            mayHold = false;
            wait = this.#retryPeriodMs;
            break;
          }
        }
      } catch (e) {
        if (stop.aborted) {
          // The acquire in flight was abandoned; it may have acquired just before.
          await this.#cleanUp(attempt);
          return undefined;
        }
        if (e instanceof IndeterminateError) {
          mayHold = true;
          wait = Math.min(SAME_ATTEMPT_PAUSE_MS, this.#retryPeriodMs);
        } else if (e instanceof UnavailableError || e instanceof OverloadedError) {
          wait = e.retryAfterMs ?? this.#retryPeriodMs;
        } else {
          if (mayHold) await this.#cleanUp(attempt);
          throw e;
        }
      }
      if (!(await pause(wait, stop))) {
        if (mayHold) await this.#cleanUp(attempt);
        return undefined;
      }
    }
  }

  /** One term: announce it, keep the lease until it ends, release when resigning (or when it may still be ours). */
  async #lead(stop: AbortSignal, attempt: Attempt, lease: Lease): Promise<StopReason> {
    if (lease.signal.aborted || stop.aborted) {
      // Its validity ran out before it could be kept (a very slow answer),
      // or the campaign stopped meanwhile: not a term at all. Give it back.
      await lease.release().catch(() => undefined);
      return stop.aborted ? "resigned" : "expiring";
    }
    const { controller: term, dispose } = linked(stop, lease.signal);
    this.#term = { attempt, lease, signal: term.signal };
    lease.keepAlive();
    const leadership: Leadership = {
      fencingToken: lease.fencingToken,
      holder: lease.record.holder ?? this.#holder,
      signal: term.signal,
      lease,
      startedAt: now(),
    };
    try {
      settle(this.#options.onStartedLeading?.(leadership));
    } catch {
      // The caller's callback failing does not end the term; its signal does.
    }
    if (!term.signal.aborted) {
      await new Promise<void>((resolve) => term.signal.addEventListener("abort", () => resolve(), { once: true }));
    }
    dispose();
    let reason: StopReason;
    const lost: unknown = lease.signal.reason;
    if (stop.aborted && !(lease.signal.aborted && lost instanceof LeaseLost && lost.reason !== "released")) {
      reason = "resigned";
    } else if (lost instanceof LeaseLost) {
      reason = lost.reason === "unknown" ? "unknown" : lost.reason === "expired" ? "expiring" : "lost";
    } else {
      reason = "lost";
    }
    lease.stopKeepAlive();
    // Resigning gives the lease back; a term that ended with the lease
    // possibly still ours (expiring, unknown) gives it back too, so the
    // next leader need not wait for the expiry.
    if (reason !== "lost") {
      await lease.release().catch(() => undefined);
    }
    this.#term = undefined;
    try {
      settle(this.#options.onStoppedLeading?.({ fencingToken: lease.fencingToken, reason }));
    } catch {
      // ignore
    }
    return reason;
  }
}
