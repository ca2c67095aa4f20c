// The lease handle's state machine without I/O (DESIGN §3.6, mirroring
// src/client/machine.rs): what a handle may do in each state and where each
// reply takes it. Instants are monotonic milliseconds (performance.now()).
//
// | state / input | renew asked | renewed | lost | indeterminate | not applied | release asked | released / already_absent | not_owner | indeterminate | not applied | validity runs out |
// | ACTIVE   | sent    | ACTIVE, validity from the renew's send | LOST | UNKNOWN | ACTIVE | sent  | RELEASED | LOST | UNKNOWN | ACTIVE | LOST |
// | LOST     | refused | LOST     | LOST     | LOST     | LOST     | sent* | LOST     | LOST | LOST | LOST | - |
// | UNKNOWN  | refused | UNKNOWN  | UNKNOWN  | UNKNOWN  | UNKNOWN  | sent* | UNKNOWN  | UNKNOWN | UNKNOWN | UNKNOWN | - |
// | RELEASED | refused | RELEASED | RELEASED | RELEASED | RELEASED | refused | RELEASED | RELEASED | RELEASED | RELEASED | - |
//
// * releasing a LOST or UNKNOWN handle is allowed as clean-up; the handle stays terminal.
// A bounded hold (`maxHoldMs`) puts a ceiling on validity, `holdUntil`:
// known from the acquire's send + `maxHoldMs` - drift, or from a grant
// shorter than asked (the service cuts a renew, or an acquire, at the hold's
// end, so validity can go no further). `atHoldEnd`: no renew extends it now.
// Every input first observes the clock: an ACTIVE handle past its validity
// is stored as LOST before the input is applied, so a late `renewed` does
// not revive it.

/** Where a lease handle stands. `lost`, `released` and `unknown` are terminal. */
export type LeaseState = "active" | "lost" | "released" | "unknown";

/** What a renew reply means for the handle. */
export type RenewReply =
  /** `capped`: granted less than asked, at the bounded hold's end. */
  | { readonly kind: "renewed"; readonly remainingMs: number; readonly capped?: boolean }
  | { readonly kind: "lost" }
  | { readonly kind: "indeterminate" }
  | { readonly kind: "not_applied" };

/** What a release reply means for the handle. */
export type ReleaseReply = "released" | "already_absent" | "not_owner" | "indeterminate" | "not_applied";

/** The state machine of one lease handle, driven by explicit instants. */
export class HandleCore {
  #state: LeaseState = "active";
  #validUntil: number;
  #expiredLocally = false;
  #holdUntil: number | undefined;
  readonly ttlMs: number;
  readonly driftBudgetMs: number;

  /**
   * A handle for a lease granted by a request sent at `sentAt` asking for
   * `ttlMs`, the server reporting `remainingMs`: locally valid until
   * `sentAt + min(ttlMs, remainingMs) - driftBudgetMs`.
   */
  constructor(sentAt: number, ttlMs: number, remainingMs: number, driftBudgetMs: number, holdUntil?: number) {
    this.ttlMs = ttlMs;
    this.driftBudgetMs = driftBudgetMs;
    this.#validUntil = HandleCore.validityEnd(sentAt, ttlMs, remainingMs, driftBudgetMs);
    if (holdUntil !== undefined) this.limitHold(holdUntil);
  }

  /** Validity never goes past this instant (a bounded hold's end); undefined: unbounded or not known yet. */
  get holdUntil(): number | undefined {
    return this.#holdUntil;
  }

  /** Whether validity reaches the bounded hold's end: no renew can extend it further. */
  get atHoldEnd(): boolean {
    return this.#holdUntil !== undefined && this.#validUntil >= this.#holdUntil;
  }

  /** The hold ends at `until` at the latest: validity is cut to it. */
  limitHold(until: number): void {
    if (this.#holdUntil === undefined || until < this.#holdUntil) this.#holdUntil = until;
    this.#validUntil = Math.min(this.#validUntil, this.#holdUntil);
  }

  /** A grant shorter than asked: the hold ends where validity ends now. */
  reachHoldEnd(): void {
    this.limitHold(this.#validUntil);
  }

  /** `sentAt + min(ttl, remaining) - drift`, never before `sentAt`. */
  static validityEnd(sentAt: number, ttlMs: number, remainingMs: number, driftBudgetMs: number): number {
    return sentAt + Math.max(0, Math.min(ttlMs, remainingMs) - driftBudgetMs);
  }

  /** The end of local validity (meaningful while ACTIVE). */
  get validUntil(): number {
    return this.#validUntil;
  }

  /** Whether the handle became LOST because its local validity ran out. */
  get expiredLocally(): boolean {
    return this.#expiredLocally;
  }

  /** The stored state at `now`: an ACTIVE handle past its validity becomes LOST here. */
  observe(now: number): LeaseState {
    if (this.#state === "active" && now >= this.#validUntil) {
      this.#state = "lost";
      this.#expiredLocally = true;
    }
    return this.#state;
  }

  /** Local validity left at `now`; zero unless ACTIVE. */
  validFor(now: number): number {
    return this.observe(now) === "active" ? Math.max(0, this.#validUntil - now) : 0;
  }

  /** Ends local validity early (a watchdog's margin): ACTIVE becomes LOST, expired locally. */
  expireNow(now: number): LeaseState {
    if (this.observe(now) === "active") {
      this.#state = "lost";
      this.#expiredLocally = true;
    }
    return this.#state;
  }

  /** May a renew be sent at `now`? Only from ACTIVE; otherwise the refusing state. */
  beginRenew(now: number): LeaseState | null {
    const state = this.observe(now);
    return state === "active" ? null : state;
  }

  /** Applies the reply, received at `now`, to a renew sent at `sentAt`. */
  finishRenew(now: number, sentAt: number, reply: RenewReply): LeaseState {
    if (this.observe(now) !== "active") return this.#state;
    switch (reply.kind) {
      case "renewed": {
        const end = HandleCore.validityEnd(sentAt, this.ttlMs, reply.remainingMs, this.driftBudgetMs);
        this.#validUntil = Math.max(this.#validUntil, end);
        if (this.#holdUntil !== undefined) this.#validUntil = Math.min(this.#validUntil, this.#holdUntil);
        if (reply.capped === true) this.reachHoldEnd();
        break;
      }
      case "lost":
        this.#state = "lost";
        break;
      case "indeterminate":
        this.#state = "unknown";
        break;
      case "not_applied":
        break;
    }
    return this.observe(now);
  }

  /** May a release be sent at `now`? From anything but RELEASED; otherwise `released`. */
  beginRelease(now: number): LeaseState | null {
    return this.observe(now) === "released" ? "released" : null;
  }

  /** Applies a release reply received at `now`. */
  finishRelease(now: number, reply: ReleaseReply): LeaseState {
    if (this.observe(now) !== "active") return this.#state;
    switch (reply) {
      case "released":
      case "already_absent":
        this.#state = "released";
        break;
      case "not_owner":
        this.#state = "lost";
        break;
      case "indeterminate":
        this.#state = "unknown";
        break;
      case "not_applied":
        break;
    }
    return this.#state;
  }
}
