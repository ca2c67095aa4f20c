// The wire records of leasehold's HTTP API (openapi/leasehold.json), as
// this client returns them.

/** A leased resource: a purpose and the digest of the raw id (never the raw id). */
export interface Resource {
  /** `^[a-z][a-z0-9-]{0,62}$` */
  readonly purpose: string;
  /** `v1.` + 64 lowercase hex of SHA-256 of the raw id (see `digestOf`). */
  readonly digest: string;
}

/** An owner token and an operation id, created before the first acquire. */
export interface Attempt {
  /** A bearer secret: never log it. */
  readonly ownerToken: string;
  readonly operationId: string;
}

export type Mode = "exclusive" | "shared";

/** Replica acknowledgement of a write, when the service asks Redis replicas to confirm. */
export interface Replication {
  readonly acknowledged: number;
  readonly required: number;
}

/** A lease the caller holds, as acquire, replay and renew answer it. */
export interface LeaseRecord {
  readonly purpose: string;
  readonly digest: string;
  /** Strictly increasing per resource: present it to the protected resource. */
  readonly fencingToken: number;
  /** The TTL granted (a replay reports the TTL of the acquisition it replays). */
  readonly ttlMs: number;
  /** The store's remaining time to live, read in the same script run. */
  readonly remainingMs: number;
  readonly holder?: string;
  readonly acquiredAt: string;
  readonly renewedAt: string;
  readonly guarantee: "fenced";
  readonly replication?: Replication;
  /** A bounded hold (acquired with `maxHoldMs`): the bound. Renewals never reach past `holdEndsAt`. */
  readonly maxHoldMs?: number;
  /** A bounded hold's end (RFC 3339): `acquiredAt + maxHoldMs`. */
  readonly holdEndsAt?: string;
}

/** One holder of a resource, as anyone may see it. */
export interface PermitView {
  readonly holder?: string;
  readonly fencingToken: number;
  readonly remainingMs: number;
  readonly ttlMs: number;
  readonly acquiredAt: string;
  readonly renewedAt: string;
  /** Only for a bounded hold, as on `LeaseRecord`. */
  readonly maxHoldMs?: number;
  readonly holdEndsAt?: string;
}

/** Who holds a resource relative to the attempt sent with an inspect. */
export type HeldBy = "caller" | "caller_other_operation" | "other";

/** An `inspected` answer (also the `data` of every watch event). */
export interface Inspection {
  readonly outcome: "inspected";
  readonly held: boolean;
  /** Opaque; changes on acquire, release, expiry and holder change (not on renewals). */
  readonly version: string;
  readonly holders: number;
  readonly remainingMs?: number;
  readonly fencingToken?: number;
  readonly heldBy?: HeldBy;
  readonly holder?: string;
  readonly ttlMs?: number;
  readonly acquiredAt?: string;
  readonly renewedAt?: string;
  readonly limit?: number;
  readonly mode?: Mode;
  readonly permits?: readonly PermitView[];
  readonly lockDelayRemainingMs?: number;
}

/** One held resource of a listing. */
export interface ListedLease {
  readonly digest: string;
  readonly holder?: string;
  readonly fencingToken: number;
  readonly remainingMs: number;
  readonly ttlMs: number;
  readonly acquiredAt: string;
  readonly renewedAt: string;
  readonly holders: number;
  readonly limit: number;
  readonly mode: Mode;
  readonly permits?: readonly PermitView[];
}

/** A `listed` answer: one page. */
export interface Listing {
  readonly outcome: "listed";
  readonly leases: readonly ListedLease[];
  /** Send it back as `cursor` for the next page; absent when the listing is complete. */
  readonly nextCursor?: string;
}

/** Why an acquire was `contended` other than a plain holder. */
export type ContendedReason = "lock_delay" | "queued";

/**
 * Why a renew answered `lost`: `absent` (expired or released), `not_owner`
 * (someone else holds it), `revoked` (an operator broke it), `max_hold`
 * (its bounded hold ran out), or a reason from a newer service.
 */
export type LostReason = "absent" | "not_owner" | "revoked" | "max_hold" | (string & {});

/** Why a release found nothing to release, when the service says: broken by an operator, or the bounded hold ran out. */
export type AbsentReason = "revoked" | "max_hold";

/** A renew's own outcomes. */
export type RenewResult =
  | { readonly outcome: "renewed"; readonly lease: LeaseRecord }
  | { readonly outcome: "lost"; readonly reason: LostReason };

/** A release's own outcomes. */
export type ReleaseResult =
  | { readonly outcome: "released" }
  /** `reason: "revoked"` when an operator broke the caller's permit, `"max_hold"` when its bounded hold ran out. */
  | { readonly outcome: "already_absent"; readonly reason?: AbsentReason }
  | { readonly outcome: "not_owner" };

/** One event of a watch stream. */
export interface WatchEvent {
  /** `state`, `acquired`, `released`, `expired`, `holder_changed` (or a later kind). */
  readonly event: string;
  /** The new version; send it back as `Last-Event-ID` to resume. */
  readonly id: string;
  /** The lease as it stands after the change (no `heldBy`). */
  readonly state: Inspection;
}

/** Who leads an election, as inspect shows it. */
export interface Leader {
  /** The leader's holder label; undefined when nobody leads or no label was given. */
  readonly holder: string | undefined;
  /** The leader's fencing token; undefined when nobody leads. */
  readonly fencingToken: number | undefined;
}

/** Per-call options every verb accepts. */
export interface CallOptions {
  /** Abort the call (a request that may have been sent is then `indeterminate`). */
  readonly signal?: AbortSignal;
  /** Overrides the client's request timeout for this call (an acquire adds its `waitMs`). */
  readonly timeoutMs?: number;
}
