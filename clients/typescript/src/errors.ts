// Errors: every call either answers one of its verb's own outcomes or throws
// one of these, each saying what the caller may assume (DESIGN §2, §8).

import type { LeaseState } from "./machine.js";
import type { LostReason } from "./types.js";

/** One invalid field of a request, as the service (or the local check) names it. */
export interface FieldError {
  readonly field: string;
  readonly message: string;
}

/** Base class of every error this package throws. `outcome` is the snake_case name. */
export class LeaseholdError extends Error {
  readonly outcome: string;
  constructor(outcome: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.outcome = outcome;
  }
  /** Whether the call may have changed a lease (only `indeterminate`). */
  get mayHaveApplied(): boolean {
    return false;
  }
}

/** Where an unavailable error was decided. */
export type UnavailableCause = "service" | "connect";

/**
 * Definitely not applied: the store was unreachable (the service said
 * `unavailable`), or no connection to the service could be made. Retry later.
 */
export class UnavailableError extends LeaseholdError {
  /** The service's retry hint, when it gave one. */
  readonly retryAfterMs: number | undefined;
  readonly reason: UnavailableCause;
  constructor(reason: UnavailableCause, retryAfterMs?: number, options?: { cause?: unknown }) {
    super(
      "unavailable",
      reason === "service"
        ? "unavailable: the store could not be reached; nothing was applied"
        : "unavailable: could not connect to the service; nothing was applied",
      options,
    );
    this.reason = reason;
    this.retryAfterMs = retryAfterMs;
  }
}

/** Shed by the service's admission limit before touching the store; nothing was applied. */
export class OverloadedError extends LeaseholdError {
  readonly retryAfterMs: number | undefined;
  constructor(retryAfterMs?: number) {
    super("overloaded", "overloaded: the service shed this request; nothing was applied");
    this.retryAfterMs = retryAfterMs;
  }
}

/** What made a call indeterminate. */
export type IndeterminateCause =
  | "service"
  | "timeout"
  | "connection_lost"
  | "aborted"
  | "unexpected_reply";

/**
 * Sent, and no certain reply: it may or may not have been applied. Inspect,
 * or retry with the *same* attempt (a retry answers `replayed_same_operation`
 * if the first one did take the lease).
 */
export class IndeterminateError extends LeaseholdError {
  /** The operation whose effect is unknown. */
  readonly operationId: string;
  readonly reason: IndeterminateCause;
  /** The HTTP status, when a reply came that did not follow the contract. */
  readonly status: number | undefined;
  constructor(
    operationId: string,
    reason: IndeterminateCause,
    status?: number,
    options?: { cause?: unknown },
  ) {
    super(
      "indeterminate",
      `indeterminate: sent with no certain reply (${reason}${status === undefined ? "" : ` ${status}`}); operation ${operationId} may or may not have been applied`,
      options,
    );
    this.operationId = operationId;
    this.reason = reason;
    this.status = status;
  }
  override get mayHaveApplied(): boolean {
    return true;
  }
}

/**
 * The service refused the request as sent (a 4xx other than a lease
 * outcome: `unauthorized`, `forbidden`, `payload_too_large`, ...): nothing was
 * applied, and sending it again unchanged will not help.
 */
export class RejectedError extends LeaseholdError {
  /** HTTP status; 0 when refused by the client's own check before sending. */
  readonly status: number;
  readonly detail: string;
  readonly errors: readonly FieldError[];
  constructor(status: number, outcome: string, detail: string, errors: readonly FieldError[] = []) {
    super(outcome, `rejected: ${status === 0 ? "(local check)" : status} ${outcome}: ${detail}`);
    this.status = status;
    this.detail = detail;
    this.errors = errors;
  }
}

/** `invalid_request`: `errors` names each invalid field. */
export class InvalidRequestError extends RejectedError {
  constructor(status: number, detail: string, errors: readonly FieldError[]) {
    super(status, "invalid_request", detail, errors);
  }
}

/** Refused locally, without a request, because the lease handle is terminal. */
export class RefusedLocallyError extends LeaseholdError {
  readonly state: LeaseState;
  constructor(state: LeaseState) {
    super("refused_locally", `refused locally: the lease handle is ${state.toUpperCase()}`);
    this.state = state;
  }
}

/** Why a lease stopped protecting the work. */
export type LossReason =
  /** The service said the lease is gone (renew `lost`, release `not_owner`). */
  | "lost"
  /** A renew or release got no certain reply: the handle is UNKNOWN. */
  | "unknown"
  /** Local validity ran out (or was about to, within the margin) and no renew had extended it. */
  | "expired"
  /** Released by this process. */
  | "released";

/**
 * Thrown by `Lease.check()` and used as the `reason` of `Lease.signal`: the
 * lease no longer protects the work. Stop, and stop presenting its fencing token.
 */
export class LeaseLost extends LeaseholdError {
  readonly state: LeaseState;
  readonly reason: LossReason;
  readonly fencingToken: number;
  /**
   * The service's `reason` when a renew answered `lost`: `absent`, `not_owner`,
   * `revoked` (an operator broke the lease) or `max_hold` (its bounded hold
   * ran out). Also `max_hold` with `reason: "expired"` when the handle
   * stopped at its bounded hold's end before a renew had to say so.
   * Undefined otherwise.
   */
  readonly serverReason: LostReason | undefined;
  constructor(state: LeaseState, reason: LossReason, fencingToken: number, serverReason?: LostReason) {
    const why = serverReason === undefined ? "" : `, ${serverReason}`;
    super("lease_lost", `the lease (fencing token ${fencingToken}) no longer protects the work: ${reason}${why} (${state.toUpperCase()})`);
    this.state = state;
    this.reason = reason;
    this.fencingToken = fencingToken;
    this.serverReason = serverReason;
  }
}

/**
 * `lock()` did not get the lease: someone else holds it (`contended`, after
 * the server-side wait), this owner token holds it for another operation
 * (`owner_operation_conflict`), or its holders agreed on another limit
 * (`limit_mismatch`). Nothing is held.
 */
export class NotAcquiredError extends LeaseholdError {
  readonly retryAfterMs: number | undefined;
  /** `lock_delay` or `queued`, for `contended`. */
  readonly reason: string | undefined;
  /** For `limit_mismatch`: the limit the holders agreed on. */
  readonly limit: number | undefined;
  constructor(outcome: string, retryAfterMs?: number, reason?: string, limit?: number) {
    super(outcome, `not acquired: ${outcome}${reason ? ` (${reason})` : ""}${retryAfterMs !== undefined ? `, retry after ${retryAfterMs} ms` : ""}`);
    this.retryAfterMs = retryAfterMs;
    this.reason = reason;
    this.limit = limit;
  }
}
